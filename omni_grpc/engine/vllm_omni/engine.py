"""The vllm-omni engine: sessions held by vLLM-Omni's ``DuplexOmni``, translated to ours."""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import importlib.util
from collections.abc import Mapping
from typing import Any

from omni_grpc.core.limits import EngineFeatures
from omni_grpc.engine.base import Engine, EngineError
from omni_grpc.engine.vllm_omni.commands import realtime_session
from omni_grpc.engine.vllm_omni.options import VllmOmniOptions
from omni_grpc.engine.vllm_omni.session import VllmOmniSession
from omni_grpc.wire import pb

FEATURES = EngineFeatures(
    name="vllm-omni",
    default_model="",  # the engine's model option, filled in per engine
    supports_server_vad=False,
    supports_barge_in=True,
    supports_playback_ack=True,
    chunk_period_ms=1000,  # MiniCPM-o 4.5's unit, the model this engine serves
    # Auto alone: the conversation is vLLM-Omni's own, and its context is cut there.
    supports_truncation=False,
    extra={"runtime": "vLLM-Omni DuplexOmni", "speech": "the model's own"},
)


class VllmOmniUnavailable(EngineError, RuntimeError):
    """vLLM-Omni is missing or could not start; the message says what to do."""


class VllmOmniEngine(Engine):
    """Natively duplex models behind vLLM-Omni; options in :mod:`.options`.

    ``omni`` is a ready ``DuplexOmni`` (or an object with its session API) to use instead of
    starting one; its owner shuts it down. Tests pass one built on vLLM-Omni's real session
    layer, since ``DuplexOmni``'s stage workers need GPUs.
    """

    def __init__(self, options: Mapping[str, str] | None = None, *, omni: Any = None) -> None:
        self.options = VllmOmniOptions.parse(options or {})
        if omni is None and importlib.util.find_spec("vllm_omni") is None:
            raise VllmOmniUnavailable(
                "the vllm-omni engine needs the vllm-omni package (and vllm) on a GPU machine: "
                "pip install vllm-omni"
            )
        self.features = dataclasses.replace(
            FEATURES, default_model=self.options.model, capacity=self.options.max_sessions
        )
        self._omni = omni
        self._owns_omni = omni is None
        self._commands: Any = None
        self._sessions: set[VllmOmniSession] = set()
        self._starting = asyncio.Lock()

    async def start(self) -> None:
        """Starts ``DuplexOmni`` (its stage workers load the model: minutes on GPUs)."""
        async with self._starting:
            if self._commands is not None:
                return
            self._commands = importlib.import_module("vllm_omni.engine.duplex.commands")
            if self._omni is None:
                try:
                    self._omni = self._start_omni()
                except Exception as error:
                    raise VllmOmniUnavailable(f"vLLM-Omni could not start: {error}") from error

    def _start_omni(self) -> Any:
        duplex = importlib.import_module("vllm_omni.entrypoints.duplex_omni")
        kwargs: dict[str, object] = {"trust_remote_code": self.options.trust_remote_code}
        if self.options.deploy_config:
            kwargs["deploy_config"] = self.options.deploy_config
        return duplex.DuplexOmni(model=self.options.model, **kwargs)

    def _defaults(self) -> dict[str, object]:
        defaults: dict[str, object] = {"auto_response": self.options.auto_response}
        if self.options.ref_audio:
            defaults["ref_audio"] = self.options.ref_audio
        return defaults

    async def open_session(self, session_id: str, config: pb.SessionConfig) -> VllmOmniSession:
        await self.start()
        defaults = self._defaults()
        try:
            handle = await self._omni.open_session(
                realtime_session(config, defaults), timeout=self.options.control_timeout_s
            )
        except Exception as error:  # DuplexSessionError: refused, full, timed out
            raise EngineError(f"vLLM-Omni refused the session: {error}") from error
        session = VllmOmniSession(
            session_id,
            config,
            handle,
            self._commands,
            defaults,
            self.options.control_timeout_s,
            self._sessions.discard,
        )
        self._sessions.add(session)
        return session

    async def stop(self) -> None:
        """Closes every session, then shuts ``DuplexOmni`` down if this engine started it."""
        await asyncio.gather(*(session.close() for session in list(self._sessions)))
        if self._owns_omni and self._omni is not None:
            omni, self._omni = self._omni, None
            await asyncio.to_thread(omni.shutdown)
