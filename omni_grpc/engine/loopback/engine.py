"""The loopback engine: needs no model, and hosts its sessions."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from omni_grpc.core.limits import EngineFeatures
from omni_grpc.engine import kit
from omni_grpc.engine.base import Engine
from omni_grpc.engine.kit import denoise
from omni_grpc.engine.loopback.options import LoopbackOptions
from omni_grpc.engine.loopback.session import LoopbackSession
from omni_grpc.wire import pb
from omni_grpc.wire.pcm import SUPPORTED_RATES_HZ

TRANSCRIPTION_MODELS = ("loopback-words",)

FEATURES = EngineFeatures(
    name="loopback",
    default_model="loopback",
    supports_server_vad=False,
    supports_barge_in=True,
    supports_playback_ack=True,
    supports_input_audio_items=True,  # echoed as a committed turn is
    item_audio_kept_ms=kit.ITEM_AUDIO_KEPT_MS,
    # Out-of-band responses run as tasks of their own beside the running one.
    supports_out_of_band_responses=True,
    out_of_band_beside_response=True,
    # Its transcripts (transcription sessions only) say how long a turn was; each word is
    # certain, so its logprobs are there to give.
    transcription_models=TRANSCRIPTION_MODELS,
    supports_transcription_logprobs=True,
    # Counts a word a token (and 100 ms of a user's audio) against context_tokens.
    supports_truncation=True,
    # RNNoise before what hears the input (kit/denoise.py); none where it is not installed.
    noise_reduction_types=denoise.TYPES,
)


class LoopbackEngine(Engine):
    """Hosts loopback sessions; ``options`` as in the package docstring."""

    def __init__(
        self, options: Mapping[str, str] | None = None, *, clock: kit.Clock = kit.MONOTONIC
    ) -> None:
        """``clock``: what its sessions pace their output and time their turns on (a test's,
        to read the schedule without waiting for it)."""
        self.options = LoopbackOptions.parse(options or {})
        self._clock = clock
        # The mirror answers each append in its own format, so any pcm16 rate is native to it.
        mirror = self.options.mode == "mirror"
        features = replace(FEATURES, capacity=self.options.capacity)
        # The mirror sends each append straight back, untouched: it reduces no noise.
        self.features = (
            replace(features, native_input_rates_hz=SUPPORTED_RATES_HZ, noise_reduction_types=())
            if mirror
            else replace(features, noise_reduction_types=denoise.offered())
        )
        self._sessions: set[LoopbackSession] = set()

    async def open_session(self, session_id: str, config: pb.SessionConfig) -> LoopbackSession:
        session = LoopbackSession(
            session_id, config, self.options, self._sessions.discard, clock=self._clock
        )
        self._sessions.add(session)
        return session

    async def stop(self) -> None:
        """Closes every session still open."""
        for session in list(self._sessions):
            await session.close()
