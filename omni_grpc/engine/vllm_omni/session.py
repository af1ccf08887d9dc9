"""One vllm-omni conversation: our commands into a vLLM-Omni session handle, its events out.

vLLM-Omni's session runs inside its engine and owns all conversation state (turns, the
listen/speak decisions, epochs, barge-in, the playback ledger); this side only translates.
It is the kit's :class:`~omni_grpc.engine.kit.WorkerSession`: the worker translates each
command and submits it in order; a command vLLM-Omni has no equal of is refused here with
an ``error`` event. A pump reads the handle's events, translates them (:mod:`.events`) and
queues them, bounded, for ``events``; a full queue holds the pump back, and with it
vLLM-Omni's delivery to this session.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from omni_grpc.core import commands as cmd
from omni_grpc.engine import kit
from omni_grpc.engine.base import EngineError
from omni_grpc.engine.vllm_omni.commands import Correlation, command_for, realtime_session
from omni_grpc.engine.vllm_omni.events import TERMINAL, EventTranslator
from omni_grpc.wire import pb
from omni_grpc.wire.pcm import CANONICAL_INPUT_RATE_HZ, pcm16_ms

logger = logging.getLogger(__name__)

QUEUE_SIZE = 256


class VllmOmniSession(kit.WorkerSession):
    """One conversation held by vLLM-Omni's session layer; see the module docstring."""

    engine_name = "vllm-omni"

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
        super().__init__(session_id, config, queue_size=QUEUE_SIZE, on_close=on_close)
        self.handle = handle
        self._commands = commands
        self._defaults = defaults
        self._timeout_s = timeout_s
        self._correlation = Correlation(session_id)
        self._translator = EventTranslator(self._correlation.command)
        self._pump = asyncio.create_task(self._read(), name=f"vllm-omni-{session_id}-events")

    def __repr__(self) -> str:
        return f"VllmOmniSession({self.id} = {self.handle.session_id})"

    def _command_handlers(self) -> kit.Handlers:
        # Every command is translated; what vLLM-Omni has no equal of is refused there.
        return dict.fromkeys(cmd.KINDS, self._forward)

    async def _forward(self, command: cmd.EngineCommand) -> None:
        """Translates one command (a refusal raises CommandError) and submits it."""
        event_id = self._correlation.event_id(command)
        if isinstance(command, cmd.UpdateSession):
            self.config = command.config
            patch = realtime_session(self.config, self._defaults)
            theirs = self._commands.UpdateSession(patch=patch, event_id=event_id)
        else:
            # Who answers a commit: vLLM-Omni's model itself, or the session's turn detection.
            answers = (
                None
                if self._defaults.get("auto_response")
                else self.config.turn_detection.create_response
            )
            theirs = command_for(command, self._commands, event_id, answers)
        match command:
            case cmd.AppendAudio(audio=audio):
                self._translator.appended(pcm16_ms(len(audio), CANONICAL_INPUT_RATE_HZ))
            case cmd.ClearAudio() | cmd.CancelInput() | cmd.BargeIn():
                self._translator.cleared()
            case cmd.CommitAudio():
                self._translator.committing()
        await self.handle.submit(theirs)

    async def _read(self) -> None:
        try:
            async for event in self.handle.events():
                wire = event.to_realtime()
                if wire.get("type") in TERMINAL:
                    if not self._closed:  # vLLM-Omni ended it (expiry, an engine fault)
                        reason = event.reason if hasattr(event, "reason") else wire.get("type")
                        self._fail(EngineError(f"vLLM-Omni ended the session: {reason}"))
                    break
                for translated in self._translator.translate(wire):
                    await self._events.put(translated)
        except Exception as error:  # a fault here must end the session, not hang it
            logger.exception(
                "session %s: reading vLLM-Omni events failed",
                self.id,
                extra={"session_id": self.id},
            )
            self._fail(error)
        self._events.end(drop=self._closed)

    async def _on_close_begin(self) -> None:
        """Closes vLLM-Omni's session, and lets the pump pass on what it still sends."""
        try:
            await self.handle.close(reason="client_close", timeout=self._timeout_s)
        except Exception as error:  # the session is gone on vLLM-Omni's side either way
            logger.warning(
                "session %s: vLLM-Omni close failed: %s",
                self.id,
                error,
                extra={"session_id": self.id},
            )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._pump), self._timeout_s)
        if not self._pump.done():
            self._pump.cancel()
            await asyncio.wait([self._pump])
