"""vLLM-Omni's real duplex session layer on a CPU, with the GPU parts replaced.

``DuplexOmni`` needs GPU stage workers (a Thinker, a Talker and a Code2Wav on CUDA) and a
registered multi-stage model; neither exists on this machine. Everything above the stages
is plain Python and is used here as it ships, unchanged:

* ``DuplexOmni`` itself (its ``open_session`` / ``close_session``, event routing) and
  ``DuplexSessionHandle`` (``submit``, ``events``), the API the ``vllm-omni`` engine calls;
* ``DuplexSessionManager`` and a ``DuplexSessionRunner`` per session: admission, command
  handling, turn and response state, epochs, barge-in and cancel, the playback ledger, and
  the projection of model output onto Realtime events;
* the MiniCPM-o 4.5 duplex plugin: how audio becomes model units, how stage outputs become
  listen/speak decisions, audio and transcript (its audio encoder is :func:`encode_pcm16`,
  see there why).

Two things are replaced, the same way vLLM-Omni's own CPU tests replace them:

* :class:`StageModel`, the stage port the runner submits model units to. It records the
  units and, when a test says so, answers like the Talker stage would: cumulative 24 kHz
  audio with its text, and a turn end. It also records cancels and aborts.
* :class:`SessionLayerEngine`, the transport between ``DuplexOmni`` (API process) and the
  orchestrator thread (engine process): its control calls are handed straight to the
  manager and answered from its result queue, and the manager's events are routed to
  ``DuplexOmni`` as its output handler would. It runs on the test's event loop.

Importing this module imports vLLM-Omni: only the ``.venv-vllm-omni`` tier does.
"""

from __future__ import annotations

import asyncio
import base64
import uuid
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np
from vllm.sampling_params import SamplingParams
from vllm_omni.config.stage_config import DuplexSessionRuntimeConfig
from vllm_omni.engine.duplex.config import DuplexSessionConfig
from vllm_omni.engine.duplex.contracts import (
    DuplexOutputContext,
    DuplexRequestIdentity,
    DuplexStagePort,
    DuplexStageRequestContext,
    DuplexStageSubmission,
    DuplexStageSubmissionResult,
)
from vllm_omni.engine.duplex.messages import (
    CloseDuplexSessionMessage,
    DuplexControlResultMessage,
    DuplexSessionCommandMessage,
    DuplexSessionError,
    DuplexSessionEventMessage,
    OpenDuplexSessionMessage,
    ResumeDuplexSessionMessage,
    TouchDuplexSessionMessage,
)
from vllm_omni.engine.duplex.session.manager import DuplexSessionManager
from vllm_omni.entrypoints.duplex_omni import DuplexOmni
from vllm_omni.model_executor.models.minicpmo_4_5.duplex.plugin import MiniCPMO45DuplexPlugin

TALKER_STAGE = 1
TALKER_RATE_HZ = 24000


@dataclass
class Turn:
    """What the fake Talker has said in one model turn (its output is cumulative)."""

    request_id: str
    samples: int = 0
    text: str = ""


@dataclass
class StageModel(DuplexStagePort):
    """The stage port: records what the runner asks, and speaks when a test says so."""

    stages: int = 2
    ensured: list[DuplexStageRequestContext] = field(default_factory=list)
    submissions: list[DuplexStageSubmission] = field(default_factory=list)
    cleanups: list[tuple[list[str], bool]] = field(default_factory=list)
    aborts: list[list[str]] = field(default_factory=list)
    new_submission: asyncio.Event = field(default_factory=asyncio.Event)  # set on each

    @property
    def stage_count(self) -> int:
        return self.stages

    def sampling_defaults(self) -> tuple[object, ...]:
        return tuple(SamplingParams(max_tokens=20) for _ in range(self.stages))

    def ensure_request(self, context: DuplexStageRequestContext) -> None:
        self.ensured.append(context)

    async def submit(self, submission: DuplexStageSubmission) -> DuplexStageSubmissionResult:
        self.submissions.append(submission)
        self.new_submission.set()
        context = submission.context
        return DuplexStageSubmissionResult(
            request_id=context.request_id, stage_id=context.stage_id, replica_id=0
        )

    async def cleanup(self, request_ids: list[str], *, abort: bool = False) -> None:
        self.cleanups.append((list(request_ids), abort))

    async def abort_requests(self, request_ids: list[str]) -> None:
        self.aborts.append(list(request_ids))

    def audio_units(self) -> int:
        """Model units of input audio submitted so far."""
        return sum(
            1
            for s in self.submissions
            if s.prompt.get("model_intermediate_buffer", {}).get("duplex", {}).get("payload")
        )


