"""A response's output audio on its way to the session's format: one resampler stream each.

Engine output is converted with one :class:`~omni_grpc.audio.OutputConverter` per response,
made on the response's first audio that needs it, so the filter runs across chunk seams (no
restart, no click) and a chunk costs no filter set-up. Responses may run at once
(out-of-band ones beside the running one): each stream is looked up by its response's id, so
their interleaved chunks never pass through one filter. The filter holds back a few
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


# Streams kept at once: the running response's and the out-of-band responses' beside it (at
# most MAX_OUT_OF_BAND_RESPONSES); past it the oldest goes (a response that never said it ended).
STREAMS_KEPT = 8


class _Stream:
    """One response's conversion: its resampler and where its audio is on its clock."""

    __slots__ = ("converter", "item_id", "origin_ms", "samples")

    def __init__(self, converter: audio.OutputConverter, origin_ms: float) -> None:
        self.converter = converter
        self.item_id = ""
        self.origin_ms = origin_ms  # where the response's converted audio starts on its clock
        self.samples = 0  # output samples sent so far


class ResponseOutput:
    """The output streams of the responses whose audio is being converted, by response: the
    running response's, and those of out-of-band responses that run beside it, each its own
    resampler (interleaved chunks of two responses never share a filter)."""

    __slots__ = ("_streams",)

    def __init__(self) -> None:
        # Oldest first; empty when nothing is converted (nothing held back).
        self._streams: dict[str, _Stream] = {}

    @property
    def converting(self) -> bool:
        """Whether some response's audio is being converted (its filter may hold some)."""
        return bool(self._streams)

    def convert(self, delta: pb.OutputAudioDelta, target: pb.AudioFormat) -> bool:
        """Rewrites ``delta`` in place into ``target``; False when none of its audio is ready
        yet (the filter holds all of it until the response's next chunk or its end)."""
        encoding = delta.encoding or PCM16
        rate = delta.sample_rate_hz or CANONICAL_OUTPUT_RATE_HZ
        stream = self._streams.get(delta.response_id)
        if stream is not None and (stream.converter.encoding, stream.converter.rate_hz) != (
            target.encoding,
            target.sample_rate_hz,
        ):
            # A session update that changed the output format mid-response: that stream's few
            # held-back milliseconds are lost.
            del self._streams[delta.response_id]
            stream = None
        if stream is None and (encoding, rate) == (target.encoding, target.sample_rate_hz):
            delta.encoding, delta.sample_rate_hz = encoding, rate
            return True
        held = b""
        if stream is None:
            converter = audio.OutputConverter(
                target.encoding, target.sample_rate_hz, rate, encoding
            )
            stream = self._streams[delta.response_id] = _Stream(converter, delta.start_ms)
            while len(self._streams) > STREAMS_KEPT:
                del self._streams[next(iter(self._streams))]
        elif (stream.converter.source_encoding, stream.converter.source_rate_hz) != (
            encoding,
            rate,
        ):
            held = stream.converter.flush()  # the engine changed its form: the old tail first
            stream.converter = audio.OutputConverter(
                target.encoding, target.sample_rate_hz, rate, encoding
            )
        stream.item_id = delta.item_id
        self._stamp(stream, delta, held + stream.converter.convert(delta.audio))
        return bool(delta.audio)

    def end(self, kind: str, event: pb.ConverseResponse) -> pb.ConverseResponse | None:
        """After ``kind`` in :data:`OUTPUT_ENDING_EVENTS`: drops the response's stream and
        returns its held-back tail as a last delta to send before ``event``, if it completed."""
        if not self._streams:
            return None
        if kind == "response_done":
            response_id = event.response_done.response.id
            said = event.response_done.response.status != pb.RESPONSE_STATUS_CANCELLED
        else:
            response_id, said = event.output_audio_cleared.response_id, False
        if not response_id:  # the running one: the newest stream
            response_id = next(reversed(self._streams))
        stream = self._streams.pop(response_id, None)
        if stream is None:
            return None  # a response whose audio was not converted
        tail = stream.converter.flush() if said else b""
        if not tail:
            return None
        delta = pb.OutputAudioDelta(response_id=response_id, item_id=stream.item_id)
        self._stamp(stream, delta, tail)
        return pb.ConverseResponse(output_audio_delta=delta)

    @staticmethod
    def _stamp(stream: _Stream, delta: pb.OutputAudioDelta, converted: bytes) -> None:
        """Puts ``converted`` in ``delta``, placed after the response's audio sent so far."""
        converter = stream.converter
        rate = converter.rate_hz
        samples = len(converted) // SAMPLE_WIDTH[converter.encoding]
        delta.audio = converted
        delta.encoding = pb.AudioEncoding.ValueType(converter.encoding)
        delta.sample_rate_hz = rate
        delta.start_ms = stream.origin_ms + stream.samples * 1000.0 / rate
        delta.duration_ms = samples * 1000.0 / rate
        stream.samples += samples
