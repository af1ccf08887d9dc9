"""One vllm conversation: the kit's listening session, answered by one vLLM request a turn.

Everything but the answer is the kit's :class:`~omni_grpc.engine.kit.ListeningSession`
(commands, items, the response lifecycle, cancels, server VAD and turn-taking: the model hears
audio, not words, so turns end on silence and speech over a reply is judged by its length). A
response is one vLLM request with its own id (``<session>-<response>``): the conversation
becomes a chat prompt with the user's audio in it (:mod:`.prompt`), vLLM streams the answer,
and the kit's speech player speaks it (or writes it, for a text response). A cancel, a
barge-in or a new turn cancels the player, whose exit aborts the vLLM request and frees its KV
cache at once.

A response that fails (vLLM refuses the request, the model's chat template refuses the
conversation, speech synthesis fails) ends ``failed`` with reason ``engine_error``, after an
``error`` event whose code says which part failed; the details go to the log, not the wire.
"""

from __future__ import annotations

import collections
import enum
import logging
from collections.abc import AsyncIterator, Callable

from omni_grpc.core.commands import DeleteItem
from omni_grpc.engine import kit
from omni_grpc.engine.base import EngineError
from omni_grpc.engine.kit.listening_session import Hearing, ListeningSession
from omni_grpc.engine.kit.tools import callable_tools, emit_call, must_call
from omni_grpc.engine.kit.tts import Espeak, TtsUnavailable
from omni_grpc.engine.vllm.options import VllmOptions
from omni_grpc.engine.vllm.prompt import Entry, Prompt, build_prompt
from omni_grpc.engine.vllm.runtime import Generation, Sampling, VllmRuntime
from omni_grpc.engine.vllm.tool_calls import (
    chat_tools,
    forced_call,
    forced_sampling,
    gathered,
    kept_calls,
)
from omni_grpc.wire import pb

logger = logging.getLogger(__name__)

# vLLM's finish reasons -> how the response ended.
FINISHES: dict[str, kit.Outcome] = {
    "stop": (pb.RESPONSE_STATUS_COMPLETED, "stop"),
    "length": (pb.RESPONSE_STATUS_INCOMPLETE, "max_output_tokens"),
    "abort": (pb.RESPONSE_STATUS_FAILED, "engine_aborted"),
}
FAILED: kit.Outcome = (pb.RESPONSE_STATUS_FAILED, "engine_error")


class Failure(enum.Enum):
    """The part of a response that failed: its error code, and what the client is told."""

    MODEL_REQUEST = ("model_request_failed", "vLLM could not serve the response's request")
    PROMPT_TEMPLATE = ("prompt_template_failed", "the model's chat template refused the prompt")
    SPEECH = ("speech_synthesis_failed", "the answer could not be spoken")
    INTERNAL = ("internal_error", "the response failed")

    def event(self) -> pb.ConverseResponse:
        """The ``error`` event that goes out before the failed response's done."""
        code, message = self.value
        return pb.ConverseResponse(
            error=pb.ErrorReport(code=code, type=pb.ERROR_TYPE_SERVER, message=message)
        )


