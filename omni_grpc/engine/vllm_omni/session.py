"""One vllm-omni conversation: our commands into a vLLM-Omni session handle, its events out.

vLLM-Omni's session runs inside its engine and owns all conversation state (turns, the
listen/speak decisions, epochs, barge-in, the playback ledger); this side only translates.
Commands are translated and submitted in order; a command vLLM-Omni has no equal of is
refused here with an ``error`` event. A pump reads the handle's events, translates them
(:mod:`.events`) and queues them, bounded, for ``events``; a full queue holds the pump back,
and with it vLLM-Omni's delivery to this session.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from omni_grpc.core.errors import CommandError
from omni_grpc.engine.base import EngineError, EngineSession
from omni_grpc.engine.loopback.outbox import Outbox
from omni_grpc.engine.vllm_omni.commands import Correlation, command_for, realtime_session
from omni_grpc.engine.vllm_omni.events import TERMINAL, EventTranslator
from omni_grpc.wire import pb

logger = logging.getLogger(__name__)

_QUEUE_SIZE = 256
_CLEARS_INPUT = frozenset({"clear_input_audio", "cancel_input", "barge_in"})


class VllmOmniSession(EngineSession):
    """One conversation held by vLLM-Omni's session layer; see the module docstring."""

    def __init__(
        self,
        session_id: str,
        config: pb.SessionConfig,
        handle: Any,  # vllm_omni's DuplexSessionHandle
        commands: Any,  # the vllm_omni.engine.duplex.commands module
        defaults: dict[str, object],
        timeout_s: float,
        on_close: Callable[[VllmOmniSession], None],
    ) -> None:
        self.id = session_id
        self.config = config
        self.handle = handle
        self._commands = commands
        self._defaults = defaults
        self._timeout_s = timeout_s
        self._on_close = on_close
        self._correlation = Correlation(session_id)
        self._translator = EventTranslator(self._correlation.command)
        self._outbox = Outbox(_QUEUE_SIZE)
        self._closed = False
        self._failure: BaseException | None = None
        self._pump = asyncio.create_task(self._read(), name=f"vllm-omni-{session_id}")

    def __repr__(self) -> str:
        return f"VllmOmniSession({self.id} = {self.handle.session_id})"

    async def submit(self, request: pb.ConverseRequest) -> None:
        if self._closed or self._failure is not None:
            logger.debug("session %s: command after the end ignored", self.id)
            return
        kind = request.WhichOneof("command")
        event_id = self._correlation.event_id(request)
        try:
            if kind == "update_session":
                self.config = request.update_session.config
                patch = realtime_session(self.config, self._defaults)
                command = self._commands.UpdateSession(patch=patch, event_id=event_id)
            else:
                answers = (
                    None
                    if self._defaults.get("auto_response")
                    else self.config.turn_detection.create_response
                )
                command = command_for(request, self._commands, event_id, answers)
        except CommandError as error:
            body = error.to_error(client_seq=request.client_seq, event_id=request.event_id)
            await self._outbox.put(pb.ConverseResponse(error=body))
            return
        if kind == "append_input_audio":
            self._translator.appended(len(request.append_input_audio.audio) / 32)
        elif kind in _CLEARS_INPUT:
            self._translator.cleared()
        elif kind == "commit_input_audio":
            self._translator.committing()
        await self.handle.submit(command)

    async def events(self) -> AsyncIterator[pb.ConverseResponse]:
        while (event := await self._outbox.get()) is not None:
            yield event
        if self._failure is not None:
            raise EngineError(f"vllm-omni session {self.id} failed") from self._failure

    async def _read(self) -> None:
        try:
            async for event in self.handle.events():
                wire = event.to_realtime()
                if wire.get("type") in TERMINAL:
                    if not self._closed:  # vLLM-Omni ended it (expiry, an engine fault)
                        reason = event.reason if hasattr(event, "reason") else wire.get("type")
                        self._failure = EngineError(f"vLLM-Omni ended the session: {reason}")
                    break
                for translated in self._translator.translate(wire):
                    await self._outbox.put(translated)
        except Exception as error:  # a fault here must end the session, not hang it
            logger.exception("session %s: reading vLLM-Omni events failed", self.id)
            self._failure = error
        self._outbox.end(drop=self._closed)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            await self.handle.close(reason="client_close", timeout=self._timeout_s)
        except Exception as error:  # the session is gone on vLLM-Omni's side either way
            logger.warning("session %s: vLLM-Omni close failed: %s", self.id, error)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._pump), self._timeout_s)
        if not self._pump.done():
            self._pump.cancel()
            await asyncio.wait([self._pump])
        self._outbox.end(drop=True)
        self._on_close(self)
