"""One loopback conversation: the kit's conversation session, answering each turn with itself.

Everything but what the loopback says (:mod:`.echo`) and mirror mode is the kit's
:class:`~omni_grpc.engine.kit.ConversationSession`. The player speaks the whole echo as one
sentence, in chunks of ``chunk_ms``, each released when its audio would have been generated
in real time (``pace=realtime``, divided by ``speed``), or at once (``pace=fast``).
"""

from __future__ import annotations

from collections.abc import Callable

from omni_grpc import audio
from omni_grpc.core.errors import CommandError
from omni_grpc.engine import kit
from omni_grpc.engine.kit.tools import emit_call, example_arguments, scripted_tool
from omni_grpc.engine.loopback.echo import echo_audio, echo_words, input_tokens
from omni_grpc.engine.loopback.options import LoopbackOptions
from omni_grpc.wire import pb
from omni_grpc.wire.audio import CANONICAL_INPUT_RATE_HZ, CANONICAL_OUTPUT_RATE_HZ, pcm16_ms


class LoopbackSession(kit.ConversationSession):
    """One loopback conversation; see the package docstring for what it answers."""

    engine_name = "loopback"

    def __init__(
        self,
        session_id: str,
        config: pb.SessionConfig,
        options: LoopbackOptions,
        on_close: Callable[[LoopbackSession], None],
    ) -> None:
        super().__init__(session_id, config, options, on_close)
        self._options = options
        # A chunk is due once its audio would have been generated: a negative lead.
        self._pacing = kit.Pacing(
            realtime=options.pace == "realtime", speed=options.speed, lead_ms=-options.chunk_ms
        )
        self._mirror: tuple[str, audio.StreamResampler] | None = None  # mode=mirror only
        self._mirror_ms = 0.0

    def _command_handlers(self) -> dict[str, kit.Handler]:
        handlers = super()._command_handlers()
        if self._options.mode == "mirror":
            handlers["append_input_audio"] = self._reflect
        return handlers

    def _prepare(self, answer: kit.Answer) -> None:
        answer.input_tokens = input_tokens(answer.inputs)

    async def _play(self, answer: kit.Answer) -> kit.Outcome:
        tool = scripted_tool(answer, on_auto=self._options.tool_call == "auto")
        if tool is not None:  # the call is the whole response; its output gets the next one
            await emit_call(self._events, answer, tool.name, example_arguments(tool))
            return pb.RESPONSE_STATUS_COMPLETED, "stop"
        player = kit.SpeechPlayer(
            self._events, answer, chunk_ms=self._options.chunk_ms, pacing=self._pacing
        )
        words = echo_words(answer.inputs)
        if self._options.recall:
            # What came before this turn, so a test can see that a conversation kept it.
            own = {answer.item_id, *(user.item_id for user in answer.inputs)}
            earlier = [text for item, text in self._heard() if item.id not in own]
            words = f"{words}; earlier: {' | '.join(earlier) or 'nothing'}"
        await player.say(words, echo_audio(answer.inputs))
        return pb.RESPONSE_STATUS_COMPLETED, "stop"

    async def _reflect(self, request: pb.ConverseRequest) -> None:
        """Mirror mode: the appended audio comes straight back as one output chunk."""
        append = request.append_input_audio
        kit.check_canonical_input(append)
        if len(append.audio) > self._max_input_bytes:
            raise CommandError("input_backpressure", "too much uncommitted input", retryable=True)
        if self._mirror is None:
            response_id = kit.new_id("resp")
            # One resampler for the whole stream keeps chunk seams clean.
            resampler = audio.StreamResampler(CANONICAL_INPUT_RATE_HZ, CANONICAL_OUTPUT_RATE_HZ)
            self._mirror = response_id, resampler
            await self._events.put(
                pb.ConverseResponse(
                    response_created=pb.ResponseCreated(
                        response=pb.Response(id=response_id, status=pb.RESPONSE_STATUS_IN_PROGRESS)
                    )
                )
            )
        response_id, resampler = self._mirror
        heard = audio.decode(append.audio, pb.AUDIO_ENCODING_PCM16, CANONICAL_INPUT_RATE_HZ)
        out = audio.encode(
            resampler.process(heard), pb.AUDIO_ENCODING_PCM16, CANONICAL_OUTPUT_RATE_HZ
        )
        await self._events.put(kit.audio_delta(out, self._mirror_ms, response_id=response_id))
        self._mirror_ms += pcm16_ms(len(out), CANONICAL_OUTPUT_RATE_HZ)