class VllmSession(ListeningSession):
    """One conversation with the vllm engine; see the module docstring."""

    engine_name = "vllm"

    def __init__(
        self,
        session_id: str,
        config: pb.SessionConfig,
        options: VllmOptions,
        runtime: VllmRuntime,
        tts: Espeak,
        hearing: Hearing,
        on_close: Callable[[VllmSession], None],
    ) -> None:
        super().__init__(session_id, config, options, on_close, hearing)
        self._options = options
        self._runtime = runtime
        self._tts = tts
        self._pacing = kit.Pacing(realtime=options.pace == "realtime", speed=options.speed)
        # The audio of the latest user items, for the prompt; the oldest go first.
        self._item_audio: collections.OrderedDict[str, bytes] = collections.OrderedDict()

    def _default_instructions(self) -> str:
        return self.config.instructions or self._options.instructions

    async def _commit_turn(
        self, audio: bytes, item_id: str = "", *, text_final: bool = True
    ) -> tuple[kit.UserInput, pb.ConversationItem]:
        user, item = await super()._commit_turn(audio, item_id, text_final=text_final)
        self._item_audio[item.id] = audio
        # Bounded memory: the prompt hears at most audio_turns items; a few spare ones
        # stand in for items the client deletes.
        while len(self._item_audio) > 2 * self._options.audio_turns:
            self._item_audio.popitem(last=False)
        return user, item

    async def _heard_item(self, user: kit.UserInput, item: pb.ConversationItem) -> None:
        # The model hears an item created with its audio as it hears a committed turn.
        self._item_audio[item.id] = user.audio
        while len(self._item_audio) > 2 * self._options.audio_turns:
            self._item_audio.popitem(last=False)
        await super()._heard_item(user, item)

    async def _on_delete_conversation_item(self, delete: DeleteItem) -> None:
        self._item_audio.pop(delete.item_id, None)
        await super()._on_delete_conversation_item(delete)

    # -- the answer ----------------------------------------------------------------------

    async def _play(self, answer: kit.Answer) -> kit.Outcome:
        prompt, sampling = self._request(answer)
        tools = callable_tools(answer)  # see tool_calls
        if must_call(answer):
            sampling = forced_sampling(sampling, tools)
        try:
            text = self._runtime.render(prompt.messages, chat_tools(tools) if tools else None)
        except Exception:  # a chat template raises what its author chose (jinja, ValueError)
            logger.exception(
                "session %s: response %s: the template failed",
                self.id,
                answer.id,
                extra={"session_id": self.id},
            )
            return await self._failed(Failure.PROMPT_TEMPLATE)
        generation: Generation | None = None
        try:
            request_id = f"{self.id}-{answer.id}"
            generation = self._runtime.generate(request_id, text, prompt.audio, sampling)
            if tools:
                finish = await self._call_or_say(answer, generation, tools)
            else:
                finish = await self._stream(answer, generation)
        except EngineError:  # vLLM failed the request, e.g. a prompt longer than the model's
            logger.warning(
                "session %s: response %s failed",
                self.id,
                answer.id,
                exc_info=True,
                extra={"session_id": self.id},
            )
            return await self._failed(Failure.MODEL_REQUEST)
        except TtsUnavailable:
            logger.exception(
                "session %s: response %s was not spoken",
                self.id,
                answer.id,
                extra={"session_id": self.id},
            )
            return await self._failed(Failure.SPEECH)
        except Exception:  # a bug: the response fails, the session goes on
            logger.exception(
                "session %s: response %s failed", self.id, answer.id, extra={"session_id": self.id}
            )
            return await self._failed(Failure.INTERNAL)
        finally:
            # Cancelled or failed, the request must not go on generating into nothing.
            if generation is not None:
                await generation.abort()
        return FINISHES.get(finish, (pb.RESPONSE_STATUS_FAILED, finish))

    async def _stream(self, answer: kit.Answer, generation: Generation) -> str:
        """Speaks (or writes) what ``generation`` streams; returns vLLM's finish reason."""
        finish = "stop"
        answer.output_tokens = 0

        async def pieces() -> AsyncIterator[str]:
            nonlocal finish
            async for delta in generation:
                answer.output_tokens = (answer.output_tokens or 0) + len(delta.token_ids)
                answer.input_tokens = delta.prompt_tokens
                if delta.finish_reason is not None:
                    finish = delta.finish_reason
                if delta.text:
                    yield delta.text

        await self._say(answer, pieces())
        return finish

    async def _say(self, answer: kit.Answer, pieces: AsyncIterator[str]) -> None:
        player = kit.SpeechPlayer(
            self._events, answer, chunk_ms=self._options.chunk_ms, pacing=self._pacing
        )
        if answer.speaks:
            await player.speak(pieces, self._tts, answer.voice or self._options.voice)
        else:
            await player.write(pieces)

    async def _call_or_say(
        self, answer: kit.Answer, generation: Generation, tools: list[pb.FunctionTool]
    ) -> str:
        """A response that may call: its calls, or its words spoken; vLLM's finish reason."""
        text, finish = await gathered(answer, generation)
        if must_call(answer):
            call = forced_call(text) if finish == "stop" else None
            calls = [] if call is None else [call]
        else:
            offered = chat_tools(tools)
            calls = kept_calls(
                answer, self._runtime.tool_calls(text, offered, self._options.tool_parser)
            )
        for name, arguments in calls:
            await emit_call(self._events, answer, name, arguments)
        if not calls and text and not must_call(answer):  # a cut-short call is not said

            async def whole() -> AsyncIterator[str]:
                yield text

            await self._say(answer, whole())
        return finish

    async def _failed(self, failure: Failure) -> kit.Outcome:
        await self._events.put(failure.event())
        return FAILED

    def _request(self, answer: kit.Answer) -> tuple[Prompt, Sampling]:
        """What the vLLM request of ``answer`` asks: the conversation as it is now."""
        prompt = build_prompt(
            answer.instructions,
            self._entries(),
            placeholder=self._runtime.audio_placeholder,
            audio_turns=self._options.audio_turns,
            max_audio_s=self._options.max_audio_s,
        )
        config, options = self.config, self._options
        max_tokens = (
            config.max_output_tokens if config.HasField("max_output_tokens") else options.max_tokens
        )
        temperature = config.temperature if config.HasField("temperature") else options.temperature
        sampling = Sampling(
            max_tokens=max(1, max_tokens),
            min_tokens=options.min_tokens,
            temperature=temperature,
            logit_bias=options.logit_bias,
        )
        return prompt, sampling

    def _entries(self) -> list[Entry]:
        """The latest ``history_items`` items as the prompt sees them, oldest first."""
        entries = []
        for item, text in self._heard()[-self._options.history_items :]:
            if item.role == pb.ITEM_ROLE_ASSISTANT:
                entries.append(Entry("assistant", text))
            else:
                entries.append(Entry("user", text, self._item_audio.get(item.id, b"")))
        return entries
