"""The response session: the lifecycle of responses, one at a time, and the commands about them.

A committed turn or ``create_response`` makes an :class:`~.answers.Answer` of the pending user
input and starts a player task for it (the engine's :meth:`ResponseSession._play`). Only one
response runs at a time. A cancel (``cancel_response``, ``barge_in``, ``clear_output_audio``,
``cancel_input``, or a new turn, which cancels with reason ``turn_detected``) stops the player
and waits for it, takes back the output the reader has not taken, and only then queues
``response_done``: nothing of a response follows its end. The answer is marked done,
synchronously, right before its done event is queued, so a cancel that comes later finds
nothing to cancel instead of ending a response twice. A response that was never announced (it
was waiting for the words it answers) ends silently, and its input waits again. A turn that
server VAD detects while a response runs under ``listen_only`` (or without
``interrupt_response``) waits instead, and is answered when that response ends. A response
whose player fails (a bug, a model fault the engine did not catch) ends ``failed`` with reason
``engine_error`` after an ``internal_error`` event; the session goes on.

An out-of-band response (``create_response`` with ``out_of_band``) is not that one response:
it runs beside it, as a task of its own (at most ``MAX_OUT_OF_BAND_RESPONSES`` at a time), is
never ``_active`` (a barge-in, a new turn or a cancel without an id leaves it be; a cancel or
clear that names it ends it), takes no pending input, and its items join no history. An engine
whose model cannot answer two requests at once sets ``out_of_band_beside`` False: the response
then waits for the running one to end before it starts. A response's own ``input`` (in band or
out of band) is what it reads instead of the conversation (:meth:`ResponseSession._read`): the
items given, each reference resolved to the history's own item (an unknown one is refused
``item_not_found``, its param ``input.N.id``); without one, an out-of-band response reads the
conversation.

What a response reads of the conversation is cut to what fits its model under the session's
``truncation`` (:mod:`.truncation`): :meth:`ResponseSession._read` counts each item with the
engine's :meth:`~ResponseSession._count_tokens` against its
:meth:`~ResponseSession._context_window` and drops the oldest items from the reading (they stay
in the conversation). Under ``disabled`` a conversation that does not fit fails the response,
``response_done`` status FAILED with reason ``context_length_exceeded`` and no ``error`` event;
the session goes on. A response's own input is read whole.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any, ClassVar

from omni_grpc.core import commands as cmd
from omni_grpc.core.errors import CommandError
from omni_grpc.engine.kit.answers import (
    Answer,
    Modalities,
    Outcome,
    UserInput,
    done_event,
    new_id,
    output_item,
)
from omni_grpc.engine.kit.clock import MONOTONIC, Clock
from omni_grpc.engine.kit.history import History, item_text
from omni_grpc.engine.kit.truncation import (
    CONTEXT_LENGTH_EXCEEDED,
    ContextTooLong,
    Cut,
    cut,
    limit_of,
)
from omni_grpc.engine.kit.worker import WorkerSession
from omni_grpc.wire import pb
from omni_grpc.wire.bounds import MAX_OUT_OF_BAND_RESPONSES

logger = logging.getLogger(__name__)

ITEMS_KEPT = 64  # conversation items that retrieve, delete, truncate and a model can reach
ANSWERS_KEPT = 16  # responses that ack_playback and clear_output_audio can name


class ResponseSession(WorkerSession):
    """Responses and the history they write; see the module docstring."""

    # Whether response_created goes out when a response starts; an engine that first waits
    # for something (transcripts) announces from its player with _announce_response.
    announce_at_start: ClassVar[bool] = True
    # Whether an out-of-band response runs beside the running response, or waits for its end.
    out_of_band_beside: ClassVar[bool] = True

    def __init__(
        self, session_id: str, config: pb.SessionConfig, *, clock: Clock = MONOTONIC, **worker: Any
    ) -> None:
        """``clock``: what turns and responses are timed on; ``worker``: the arguments of
        :class:`WorkerSession`."""
        super().__init__(session_id, config, **worker)
        self._clock = clock
        self._pending: list[UserInput] = []  # committed, not answered yet
        self._history = History(ITEMS_KEPT)
        self._answers: dict[str, Answer] = {}  # insertion-ordered, newest last
        self._active: Answer | None = None
        self._deferred = False  # a detected turn waits for the active response (listen_only)
        self._side: dict[str, tuple[Answer, asyncio.Task[None]]] = {}  # out of band, running
        # The id of the first item the last cut kept (retention_ratio keeps it); None: none yet.
        self._kept_first: str | None = None

    async def _play(self, answer: Answer) -> Outcome | None:
        """Produces the output of ``answer``; returns how it ended, or None if it became a
        listen (nothing was announced, and nothing ends). Runs as the player task."""
        raise NotImplementedError

    async def _on_create_response(self, create: cmd.CreateResponse) -> None:
        if create.out_of_band:
            await self._start_side(create)
            return
        if self._active is not None:
            raise CommandError(
                "response_already_active", f"response {self._active.id} is still running"
            )
        read = None if create.input is None else self._resolve_input(create.input)
        if read is None and not self._pending:
            raise CommandError(
                "response_create_without_input", "nothing was committed since the last response"
            )
        await self._start_response(
            self._clock.now(),
            create.output_modalities or self._modalities(),
            create.instructions,
            read=read,
            **_own_settings(create),
        )

    async def _start_side(self, create: cmd.CreateResponse) -> None:
        """Starts an out-of-band response beside the running one; see the module docstring."""
        if len(self._side) >= MAX_OUT_OF_BAND_RESPONSES:
            raise CommandError(
                "response_already_active",
                f"at most {MAX_OUT_OF_BAND_RESPONSES} out-of-band responses run at once",
            )
        context: list[pb.ConversationItem] | None = None
        if create.input is None:  # it reads the conversation, and takes nothing of it
            inputs = self._inputs_of(self._history.get(i) for i in self._history.ids())
        else:
            context, inputs = self._resolve_input(create.input)
        answer = self._new_answer(
            self._clock.now(),
            create.output_modalities or self._modalities(),
            create.instructions,
            inputs,
            **_own_settings(create),
        )
        answer.out_of_band, answer.context = True, context
        self._prepare(answer)
        self._remember(answer)
        task = asyncio.create_task(
            self._perform_side(answer), name=f"{self.engine_name}-{answer.id}"
        )
        self._side[answer.id] = answer, task
        self._tasks.add(task)  # cancelled with the session
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(lambda _: self._side.pop(answer.id, None))

    async def _perform_side(self, answer: Answer) -> None:
        if not self.out_of_band_beside:  # the model answers one request at a time
            while (player := self._player) is not None and not player.done():
                await asyncio.wait([player])
        if self.announce_at_start:
            await self._announce_response(answer)
        await self._play_out(answer)

    def _resolve_input(
        self, entries: tuple[cmd.InputEntry, ...]
    ) -> tuple[list[pb.ConversationItem], list[UserInput]]:
        """A response's own input: its items (a reference's, the history's own item) and the
        user input among them; ``item_not_found`` for a reference to no item."""
        items = []
        for index, entry in enumerate(entries):
            if entry.item is None:
                if entry.reference not in self._history:
                    raise CommandError(
                        "item_not_found",
                        f"no item {entry.reference} in the conversation",
                        param=f"input.{index}.id",
                    )
                items.append(self._history.get(entry.reference))
                continue
            item = pb.ConversationItem()
            item.CopyFrom(entry.item)
            item.id = item.id or new_id("item")
            made_by_model = item.type == pb.ITEM_TYPE_FUNCTION_CALL
            item.role = item.role or (
                pb.ITEM_ROLE_ASSISTANT if made_by_model else pb.ITEM_ROLE_USER
            )
            items.append(item)
        return items, self._inputs_of(items)

    def _inputs_of(self, items: Iterable[pb.ConversationItem]) -> list[UserInput]:
        """The user input among ``items``, as a response answers it: a pending one as it
        waits (its words may still be coming), another made from the item."""
        waiting = {user.item_id: user for user in self._pending}
        inputs = []
        for item in items:
            if item.id in waiting:
                inputs.append(waiting[item.id])
            elif item.type == pb.ITEM_TYPE_FUNCTION_CALL_OUTPUT:
                inputs.append(UserInput(item.id, text=item.output, call_output=True))
            elif item.type != pb.ITEM_TYPE_FUNCTION_CALL and item.role == pb.ITEM_ROLE_USER:
                inputs.append(
                    UserInput(item.id, text=item_text(item), audio=self._kept_item_audio(item.id))
                )
        return inputs

    def _kept_item_audio(self, item_id: str) -> bytes:
        """The audio kept of a user item (canonical input), b"" if none."""
        return b""

    def _read(self, answer: Answer) -> list[tuple[pb.ConversationItem, str]]:
        """What ``answer`` reads, each item with its words, oldest first: the conversation as
        heard (:meth:`_heard`) cut to what fits, or its own input; sets ``answer.read_tokens``.
        Raises :class:`ContextTooLong` where the conversation does not fit and truncation is
        disabled."""
        if answer.context is None:
            return self._fitted(answer, self._heard())
        read = [(item, item_text(item)) for item in answer.context]
        answer.read_tokens = sum(self._count_tokens(item, text) for item, text in read)
        return read

    def _fitted(
        self, answer: Answer, heard: list[tuple[pb.ConversationItem, str]]
    ) -> list[tuple[pb.ConversationItem, str]]:
        """``heard`` less the oldest items that do not fit (see the module docstring)."""
        reading = self._reading(heard, self._context_window(answer))
        answer.read_tokens = reading.tokens
        if not answer.out_of_band and reading.first < len(heard):
            self._kept_first = heard[reading.first][0].id
        return heard[reading.first :]

    def _reading(self, heard: list[tuple[pb.ConversationItem, str]], window: int | None) -> Cut:
        """Where a reading of ``heard`` starts under the session's truncation, in a context
        of ``window`` tokens (changes nothing: an engine may ask ahead of a response);
        raises :class:`ContextTooLong` where it does not fit."""
        truncation = self.config.truncation
        tokens = [self._count_tokens(item, text) for item, text in heard]
        limit = limit_of(truncation, window)
        ids = [item.id for item, _ in heard]
        kept_first = ids.index(self._kept_first) if self._kept_first in ids else 0
        reading = cut(tokens, limit, truncation, kept_first)
        if not reading.fits:
            assert limit is not None, "only a known limit can be passed"
            raise ContextTooLong(reading.tokens, limit)
        return reading

    def _count_tokens(self, item: pb.ConversationItem, text: str) -> int:
        """The tokens ``item`` (its words ``text``) takes in the engine's prompt; a word a token
        unless the engine counts with its model's tokenizer."""
        return len(text.split())

    def _context_window(self, answer: Answer) -> int | None:
        """The tokens the conversation may take in ``answer``'s prompt: the model's context
        less the instructions and the output; None where the engine knows no bound (nothing is
        cut but to a session's post_instructions limit)."""
        return None

    async def _take_turn(self, turn_started: float, *, by_server_vad: bool = False) -> None:
        """Answers a turn that asks for it: a running response gives way (the user took the
        turn), except that a detected turn waits for it under listen_only."""
        if self._active is not None:
            config = self.config
            if by_server_vad and (
                config.overlap_policy == pb.OVERLAP_POLICY_LISTEN_ONLY
                or not config.turn_detection.interrupt_response
            ):
                self._deferred = True
                return
            await self._cancel(self._active, "turn_detected")
        await self._start_response(turn_started, self._modalities(), by_server_vad=by_server_vad)

    async def _start_response(
        self,
        turn_started: float,
        modalities: Modalities,
        instructions: str | None = None,
        *,
        by_server_vad: bool = False,
        metadata: dict[str, str] | None = None,
        tools: pb.ToolSet | None = None,
        tool_choice: pb.ToolChoice | None = None,
        parallel_tool_calls: bool | None = None,
        read: tuple[list[pb.ConversationItem], list[UserInput]] | None = None,
        max_output_tokens: int | None = None,
        voice: str | None = None,
    ) -> None:
        """Makes the pending input an answer and starts its player; a response's own tools,
        choice, cap and voice, when given, stand in for the session's. ``read``: the items and
        user input of a response's own input, which it answers instead (the pending input
        waits on)."""
        player = self._player
        if player is not None and player is not asyncio.current_task():
            await asyncio.wait([player])  # the last answer may still be queueing its done event
        if read is None:
            inputs, self._pending = self._pending, []
        else:
            inputs = read[1]
        answer = self._new_answer(
            turn_started,
            modalities,
            instructions,
            inputs,
            by_server_vad=by_server_vad,
            metadata=metadata,
            tools=tools,
            tool_choice=tool_choice,
            parallel_tool_calls=parallel_tool_calls,
            max_output_tokens=max_output_tokens,
            voice=voice,
        )
        answer.context = None if read is None else read[0]
        self._prepare(answer)
        self._active = answer
        self._remember(answer)
        if self.announce_at_start:
            await self._announce_response(answer)
        self._player = asyncio.create_task(
            self._perform(answer), name=f"{self.engine_name}-{answer.id}"
        )

    def _new_answer(
        self,
        turn_started: float,
        modalities: Modalities,
        instructions: str | None,
        inputs: list[UserInput],
        *,
        by_server_vad: bool = False,
        metadata: dict[str, str] | None = None,
        tools: pb.ToolSet | None = None,
        tool_choice: pb.ToolChoice | None = None,
        parallel_tool_calls: bool | None = None,
        max_output_tokens: int | None = None,
        voice: str | None = None,
    ) -> Answer:
        """A new answer, the session's settings standing in for what it does not set."""
        return Answer(
            id=new_id("resp"),
            item_id=new_id("item"),
            turn_started=turn_started,
            modalities=modalities,
            inputs=inputs,
            instructions=self._default_instructions() if instructions is None else instructions,
            voice=self.config.voice if voice is None else voice,
            by_server_vad=by_server_vad,
            metadata=metadata or {},
            tools=self.config.tools if tools is None else tools,
            tool_choice=self.config.tool_choice if tool_choice is None else tool_choice,
            parallel_tool_calls=(
                self.config.parallel_tool_calls
                if parallel_tool_calls is None
                else parallel_tool_calls
            ),
            max_output_tokens=max_output_tokens,
            own_voice=voice is not None,
        )

    def _remember(self, answer: Answer) -> None:
        """Keeps ``answer`` where ack_playback and clear_output_audio find it."""
        self._answers[answer.id] = answer
        while len(self._answers) > ANSWERS_KEPT:
            del self._answers[next(iter(self._answers))]

    def _default_instructions(self) -> str:
        """The instructions of a response that names none."""
        return self.config.instructions

    def _prepare(self, answer: Answer) -> None:
        """Adds what the engine knows to a new answer, before it is announced."""

    async def _announce_response(self, answer: Answer) -> None:
        created = pb.Response(
            id=answer.id,
            status=pb.RESPONSE_STATUS_IN_PROGRESS,
            output_modalities=answer.modalities,
            metadata=answer.metadata,
            conversation=answer.conversation,
            max_output_tokens=answer.max_output_tokens,
            voice=answer.voice if answer.own_voice else "",
        )
        await self._events.put(
            pb.ConverseResponse(
                response_created=pb.ResponseCreated(response=created, item_id=answer.item_id)
            )
        )
        answer.announced = True

    async def _perform(self, answer: Answer) -> None:
        await self._play_out(answer)
        await self._start_deferred()

    async def _play_out(self, answer: Answer) -> None:
        """Plays ``answer`` and queues its end (a failure of its player fails it alone)."""
        try:
            outcome = await self._play(answer)
            if outcome is not None and answer.settle is not None:
                await answer.settle()  # a reply held by speech over it ends when it is heard
        except ContextTooLong as too_long:  # disabled truncation: the response fails alone
            logger.info(
                "session %s: response %s failed: %s",
                self.id,
                answer.id,
                too_long,
                extra={"session_id": self.id},
            )
            if not answer.announced:
                await self._announce_response(answer)
            answer.input_tokens = answer.read_tokens = 0  # nothing was read
            outcome = pb.RESPONSE_STATUS_FAILED, CONTEXT_LENGTH_EXCEEDED
        except Exception:  # a bug: the response fails, the session goes on
            logger.exception(
                "session %s: response %s failed", self.id, answer.id, extra={"session_id": self.id}
            )
            failure = CommandError("internal_error", "the response failed")
            await self._events.put(pb.ConverseResponse(error=failure.to_error()))
            outcome = (pb.RESPONSE_STATUS_FAILED, "engine_error") if answer.announced else None
        if outcome is None:
            self._drop(answer)
        else:
            await self._events.put(self._finish(answer, outcome))

    async def _start_deferred(self) -> None:
        if self._deferred and self._active is None and self._pending:
            self._deferred = False
            await self._start_response(self._clock.now(), self._modalities(), by_server_vad=True)

    async def _cancel(
        self, answer: Answer, reason: str, first: pb.ConverseResponse | None = None
    ) -> None:
        """Ends ``answer`` as cancelled, after ``first`` if given; see the module docstring."""
        side = self._side.get(answer.id)
        task = side[1] if side is not None else None if answer.out_of_band else self._player
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait([task])
        # Output the reader has not taken never reaches the client.
        answer.take_back(self._events.take_back(answer.id))
        if first is not None:
            await self._events.put(first)
        if not answer.announced:  # it never started: nothing to end, its turns wait again
            if not answer.out_of_band and answer.context is None:
                self._pending = answer.inputs + self._pending
            self._drop(answer)
            return
        await self._events.put(self._finish(answer, (pb.RESPONSE_STATUS_CANCELLED, reason)))

    def _drop(self, answer: Answer) -> None:
        """Marks ``answer`` ended, and queues nothing (one never announced ends so)."""
        if self._active is answer:
            self._active = None
        answer.done = True

    def _finish(self, answer: Answer, outcome: Outcome) -> pb.ConverseResponse:
        """Ends ``answer``: its item enters history (out of band: nothing does); returns its
        done event, to be queued right away."""
        self._drop(answer)
        item = output_item(answer, outcome[0])
        if not answer.out_of_band:
            self._history.add(item)
            for call in answer.calls:  # after the message, as the response made them
                self._history.add(call)
        return done_event(answer, item, outcome, self._clock.now())

    def _require_active(self, response_id: str) -> Answer:
        if self._active is None:
            raise CommandError("response_not_active", "no response is running")
        if response_id and response_id != self._active.id:
            raise CommandError(
                "response_not_active", f"response {response_id} is not running", param="response_id"
            )
        return self._active

    async def _on_cancel_response(self, cancel: cmd.CancelResponse) -> None:
        side = self._side.get(cancel.response_id)
        if side is not None:  # out of band: named, it ends alone
            await self._cancel(side[0], "client_cancelled")
            return
        answer = self._require_active(cancel.response_id)
        await self._cancel(answer, "client_cancelled")
        await self._start_deferred()

    async def _on_barge_in(self, barge_in: cmd.BargeIn) -> None:
        await self._cancel(self._require_active(""), "barge_in")

    async def _on_clear_output_audio(self, clear: cmd.ClearOutput) -> None:
        named = clear.response_id
        finished = self._answers.get(named)
        cleared = pb.ConverseResponse(output_audio_cleared=pb.OutputAudioCleared(response_id=named))
        if finished is not None and finished.done:  # nothing runs here; the client's copy stops
            await self._events.put(cleared)
            return
        side = self._side.get(named)
        answer = side[0] if side is not None else self._require_active(named)
        cleared.output_audio_cleared.response_id = answer.id
        await self._cancel(answer, "output_audio_cleared", first=cleared)
        await self._start_deferred()

    def _modalities(self) -> Modalities:
        return tuple(self.config.output_modalities) or (pb.MODALITY_AUDIO,)

    def _ack_only(self) -> bool:
        return self.config.playback_commit_policy == pb.PLAYBACK_COMMIT_POLICY_ACK_ONLY

    def _heard(self) -> list[tuple[pb.ConversationItem, str]]:
        """Each item of history with its words as a model should read them, oldest first.

        Under ``ack_only`` an assistant answer counts only as far as the client played it.
        """
        by_item = {answer.item_id: answer for answer in self._answers.values()}
        heard = []
        for item_id in self._history.ids():
            item = self._history.get(item_id)
            text = item_text(item)
            answer = by_item.get(item_id) if item.role == pb.ITEM_ROLE_ASSISTANT else None
            if self._ack_only() and answer is not None and answer.speaks:
                text = answer.text_at(answer.played_ms).strip()
            heard.append((item, text))
        return heard


def _own_settings(create: cmd.CreateResponse) -> dict[str, Any]:
    """What a response create sets for its response alone (None: the session's stands)."""
    choice = create.tool_choice
    return {
        "metadata": dict(create.metadata),
        "tools": create.tools,
        "tool_choice": choice if choice is not None and choice.mode else None,
        "parallel_tool_calls": create.parallel_tool_calls,
        "max_output_tokens": create.max_output_tokens,
        "voice": create.voice,
    }
