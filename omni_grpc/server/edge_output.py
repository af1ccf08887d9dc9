"""A response's output audio on its way to the session's format: one resampler stream each.

Engine output is converted with one :class:`~omni_grpc.audio.OutputConverter` per response,
made on the response's first audio that needs it, so the filter runs across chunk seams (no
restart, no click) and a chunk costs no filter set-up. The filter holds back a few
milliseconds: each delta carries the audio that is ready, and the end of the response
(``response_done``) brings the rest as one last delta before it. A cancelled response, or
one whose output was cleared, leaves its held-back tail unsaid: the client asked for silence.

Because a delta carries what is ready rather than what the engine put in it, its
``start_ms`` and ``duration_ms`` are rewritten to the audio it really holds on the
response's clock (from the first chunk's ``start_ms``), so that they still describe its bytes.
"""

from __future__ import annotations

from omni_grpc import audio
from omni_grpc.wire import pb
from omni_grpc.wire.pcm import CANONICAL_OUTPUT_RATE_HZ, SAMPLE_WIDTH

PCM16 = pb.AUDIO_ENCODING_PCM16
# The events after which nothing more of a response's audio comes.
OUTPUT_ENDING_EVENTS = frozenset({"response_done", "output_audio_cleared"})


class ResponseOutput:
    """The output stream of the response whose audio is being converted, if any."""

    __slots__ = ("converter", "_item_id", "_origin_ms", "_response_id", "_samples")

    def __init__(self) -> None:
        # The resampler of the response being converted; None when none is (nothing held back).
        self.converter: audio.OutputConverter | None = None
        self._response_id = ""
        self._item_id = ""
        self._origin_ms = 0.0  # where the response's converted audio starts on its clock
        self._samples = 0  # output samples sent so far

    def convert(self, delta: pb.OutputAudioDelta, target: pb.AudioFormat) -> bool:
        """Rewrites ``delta`` in place into ``target``; False when none of its audio is ready
        yet (the filter holds all of it until the response's next chunk or its end)."""
        encoding = delta.encoding or PCM16
        rate = delta.sample_rate_hz or CANONICAL_OUTPUT_RATE_HZ
        stream = self.converter
        if stream is not None and (
            delta.response_id != self._response_id
            or (stream.encoding, stream.rate_hz) != (target.encoding, target.sample_rate_hz)
        ):
            # A response that never said it ended, or a session update that changed the
            # output format mid-response: that stream's few held-back milliseconds are lost.
            stream = self.converter = None
        if stream is None and (encoding, rate) == (target.encoding, target.sample_rate_hz):
            delta.encoding, delta.sample_rate_hz = encoding, rate
            return True
        held = b""
        if stream is None:
            self._response_id, self._origin_ms, self._samples = delta.response_id, delta.start_ms, 0
        elif (stream.source_encoding, stream.source_rate_hz) != (encoding, rate):
            held = stream.flush()  # the engine changed its form: the old tail goes first
            stream = None
        if stream is None:
            stream = self.converter = audio.OutputConverter(
                target.encoding, target.sample_rate_hz, rate, encoding
            )
        self._item_id = delta.item_id
        self._stamp(delta, held + stream.convert(delta.audio), stream)
        return bool(delta.audio)

    def end(self, kind: str, event: pb.ConverseResponse) -> pb.ConverseResponse | None:
        """After ``kind`` in :data:`OUTPUT_ENDING_EVENTS`: drops the response's stream and
        returns its held-back tail as a last delta to send before ``event``, if it completed."""
        stream = self.converter
        if stream is None:
            return None
        if kind == "response_done":
            response_id = event.response_done.response.id
            said = event.response_done.response.status != pb.RESPONSE_STATUS_CANCELLED
        else:
            response_id, said = event.output_audio_cleared.response_id, False
        if response_id and response_id != self._response_id:
            return None  # another response's end: this stream goes on
        self.converter = None
        tail = stream.flush() if said else b""
        if not tail:
            return None
        delta = pb.OutputAudioDelta(response_id=self._response_id, item_id=self._item_id)
        self._stamp(delta, tail, stream)
        return pb.ConverseResponse(output_audio_delta=delta)

    def _stamp(
        self, delta: pb.OutputAudioDelta, converted: bytes, stream: audio.OutputConverter
    ) -> None:
        """Puts ``converted`` in ``delta``, placed after the response's audio sent so far."""
        rate = stream.rate_hz
        samples = len(converted) // SAMPLE_WIDTH[stream.encoding]
        delta.audio = converted
        delta.encoding = pb.AudioEncoding.ValueType(stream.encoding)
        delta.sample_rate_hz = rate
        delta.start_ms = self._origin_ms + self._samples * 1000.0 / rate
        delta.duration_ms = samples * 1000.0 / rate
        self._samples += samples
