"""Audio at the edge: whatever the client speaks in, engines hear one form, and back.

Engines take :data:`CANONICAL_INPUT` and produce :data:`CANONICAL_OUTPUT`. Appends in any other
encoding or rate are converted here, on the submitter task (off the stream's reader), and output
chunks are converted to the session's ``output_audio_format`` before they are journaled. Most
sessions already speak the canonical forms, and then nothing is copied.
"""

from __future__ import annotations

from omni_grpc import audio
from omni_grpc.engine.base import CANONICAL_INPUT, CANONICAL_OUTPUT
from omni_grpc.pb import pb


def _same(encoding: int, rate_hz: int, fmt: pb.AudioFormat) -> bool:
    return encoding == fmt.encoding and rate_hz == fmt.sample_rate_hz


class AudioEdge:
    """Converts one session's audio between its wire formats and the canonical ones."""

    def __init__(self, config: pb.SessionConfig) -> None:
        self.config = config
        self._input: audio.StreamResampler | None = None
        self._input_key: tuple[int, int] | None = None

    def canonical_input(self, request: pb.ConverseRequest) -> pb.ConverseRequest:
        """Returns the append with its audio in the canonical input form."""
        append = request.append_input_audio
        encoding = append.encoding or self.config.input_audio_format.encoding
        rate = append.sample_rate_hz or self.config.input_audio_format.sample_rate_hz
        if not append.audio or _same(encoding, rate, CANONICAL_INPUT):
            append.encoding, append.sample_rate_hz = CANONICAL_INPUT.encoding, 16000
            return request
        if self._input_key != (encoding, rate) or self._input is None:
            # The resampler keeps filter state between chunks so chunk seams stay clean.
            self._input = audio.StreamResampler(encoding, rate, CANONICAL_INPUT.encoding,
                                                CANONICAL_INPUT.sample_rate_hz)
            self._input_key = (encoding, rate)
        append.audio = self._input.process(append.audio)
        append.encoding = CANONICAL_INPUT.encoding
        append.sample_rate_hz = CANONICAL_INPUT.sample_rate_hz
        return request

    def session_output(self, delta: pb.OutputAudioDelta) -> None:
        """Rewrites a canonical output chunk in place into the session's output format."""
        target = self.config.output_audio_format
        encoding = delta.encoding or CANONICAL_OUTPUT.encoding
        rate = delta.sample_rate_hz or CANONICAL_OUTPUT.sample_rate_hz
        if _same(encoding, rate, target):
            delta.encoding, delta.sample_rate_hz = encoding, rate
            return
        # Output chunks are whole, independent pieces of a response (each may be the last
        # before a cancel), so they are converted one by one rather than as one stream.
        delta.audio = audio.convert(delta.audio, encoding, rate, target.encoding,
                                    target.sample_rate_hz)
        delta.encoding, delta.sample_rate_hz = target.encoding, target.sample_rate_hz
