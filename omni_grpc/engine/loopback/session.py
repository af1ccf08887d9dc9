"""One loopback conversation: the kit's conversation session, answering each turn with itself.

Everything but what the loopback says (:mod:`.echo`) and mirror mode is the kit's
:class:`~omni_grpc.engine.kit.ConversationSession`. The player speaks the whole echo as one
sentence, in chunks of ``chunk_ms``, each released when its audio would have been generated
in real time (``pace=realtime``, divided by ``speed``), or at once (``pace=fast``).
"""

from __future__ import annotations

from collections.abc import Callable

from omni_grpc.core.commands import AppendAudio
from omni_grpc.core.errors import CommandError
from omni_grpc.engine import kit
from omni_grpc.engine.kit.tools import emit_call, example_arguments, scripted_tool
from omni_grpc.engine.kit.transcripts import (
    is_transcription_session,
    transcript_delta,
    transcript_event,
    word_logprobs,
)
from omni_grpc.engine.loopback.echo import (
    RECALL,
    echo_audio,
    echo_transcript,
    echo_words,
    input_tokens,
    item_tokens,
    read_back,
)
from omni_grpc.engine.loopback.options import LoopbackOptions
from omni_grpc.wire import pb
from omni_grpc.wire.pcm import (
    CANONICAL_INPUT_RATE_HZ,
    PCM16_WIDTH,
)


class LoopbackSession(kit.ConversationSession):
    """One loopback conversation; see the package docstring for what it answers."""

    engine_name = "loopback"

    def __init__(
        self,
        session_id: str,
        config: pb.SessionConfig,
        options: LoopbackOptions,
        on_close: Callable[[LoopbackSession], None],
        *,
        clock: kit.Clock = kit.MONOTONIC,
    ) -> None:
        super().__init__(session_id, config, options, on_close, clock=clock)
        self._options = options
        # A chunk is due once its audio would have been generated: a negative lead.
        self._pacing = kit.Pacing(
            realtime=options.pace == "realtime",
            speed=options.speed,
            lead_ms=-options.chunk_ms,
            clock=clock,
        )
        self._mirror: str | None = None  # mode=mirror: the id of its one open response
        self._mirror_ms = 0.0

    def _command_handlers(self) -> kit.Handlers:
        handlers = super()._command_handlers()
        if self._options.mode == "mirror":
            handlers[AppendAudio] = self._reflect
        return handlers

    async def _write_down(self, user: kit.UserInput, item: pb.ConversationItem) -> None:
        """In a transcription session, the turn's deterministic transcript (:func:`.echo.
        echo_transcript`): one delta, then the transcript, each with word logprobs of 0 when
        asked. Its realtime sessions send none, as before transcription sessions existed."""
        if not is_transcription_session(self.config):
            return
        text = echo_transcript(user.audio_ms, self.config.input_transcription)
        logprobs = word_logprobs(text) if self.config.transcription_logprobs else []
        await self._events.put(transcript_delta(item.id, text, logprobs))
        await self._events.put(transcript_event(item.id, text, logprobs))
        user.text = text
        item.content[0].transcript = text

    def _prepare(self, answer: kit.Answer) -> None:
        answer.input_tokens = input_tokens(answer.inputs)

    def _count_tokens(self, item: pb.ConversationItem, text: str) -> int:
        """The fixed rule of :func:`.echo.input_tokens`: a token a word, and one per 100 ms of a
        user's audio; an earlier answer counts as what it said before its recall."""
        return item_tokens(item, read_back(item, text))

    def _context_window(self, answer: kit.Answer) -> int | None:
        """``context_tokens`` less the words of the instructions."""
        return max(self._options.context_tokens - len(answer.instructions.split()), 0)

    async def _play(self, answer: kit.Answer) -> kit.Outcome:
        read = self._read(answer)  # what fits (disabled truncation: fails here, typed)
        answer.input_tokens = answer.read_tokens
        tool = scripted_tool(answer, on_auto=self._options.tool_call == "auto")
        if tool is not None:  # the call is the whole response; its output gets the next one
            await emit_call(self._events, answer, tool.name, example_arguments(tool))
            return pb.RESPONSE_STATUS_COMPLETED, "stop"
        player = kit.SpeechPlayer(
            self._events, answer, chunk_ms=self._options.chunk_ms, pacing=self._pacing
        )
        words = echo_words(answer.inputs)
        cap = answer.max_output_tokens
        capped = cap is not None and len(words.split()) > cap
        if self._options.recall:
            # What came before this turn, so a test can see that a conversation kept it.
            own = {answer.item_id, *(user.item_id for user in answer.inputs)}
            earlier = [
                said
                for item, text in read
                if item.id not in own and (said := read_back(item, text))
            ]
            words = f"{words}{RECALL}{' | '.join(earlier) or 'nothing'}"
        if capped:  # a word a token, as its usage counts them
            words = " ".join(words.split()[:cap])
        await player.say(words, echo_audio(answer.inputs))
        if capped:
            return pb.RESPONSE_STATUS_INCOMPLETE, "max_output_tokens"
        return pb.RESPONSE_STATUS_COMPLETED, "stop"

    def _inline_handlers(self) -> kit.InlineHandlers:
        if self._options.mode == "mirror":
            return {AppendAudio: self._reflect_now}
        return {}

    async def _reflect(self, append: AppendAudio) -> None:
        """Mirror mode, from the mailbox: as :meth:`_reflect_now`, its events queued."""
        for event in self._reflect_now(append):
            await self._events.put(event)

    def _reflect_now(self, append: AppendAudio) -> list[pb.ConverseResponse]:
        """Mirror mode: the appended audio comes straight back as one output chunk, as it came
        (same bytes, same rate), so a mirrored chunk costs the engine no conversion at all.
        The server hands it pcm16 at a rate the engine declared native (the core checked it),
        so nothing is checked again here but the mirror's own bound."""
        # A rate of 0 means canonical input, as the seam has it (omni_grpc.engine.base).
        assert append.encoding in (0, pb.AUDIO_ENCODING_PCM16), "the edge hands engines pcm16"
        audio = append.audio
        rate_hz = append.rate_hz or CANONICAL_INPUT_RATE_HZ
        assert not len(audio) % PCM16_WIDTH, "torn pcm16 samples"
        length_ms = len(audio) / PCM16_WIDTH * 1000.0 / rate_hz  # as pcm16_ms has it
        if length_ms > self._options.max_input_s * 1000:
            raise CommandError("input_backpressure", "too much uncommitted input", retryable=True)
        events = []
        if self._mirror is None:
            self._mirror = kit.new_id("resp")
            response = pb.Response(id=self._mirror, status=pb.RESPONSE_STATUS_IN_PROGRESS)
            events.append(
                pb.ConverseResponse(response_created=pb.ResponseCreated(response=response))
            )
        # Set field by field in the event's own delta: building the delta by keywords and then
        # the event around it would copy the audio a second time.
        event = pb.ConverseResponse()
        delta = event.output_audio_delta
        delta.audio = audio
        delta.encoding = pb.AUDIO_ENCODING_PCM16
        delta.sample_rate_hz = rate_hz
        delta.start_ms = self._mirror_ms
        delta.duration_ms = length_ms
        delta.response_id = self._mirror
        events.append(event)
        self._mirror_ms += length_ms
        return events
