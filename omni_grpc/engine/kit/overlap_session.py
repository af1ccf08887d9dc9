"""Speech over a reply, for a session that hears it: the one model of overlap.

:class:`OverlapSession` is the part of the kit's :class:`~.listening_session.ListeningSession`
that handles speech starting while a response runs. ``overlap_policy`` says whether it may
interrupt, the interruption settings what it must be, and every step is one
``overlap_decision``:

* ``listen_only`` (or no ``interrupt_response``): heard while the reply goes on, and answered
  once it is over (LISTEN);
* the default, OpenAI's behaviour: the reply ends at the speech's onset (BARGE_IN);
* otherwise the speech is judged (:class:`~.overlap.OverlapJudge`) from its onset on what the
  session hears (speech going on, its pauses, the words the engine hears in it). With
  ``resume_false_interruption`` the reply is held at once (PAUSE) and, when the speech proves no
  interruption, goes on from where the listener stopped hearing it (RESUME: the ack since the
  pause says where, else the end of what was sent); without it the reply plays on while it is
  judged. An interruption ends the reply (BARGE_IN) and the speech is the user's next turn, as
  any speech is; speech that is none is dropped (``speech_stopped``, no commit; DROP when the
  reply was not held), and a turn that detection ended meanwhile waits for the verdict.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from dataclasses import dataclass

from omni_grpc.engine.kit.answers import Answer
from omni_grpc.engine.kit.conversation import ConversationSession
from omni_grpc.engine.kit.listening import Listener, Pause, Turn
from omni_grpc.engine.kit.overlap import Judgement, OverlapJudge, Rules, Verdict
from omni_grpc.wire import pb

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class _Overlap:
    """Speech over a reply, being judged."""

    judge: OverlapJudge
    answer: Answer
    item_id: str  # the user item the speech would become
    pause: Pause | None = None  # where it last paused
    turn: Turn | None = None  # a turn VAD ended meanwhile, waiting for the verdict


class OverlapSession(ConversationSession):
    """Speech over a reply; see the module docstring. The listening session that subclasses it
    owns the detector and the turns; what this needs of them is declared here."""

    _listener: Listener
    _speech_item: str  # the user item that detected speech will become
    _overlap: _Overlap | None = None

    @property
    def input_clock_ms(self) -> float:
        """Input audio heard so far, in milliseconds (the clock VAD times are on)."""
        return self._listener.buffer.clock_ms

    def _overlap_words(self, audio: bytes) -> Awaitable[str] | None:
        """The words of speech over a reply, up to its pause; None: the engine hears none."""
        return None

    def _forget_speech(self) -> None:
        """The speech in progress was dropped or cleared: forget what was started for it."""

    async def _speech_paused(self, pause: Pause) -> None:
        """Speech paused: the listening session's (a pause that may end the turn)."""
        raise NotImplementedError

    async def _speech_stopped(self, turn: Turn) -> None:
        """A turn ended: the listening session's (it is committed and answered)."""
        raise NotImplementedError

    async def _overlap_started(self, answer: Answer, onset_ms: float) -> None:
        """Speech began at ``onset_ms`` while ``answer`` runs."""
        rules = Rules.of(self.config)
        if not rules.barge_in:  # heard, and answered once the reply is over
            await self._decide(answer, pb.OVERLAP_ACTION_LISTEN, "listen_only")
        elif rules.at_onset:  # OpenAI's behaviour: any speech ends the reply, now
            await self._decide(answer, pb.OVERLAP_ACTION_BARGE_IN, "barge_in_on_speech")
            await self._cancel(answer, "turn_detected")
        else:
            overlap = _Overlap(OverlapJudge(rules, onset_ms), answer, self._speech_item)
            self._overlap = overlap
            if rules.resume:
                answer.hold.pause()
                await self._decide(
                    answer, pb.OVERLAP_ACTION_PAUSE, "overlap", audio_ms=answer.sent_ms
                )
            await self._judged(overlap.judge.speaking(self.input_clock_ms))

    async def _overlap_paused(self, overlap: _Overlap, pause: Pause) -> None:
        overlap.pause = pause
        await self._judged(overlap.judge.paused(pause.speech_end_ms, self.input_clock_ms))
        if self._overlap is overlap:
            self._spawn(self._hear_overlap(overlap, pause))

    async def _hear_overlap(self, overlap: _Overlap, pause: Pause) -> None:
        words = self._overlap_words(pause.audio)
        if words is None:
            return
        try:
            text = await words
        except Exception:
            logger.exception("session %s: hearing an overlap failed", self.id, extra=self._log)
            return
        await self._post(lambda: self._overlap_heard(overlap, text, pause.speech_end_ms))

    async def _overlap_heard(self, overlap: _Overlap, text: str, upto_ms: float | None) -> None:
        """Words of the speech over a reply (up to its pause ``upto_ms``, or going on)."""
        if self._overlap is overlap:
            await self._judged(overlap.judge.heard(text, self.input_clock_ms, upto_ms=upto_ms))

    async def _judged(self, judgement: Judgement | None) -> None:
        overlap = self._overlap
        if judgement is None or overlap is None:
            return
        self._overlap = None
        answer = overlap.answer
        running = answer is self._active
        if judgement.verdict is Verdict.MEANT:
            if running:
                await self._decide(
                    answer, pb.OVERLAP_ACTION_BARGE_IN, judgement.reason, judgement=judgement
                )
                await self._cancel(answer, "turn_detected")
            await self._carry_on_as_a_turn(overlap)
            return
        end_ms = overlap.judge.onset_ms + judgement.overlap_ms
        await self._events.put(
            pb.ConverseResponse(
                speech_stopped=pb.SpeechStopped(audio_end_ms=end_ms, item_id=overlap.item_id)
            )
        )
        if overlap.turn is None:
            self._listener.drop_speech()
        self._speech_item = ""
        self._forget_speech()
        if not answer.hold.held:
            await self._decide(
                answer, pb.OVERLAP_ACTION_DROP, judgement.reason, judgement=judgement
            )
            return
        # From where the listener stopped hearing: its ack since the pause, else what was sent.
        resume_at = answer.played_ms if answer.hold.acked else answer.sent_ms
        await self._decide(
            answer,
            pb.OVERLAP_ACTION_RESUME,
            judgement.reason,
            audio_ms=resume_at,
            judgement=judgement,
        )
        answer.hold.release(resume_at)

    async def _carry_on_as_a_turn(self, overlap: _Overlap) -> None:
        """Speech that proved an interruption is the user's turn, ended as any turn is."""
        if overlap.turn is not None:
            await self._speech_stopped(overlap.turn)
        elif overlap.pause is not None and self._listener.detector.in_silence:
            await self._speech_paused(overlap.pause)  # the pause it is in may end the turn

    async def _decide(
        self,
        answer: Answer,
        action: pb.OverlapAction.ValueType,
        reason: str,
        *,
        audio_ms: float = 0.0,
        judgement: Judgement | None = None,
    ) -> None:
        body = pb.OverlapDecision(
            policy=self.config.overlap_policy,
            action=action,
            reason=reason,
            response_id=answer.id,
            item_id=answer.item_id,
            audio_ms=audio_ms,
            overlap_ms=judgement.overlap_ms if judgement else 0.0,
            transcript=judgement.transcript if judgement else "",
            input_item_id=self._speech_item,
        )
        await self._events.put(pb.ConverseResponse(overlap_decision=body))

    def _abandon_overlap(self) -> None:
        """Stops judging speech over a reply (a command settled it): a held reply goes on."""
        overlap, self._overlap = self._overlap, None
        if overlap is not None and overlap.answer.hold.held:
            overlap.answer.hold.release(overlap.answer.sent_ms)

    @property
    def _log(self) -> dict[str, str]:
        return {"session_id": self.id}
