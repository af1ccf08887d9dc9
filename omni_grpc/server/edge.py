"""Audio at the edge: whatever the client speaks in, engines hear a form they take, and back.

Engines take pcm16 at the rates they declare native (``EngineFeatures.native_input_rates_hz``;
:data:`CANONICAL_INPUT` unless they say more) and produce :data:`CANONICAL_OUTPUT` unless a
delta names its own format. The core decided, when it admitted an append, whether its format is
native (``AppendAudio.native``): such an append goes to the engine as it is; for any other
the edge returns a new value, its audio converted to canonical input, as the stream's reader
hands it to the engine (values are frozen: nothing is changed in place). Output chunks
are converted to the session's ``output_audio_format`` before they are journaled, and only when
their format differs from it, with one resampler stream per response (:mod:`.edge_output`).
The audio of a conversation item is whole: a created item's goes to the engine as canonical
input, and a retrieved item's (canonical input, as the engine kept it) goes back in the
session's ``input_audio_format``, each converted at once.
"""

from __future__ import annotations

from omni_grpc import audio
from omni_grpc.core.commands import AppendAudio, CommitAudio, CreateItem
from omni_grpc.server.edge_output import OUTPUT_ENDING_EVENTS, ResponseOutput
from omni_grpc.wire import pb
from omni_grpc.wire.pcm import CANONICAL_INPUT, SAMPLE_WIDTH

PCM16 = pb.AUDIO_ENCODING_PCM16
# Appends above this many bytes are converted slice by slice (a multiple of every sample width).
CONVERT_SLICE_BYTES = 256 * 1024


def _same(encoding: int, rate_hz: int, fmt: pb.AudioFormat) -> bool:
    return encoding == fmt.encoding and rate_hz == fmt.sample_rate_hz


class AudioEdge:
    """Converts one session's audio between its wire formats and the canonical ones."""

    def __init__(self, config: pb.SessionConfig) -> None:
        self.config = config
        # The session's output format as plain numbers, compared with each chunk's.
        self._output_format = (
            config.output_audio_format.encoding,
            config.output_audio_format.sample_rate_hz,
        )
        # Keeps resampler state across appends so chunk seams stay clean.
        self._input = audio.InputConverter()
        self._converting = False
        self._output = ResponseOutput()
        self.last_tail = b""  # the last commit's resampler tail, which the engine heard

    def engine_input(self, append: AppendAudio) -> AppendAudio | None:
        """The admitted append in the form the engine gets: itself when the core found it
        native, else a new value with its audio converted to the canonical input form. None
        when the audio cannot be decoded after all (the caller refuses the append)."""
        if append.native:
            return append
        encoding, rate = append.encoding, append.rate_hz
        audio = append.audio
        if audio and not _same(encoding, rate, CANONICAL_INPUT):
            try:
                audio = self._convert(audio, encoding, rate)
            except ValueError:  # audio.AudioFormatError: the core's checks should prevent it
                return None
            self._converting = True
        return append._replace(
            audio=audio,
            encoding=CANONICAL_INPUT.encoding,
            rate_hz=CANONICAL_INPUT.sample_rate_hz,
            native=True,
        )

    def _convert(self, data: bytes, encoding: int, rate: int) -> bytes:
        # A large append goes through in slices: the float copies decoding and resampling make
        # stay a slice long instead of several times the whole append (the resampler keeps its
        # state between slices, so the result is the same).
        if len(data) <= CONVERT_SLICE_BYTES or len(data) % SAMPLE_WIDTH[encoding]:
            return self._input.convert(data, encoding, rate)
        whole = memoryview(data)
        return b"".join(
            self._input.convert(bytes(whole[start : start + CONVERT_SLICE_BYTES]), encoding, rate)
            for start in range(0, len(data), CONVERT_SLICE_BYTES)
        )

    def input_tail(self, commit: CommitAudio) -> AppendAudio | None:
        """Before a commit: the few milliseconds the resampler still holds, as an append
        (kept as :attr:`last_tail` too, for a recording)."""
        self.last_tail = b""
        if not self._converting:
            return None
        self._converting = False
        tail = self.last_tail = self._input.flush()
        if not tail:
            return None
        return AppendAudio(
            tail,
            CANONICAL_INPUT.encoding,
            CANONICAL_INPUT.sample_rate_hz,
            True,
            commit.client_seq,
        )

    def drop_input(self) -> None:
        """The input buffer was cleared: forget held-back audio."""
        self._input.reset()
        self._converting = False

    def item_input(self, create: CreateItem) -> CreateItem | None:
        """A created item with its audio as canonical input (a new value; the client's is in
        the session's input format); None when some of it cannot be decoded."""
        fmt = self.config.input_audio_format
        item = pb.ConversationItem()
        item.CopyFrom(create.item)
        for part in item.content:
            if part.audio:
                try:
                    part.audio = audio.to_canonical_input(
                        part.audio, fmt.encoding, fmt.sample_rate_hz
                    )
                except ValueError:  # audio.AudioFormatError: torn samples, or no audio
                    return None
        return create._replace(item=item)

    def item_output(self, item: pb.ConversationItem) -> None:
        """Rewrites a retrieved item's audio, in place, from canonical input (what the engine
        kept) into the session's input format, as the client sent it."""
        fmt = self.config.input_audio_format
        if _same(fmt.encoding, fmt.sample_rate_hz, CANONICAL_INPUT):
            return
        for part in item.content:
            if part.audio:
                samples = audio.decode(part.audio, PCM16, CANONICAL_INPUT.sample_rate_hz)
                resampled = audio.resample(
                    samples, CANONICAL_INPUT.sample_rate_hz, fmt.sample_rate_hz
                )
                part.audio = audio.encode(resampled, fmt.encoding, fmt.sample_rate_hz)

    def configure(self, config: pb.SessionConfig) -> None:
        """Takes the session's configuration in force (an update may change its formats)."""
        self.config = config
        fmt = config.output_audio_format
        self._output_format = (fmt.encoding, fmt.sample_rate_hz)

    def session_output(self, delta: pb.OutputAudioDelta) -> bool:
        """Rewrites an output chunk in place into the session's output format; False when
        none of its audio is ready yet (the resampler holds it), so it is not to be sent."""
        encoding, rate_hz = self._output_format
        if (
            not self._output.converting
            and delta.encoding == encoding
            and delta.sample_rate_hz == rate_hz
        ):
            return True  # the usual chunk: already in the session's format, nothing held back
        return self._output.convert(delta, self.config.output_audio_format)

    def output_tail(self, kind: str, event: pb.ConverseResponse) -> pb.ConverseResponse | None:
        """At a response's end (``kind`` in :data:`OUTPUT_ENDING_EVENTS`): the audio its
        resampler still holds, as a last delta to send before ``event``; None on a cancel."""
        return self._output.end(kind, event)


__all__ = ["CONVERT_SLICE_BYTES", "OUTPUT_ENDING_EVENTS", "AudioEdge"]