class SessionLayerEngine:
    """Stands in for ``DuplexOmniEngine``'s transport; see the module docstring."""

    def __init__(self, manager: DuplexSessionManager, omni: DuplexOmni) -> None:
        self.manager = manager
        self._omni = omni
        self._results: dict[str, asyncio.Future[DuplexControlResultMessage]] = {}
        self._pumps = [
            asyncio.create_task(self._route_events()),
            asyncio.create_task(self._route_results()),
        ]

    async def _route_events(self) -> None:
        output: asyncio.Queue[Any] = self.manager._output_sink  # type: ignore[assignment]
        while True:
            message = await output.get()
            if isinstance(message, DuplexSessionEventMessage):
                self._omni._route_engine_message(message)

    async def _route_results(self) -> None:
        results: asyncio.Queue[Any] = self.manager._result_sink  # type: ignore[assignment]
        while True:
            result = await results.get()
            waiter = self._results.pop(result.control_id, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(result)

    async def _control(self, message: Any, timeout_s: float | None) -> DuplexControlResultMessage:
        waiter = asyncio.get_running_loop().create_future()
        self._results[message.control_id] = waiter
        self.manager.dispatch(message)
        result = await asyncio.wait_for(waiter, timeout_s)
        if not result.ok:
            raise DuplexSessionError(
                result.error_message or f"duplex {result.operation} failed",
                code=result.error_code or "internal_error",
                retryable=result.error_retryable,
                session_id=result.session_id,
            )
        return result

    async def open_session_async(
        self,
        session_id: str,
        session_config: DuplexSessionConfig,
        *,
        timeout: float | None = 10,  # noqa: ASYNC109 - DuplexOmniEngine's signature
    ) -> DuplexControlResultMessage:
        message = OpenDuplexSessionMessage(
            control_id=uuid.uuid4().hex, session_id=session_id, session_config=session_config
        )
        return await self._control(message, timeout)

    async def close_session_async(
        self,
        session_id: str,
        *,
        reason: str = "client_close",
        timeout: float | None = 10,  # noqa: ASYNC109 - DuplexOmniEngine's signature
    ) -> DuplexControlResultMessage:
        message = CloseDuplexSessionMessage(
            control_id=uuid.uuid4().hex, session_id=session_id, reason=reason
        )
        return await self._control(message, timeout)

    async def resume_session_async(
        self,
        session_id: str,
        *,
        expected_lease_generation: int,
        control_id: str | None = None,
        timeout: float | None = 10,  # noqa: ASYNC109 - DuplexOmniEngine's signature
    ) -> DuplexControlResultMessage:
        message = ResumeDuplexSessionMessage(
            control_id=control_id or uuid.uuid4().hex,
            session_id=session_id,
            expected_lease_generation=expected_lease_generation,
        )
        return await self._control(message, timeout)

    async def touch_session_async(
        self,
        session_id: str,
        *,
        activity: str,
        expected_lease_generation: int | None = None,
        timeout: float | None = 10,  # noqa: ASYNC109 - DuplexOmniEngine's signature
    ) -> DuplexControlResultMessage:
        message = TouchDuplexSessionMessage(
            control_id=uuid.uuid4().hex,
            session_id=session_id,
            activity=activity,
            expected_lease_generation=expected_lease_generation,
        )
        return await self._control(message, timeout)

    async def submit_command_async(self, session_id: str, command: Any) -> None:
        self.manager.dispatch(DuplexSessionCommandMessage(session_id=session_id, command=command))

    async def shutdown(self) -> None:
        await self.manager.shutdown()
        for pump in self._pumps:
            pump.cancel()
        await asyncio.gather(*self._pumps, return_exceptions=True)


@dataclass
class SessionLayer:
    """A ``DuplexOmni`` over the real session layer, and the fake model behind it."""

    omni: DuplexOmni
    engine: SessionLayerEngine
    model: StageModel
    turns: dict[str, Turn] = field(default_factory=dict)

    @property
    def manager(self) -> DuplexSessionManager:
        return self.engine.manager

    def runner(self, duplex_session_id: str) -> Any:
        return self.manager.runners[duplex_session_id]

    def speak(
        self, duplex_session_id: str, text: str, seconds: float, *, turn_end: bool = False
    ) -> bool:
        """The Talker says ``text`` (``seconds`` of audio) in the session's current model turn;
        ``turn_end`` ends the model's turn. Returns whether the runner consumed the output."""
        runner = self.runner(duplex_session_id)
        session = runner.session
        fence = session.fence
        request_id = _stage0_request_id(session)
        turn = self.turns.get(duplex_session_id)
        if turn is None or turn.request_id != f"{request_id}/{fence.epoch}/{fence.turn_id}":
            turn = Turn(f"{request_id}/{fence.epoch}/{fence.turn_id}")
            self.turns[duplex_session_id] = turn
        turn.samples += int(seconds * TALKER_RATE_HZ)
        turn.text += text
        t = np.arange(turn.samples) / TALKER_RATE_HZ
        voice = (0.2 * np.sin(2 * np.pi * 180.0 * t)).astype(np.float32)
        output = SimpleNamespace(
            request_id=request_id,
            finished=False,
            outputs=[SimpleNamespace(text=turn.text, token_ids=[], multimodal_output={})],
            multimodal_output={
                "audio": voice,
                "sr": TALKER_RATE_HZ,
                "meta.tts_is_last_chunk": np.array([int(turn_end)], dtype=np.int32),
                "meta.turn_end": np.array([int(turn_end)], dtype=np.int32),
                "meta.duplex_turn_id": np.array([fence.turn_id], dtype=np.int32),
                "meta.duplex_epoch": np.array([fence.epoch], dtype=np.int32),
            },
        )
        context = DuplexOutputContext(
            identity=DuplexRequestIdentity(session_id=duplex_session_id, fence=fence),
            final_stage_id=self.model.stage_count - 1,
            segment_finished=False,
            segment_token_ids=(),
            segment_output_metadata={},
        )
        consumed: bool = runner.on_stage_output(
            TALKER_STAGE, output, None, request_id=request_id, context=context
        )
        return consumed

    def listen(self, duplex_session_id: str) -> bool:
        """The model decides to keep listening: its Talker request finishes with a listen
        decision and no output. Returns whether the runner consumed the output."""
        runner = self.runner(duplex_session_id)
        fence = runner.session.fence
        request_id = _stage0_request_id(runner.session)
        output = SimpleNamespace(
            request_id=request_id,
            finished=True,
            outputs=[SimpleNamespace(text="", token_ids=[], multimodal_output={})],
            multimodal_output={
                "duplex_native_decision": "listen",
                "meta.duplex_turn_id": np.array([fence.turn_id], dtype=np.int32),
                "meta.duplex_epoch": np.array([fence.epoch], dtype=np.int32),
            },
        )
        context = DuplexOutputContext(
            identity=DuplexRequestIdentity(session_id=duplex_session_id, fence=fence),
            final_stage_id=self.model.stage_count - 1,
            segment_finished=True,
            segment_token_ids=(),
            segment_output_metadata={},
        )
        consumed: bool = runner.on_stage_output(
            TALKER_STAGE, output, None, request_id=request_id, context=context
        )
        return consumed

    async def until_submitted(self, count: int, timeout_s: float = 5.0) -> None:
        """Waits until the runner has submitted ``count`` model units in all (it submits
        some, like the silence after a listen, from tasks of its own)."""
        async with asyncio.timeout(timeout_s):
            while len(self.model.submissions) < count:
                self.model.new_submission.clear()
                await self.model.new_submission.wait()

    async def shutdown(self) -> None:
        await self.engine.shutdown()


def _stage0_request_id(session: Any) -> str:
    from vllm_omni.engine.duplex.contracts import duplex_resource_request_id

    return str(duplex_resource_request_id(session.fence, "stage0"))


def start_session_layer(*, max_sessions: int = 4) -> SessionLayer:
    """Builds the session layer on the running loop; see the module docstring."""
    model = StageModel()
    manager = DuplexSessionManager(
        plugin=MiniCPMO45DuplexPlugin(encode_pcm16),
        stage_port=model,
        output_sink=asyncio.Queue(),  # type: ignore[arg-type]
        result_sink=asyncio.Queue(),  # type: ignore[arg-type]
        runtime_config=DuplexSessionRuntimeConfig(max_sessions=max_sessions),
        model_config=None,
    )
    # DuplexOmni's own constructor starts stage workers; its session API needs only what
    # the constructor sets besides them, which is set here the same way.
    omni = DuplexOmni.__new__(DuplexOmni)
    omni.model = "openbmb/MiniCPM-o-4_5"
    omni._handles = {}
    omni._resume_compensations = set()
    omni._resume_replay_backoff_s = (0.5, 5.0)
    omni._final_output_handler = lambda: None  # events are routed by SessionLayerEngine
    engine = SessionLayerEngine(manager, omni)
    omni.engine = engine  # type: ignore[assignment]
    return SessionLayer(omni, engine, model)


def encode_pcm16(
    audio: object, sample_rate_hz: int, response_format: str, speed: float | None
) -> str | None:
    """The model-audio encoder the plugin is given, for pcm16 only.

    vLLM-Omni's own (``entrypoints.duplex.audio_encoding``) goes through its OpenAI audio
    helpers, which import torchaudio; PyPI has only a CUDA build of torchaudio, which cannot
    load beside the CPU torch. This one does the same for the format the engine asks for:
    the samples, unchanged in rate, as base64 little-endian int16.
    """
    if audio is None:
        return None
    if response_format not in ("pcm", "pcm16") or speed not in (None, 1, 1.0):
        raise ValueError(f"the test encoder writes plain pcm16, not {response_format!r}")
    samples = np.clip(np.asarray(audio, dtype=np.float32).reshape(-1), -1.0, 1.0)
    pcm16 = (samples * 32767.0).astype("<i2").tobytes()
    return base64.b64encode(pcm16).decode("ascii") if pcm16 else None
