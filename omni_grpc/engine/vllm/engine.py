"""The vllm engine: one vLLM runtime (model, KV cache, scheduler) shared by every session."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

from omni_grpc.core.limits import EngineFeatures
from omni_grpc.engine import kit
from omni_grpc.engine.base import Engine
from omni_grpc.engine.kit.listening_session import Hearing
from omni_grpc.engine.kit.tts import Espeak, TtsUnavailable
from omni_grpc.engine.vllm.options import VllmOptions
from omni_grpc.engine.vllm.runtime import VllmRuntime, VllmUnavailable
from omni_grpc.engine.vllm.session import VllmSession
from omni_grpc.wire import pb

FEATURES = EngineFeatures(
    name="vllm",
    default_model="",  # the engine's model option, filled in per engine
    supports_server_vad=True,  # Silero on a CPU thread (server_vad=off turns it off)
    supports_barge_in=True,
    supports_playback_ack=True,
    supports_parallel_tool_calls=True,  # the tool parser reads every call the model writes
    supports_input_audio_items=True,  # the model hears them as it hears a committed turn
    item_audio_kept_ms=kit.ITEM_AUDIO_KEPT_MS,
    # Auto alone: its prompt keeps the newest history_items items and vLLM fits them to
    # max_model_len; the tokens of a turn's audio are the model's processor's to count, so a
    # retention ratio, a token limit or disabled truncation is refused (unsupported_truncation).
    supports_truncation=False,
    extra={"runtime": "vLLM AsyncLLM", "speech": "espeak-ng"},
)


class VllmEngine(Engine):
    """Audio-in sessions on vLLM, spoken with espeak-ng; options in :mod:`.options`.

    ``runtime`` lets several engines share one loaded vLLM (tests load the model once for
    many engines that differ in how they sample and speak); the vLLM settings of ``options``
    must then be the runtime's. An engine stops only a runtime it made itself.
    """

    def __init__(
        self, options: Mapping[str, str] | None = None, *, runtime: VllmRuntime | None = None
    ) -> None:
        if runtime is not None and options is None:
            self.options = runtime.options
        else:
            self.options = VllmOptions.parse(options or {})
        if runtime is not None and (
            runtime.options.engine_args() != self.options.engine_args()
            or runtime.options.audio_placeholder != self.options.audio_placeholder
        ):
            raise ValueError("the shared vLLM runtime was started with other vLLM options")
        self.runtime = runtime or VllmRuntime(self.options)
        self._owns_runtime = runtime is None
        # As many sessions as vLLM batches (0, vLLM's own default: none it tells).
        self.features = dataclasses.replace(
            FEATURES,
            default_model=self.options.model,
            supports_server_vad=self.options.server_vad == "on",
            capacity=self.options.max_num_seqs,
        )
        self._tts: Espeak | None = None
        self._hearing: Hearing | None = None
        self._sessions: set[VllmSession] = set()

    async def start(self) -> None:
        """Loads the model into vLLM (tens of seconds on a CPU, minutes for a big model)."""
        if self._tts is None:
            try:
                self._tts = Espeak(words_per_minute=self.options.words_per_minute)
            except TtsUnavailable as error:
                raise VllmUnavailable(str(error)) from error
        if self._hearing is None:
            from omni_grpc.engine.kit.vad import SileroVad

            # One thread for every session's VAD: a 32 ms window is well under a millisecond
            # of a CPU that the model (on its GPU) leaves free.
            executor = ThreadPoolExecutor(1, thread_name_prefix="vllm-vad")
            self._hearing = Hearing(SileroVad(), executor)
        await self.runtime.start()

    async def open_session(self, session_id: str, config: pb.SessionConfig) -> VllmSession:
        await self.start()
        assert self._tts is not None and self._hearing is not None
        session = VllmSession(
            session_id,
            config,
            self.options,
            self.runtime,
            self._tts,
            self._hearing,
            self._sessions.discard,
        )
        self._sessions.add(session)
        return session

    async def stop(self) -> None:
        """Closes every session, then shuts vLLM down if this engine started it."""
        await asyncio.gather(*(session.close() for session in list(self._sessions)))
        if self._hearing is not None:
            self._hearing.executor.shutdown(wait=False, cancel_futures=True)
            self._hearing = None
        if self._owns_runtime:
            await self.runtime.stop()
