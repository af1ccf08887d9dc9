"""Idle prompts: when a user stays silent after the assistant's answer, the assistant speaks.

OpenAI's ``idle_timeout_ms``: the timer starts once the last answer has been heard (its
response done and its audio played), and when the user stays silent that long the server says
so (``input_audio_buffer.timeout_triggered``), commits the buffer and creates a response, so a
voice agent can ask whether the user is still there. Pure, on the input audio clock; the session
arms it when a response ends, stops it when speech or a response starts, and asks it on every
append whether it is due. It fires once per silence.
"""

from __future__ import annotations

import time


def heard_by(first_audio: float | None, sent_ms: float, now: float | None = None) -> float:
    """How many ms from now (monotonic seconds) a reply whose first audio went out at
    ``first_audio``, with ``sent_ms`` of audio, ends playing for a listener who plays it in
    real time from its first chunk; 0 for a reply with no audio or already heard."""
    if first_audio is None:
        return 0.0
    now = time.monotonic() if now is None else now
    return max(0.0, (first_audio + sent_ms / 1000 - now) * 1000)


class IdleTimer:
    """The user's silence since the assistant's last answer was heard, against a timeout."""

    def __init__(self, timeout_ms: float) -> None:
        self.timeout_ms = timeout_ms
        self.since_ms: float | None = None  # where the silence began, on the input clock

    def arm(self, since_ms: float) -> None:
        """The assistant's answer ends being heard at ``since_ms``: the silence counts from
        there (a timeout of 0 never arms)."""
        self.since_ms = since_ms if self.timeout_ms > 0 else None

    def stop(self) -> None:
        """Speech or a response: nobody is idle."""
        self.since_ms = None

    def due(self, now_ms: float) -> bool:
        """Whether the silence has lasted the timeout at ``now_ms``."""
        return self.since_ms is not None and now_ms - self.since_ms >= self.timeout_ms
