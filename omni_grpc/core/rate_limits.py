"""Rate limits: token buckets for commands and input audio, per session and per API key.

A client may send commands and audio only so fast. Each holder of a limit (one session; one
API key, across all its sessions) has an :class:`Allowance`: a bucket of commands and a bucket
of input bytes: an append pays its audio (and video frames), any other command its length on
the wire, so a command made large (a 15 MiB heartbeat, a 5 MiB ``event_id``) costs its sender
what it costs the server. A bucket fills at its rate up to ``rate * burst_s`` and each command
takes what it costs; a command that finds any of its buckets short is refused with the
retryable ``rate_limit_exceeded`` error and a ``retry_after`` saying when it would pass, and it
takes nothing, so a refusal never deepens the wait.

A refused command is answered like every other refused command (see ``docs/protocol.md``): its
``client_seq`` is used up and the error echoes it, so the client knows exactly which command to
send again, as a new one. It is never applied and never reaches the engine.

Everything is plain arithmetic on the ``now`` the caller passes in; nothing here reads a clock.
The defaults (in :class:`~omni_grpc.core.limits.Limits`) are far above what a real client
sends: a 10 ms chunk stream of 48 kHz f32 stereo audio is 100 commands and 384 000 bytes a second.
"""

from __future__ import annotations

import math

from omni_grpc.core.errors import CommandError
from omni_grpc.core.limits import Limits
from omni_grpc.wire import pb
from omni_grpc.wire.tenant_policy import TenantPolicy

RATE_LIMIT_CODE = "rate_limit_exceeded"
# The ``param`` of a refusal names the bucket that was short, so a transport can say which limit;
# a response_done's rate limits are named the same (pb.RateLimit.name).
COMMANDS_PARAM = "commands"
AUDIO_PARAM = "audio"
# Float sums of clock readings fall short by a hair: a client that waited exactly the hint
# must pass, so a bucket this close to the cost counts as holding it.
ROUNDING_TOKENS = 1e-6
# The shortest retry hint. A hint of one token's time (2 ms at 500 commands a second) would
# have a flooder refused after nearly every command it gets through; at 50 ms a session that
# floods is refused at most 20 times a second, and the transports hold its input that long.
MIN_RETRY_AFTER_S = 0.05
# Commands never refused for rate: ending the session only lowers the load.
UNTHROTTLED_COMMANDS = frozenset({"close_session"})


class TokenBucket:
    """Tokens that refill at ``rate_per_s`` up to ``capacity``; it starts full."""

    __slots__ = ("capacity", "rate_per_s", "tokens", "updated_at")

    def __init__(self, rate_per_s: float, burst_s: float, now: float) -> None:
        self.rate_per_s = rate_per_s
        self.capacity = rate_per_s * burst_s
        self.tokens = self.capacity
        self.updated_at = now

    def wait_s(self, cost: float, now: float) -> float:
        """Seconds until ``cost`` tokens are there; 0 when they are there now.

        A cost above the capacity is charged as the capacity, so a command as large as the
        server admits at all can always pass on a full bucket.
        """
        self._refill(now)
        capacity = self.capacity
        missing = (cost if cost < capacity else capacity) - self.tokens
        if missing <= ROUNDING_TOKENS:
            return 0.0
        return missing / self.rate_per_s

    def take(self, cost: float, now: float) -> None:
        """Takes ``cost`` tokens (call after :meth:`wait_s` said 0)."""
        self._refill(now)
        self.spend(cost)

    def spend(self, cost: float) -> None:
        """Takes ``cost`` tokens right after :meth:`wait_s` said 0 at the same moment (already
        refilled: the charge of every command does not refill twice)."""
        self.tokens -= min(cost, self.capacity)

    def level(self, now: float) -> float:
        """The tokens held at ``now``, read without refilling (a report changes nothing)."""
        elapsed = now - self.updated_at
        if elapsed <= 0:
            return self.tokens
        return min(self.capacity, self.tokens + elapsed * self.rate_per_s)

    def state(self, name: str, now: float) -> pb.RateLimit:
        """The bucket as a client is told of it: what it holds full and now, and how long
        until it is full again."""
        level = self.level(now)
        report = pb.RateLimit(
            name=name, limit=math.floor(self.capacity), remaining=max(math.floor(level), 0)
        )
        report.reset.FromMilliseconds(math.ceil((self.capacity - level) / self.rate_per_s * 1000))
        return report

    def _refill(self, now: float) -> None:
        # Twice per command: comparisons, not calls of min and max. The tokens never exceed
        # the capacity, so no time passing (or a clock that ran back) leaves them as they are.
        elapsed = now - self.updated_at
        if elapsed > 0:
            tokens = self.tokens + elapsed * self.rate_per_s
            self.tokens = tokens if tokens < self.capacity else self.capacity
        self.updated_at = now


class Allowance:
    """The commands and input audio bytes one holder (a session, or an API key) may send."""

    __slots__ = ("audio_bytes", "commands")

    def __init__(self, commands_per_s: float, audio_bytes_per_s: float, burst_s: float, now: float):
        self.commands = TokenBucket(commands_per_s, burst_s, now)
        self.audio_bytes = TokenBucket(audio_bytes_per_s, burst_s, now)

    def wait_s(self, audio: int, now: float) -> tuple[float, str]:
        """Seconds until one command with ``audio`` bytes passes (0 now), and the bucket that
        is short (the command bucket on a tie). A command without audio leaves the audio
        bucket alone: it would wait for nothing, and its refill can come later unchanged."""
        wait = self.commands.wait_s(1, now)
        if audio:
            audio_wait = self.audio_bytes.wait_s(audio, now)
            if audio_wait > wait:
                return audio_wait, AUDIO_PARAM
        return wait, COMMANDS_PARAM

    def spend(self, audio: int) -> None:
        """Takes one command and ``audio`` bytes right after :meth:`wait_s` said 0."""
        self.commands.spend(1)
        if audio:
            self.audio_bytes.spend(audio)

    def take(self, audio: int, now: float) -> tuple[float, str]:
        """:meth:`wait_s`, then :meth:`spend` when it said 0, in one call: what a session
        without a key's allowance pays per command (the buckets' arithmetic written out here,
        as :meth:`TokenBucket.wait_s` has it, because every command runs it)."""
        commands, audio_bytes = self.commands, self.audio_bytes
        wait, param = 0.0, COMMANDS_PARAM
        elapsed = now - commands.updated_at
        if elapsed > 0:
            tokens = commands.tokens + elapsed * commands.rate_per_s
            commands.tokens = tokens if tokens < commands.capacity else commands.capacity
        commands.updated_at = now
        one = 1.0 if commands.capacity > 1.0 else commands.capacity
        missing = one - commands.tokens
        if missing > ROUNDING_TOKENS:
            wait = missing / commands.rate_per_s
        if audio:
            elapsed = now - audio_bytes.updated_at
            if elapsed > 0:
                tokens = audio_bytes.tokens + elapsed * audio_bytes.rate_per_s
                audio_bytes.tokens = (
                    tokens if tokens < audio_bytes.capacity else audio_bytes.capacity
                )
            audio_bytes.updated_at = now
            cost = audio if audio < audio_bytes.capacity else audio_bytes.capacity
            missing = cost - audio_bytes.tokens
            if missing > ROUNDING_TOKENS and missing / audio_bytes.rate_per_s > wait:
                wait, param = missing / audio_bytes.rate_per_s, AUDIO_PARAM
            if not wait:
                audio_bytes.tokens -= cost
        if not wait:
            commands.tokens -= one
        return wait, param

    @classmethod
    def for_session(cls, limits: Limits, now: float) -> Allowance:
        """The allowance of one session."""
        return cls(
            limits.session_commands_per_s,
            limits.session_audio_bytes_per_s,
            limits.rate_burst_s,
            now,
        )

    @classmethod
    def for_key(cls, tenants: TenantPolicy, now: float) -> Allowance:
        """The allowance of one API key, shared by every session opened or resumed with it."""
        return cls(tenants.commands_per_s, tenants.audio_bytes_per_s, tenants.burst_s, now)


class Throttle:
    """The allowances one session's commands are charged to: its own, and its key's if any.

    The transport sets :attr:`key` when a stream with an API key opens or resumes the session,
    and reads :attr:`retry_at` to read nothing more from the stream before the retry hint.
    """

    __slots__ = ("key", "own", "retry_at")

    def __init__(self, own: Allowance) -> None:
        self.own = own
        self.key: Allowance | None = None
        # When the retry hint of the last refusal runs out; before it, input only meets refusals.
        self.retry_at = 0.0

    def limits(self, now: float) -> list[pb.RateLimit]:
        """The session's rate limits at ``now``: of each kind, the bucket that holds the
        least, its own or its key's (the one that would refuse first)."""
        holders = [self.own] if self.key is None else [self.own, self.key]
        return [
            min(
                (getattr(holder, attribute).state(name, now) for holder in holders),
                key=lambda report: report.remaining,
            )
            for name, attribute in ((COMMANDS_PARAM, "commands"), (AUDIO_PARAM, "audio_bytes"))
        ]

    def charge(
        self,
        request: pb.ConverseRequest,
        now: float,
        kind: str | None = None,
        media_bytes: int | None = None,
    ) -> None:
        """Takes one command and its input media bytes, or raises CommandError and takes
        nothing.

        ``kind`` and ``media_bytes`` (an append's audio and video frame bytes) are the
        command's, when the caller has them already (each is read once per command).
        """
        if kind is None:
            kind = request.WhichOneof("command")
        if kind in UNTHROTTLED_COMMANDS:
            return
        if media_bytes is None:
            media_bytes = _media_bytes(request) if kind == "append_input_audio" else 0
        key = self.key
        if key is None:
            wait, param = self.own.take(media_bytes, now)
        else:
            # Both allowances are asked before either is charged: a refusal takes nothing.
            wait, param = self.own.wait_s(media_bytes, now)
            key_wait, key_param = key.wait_s(media_bytes, now)
            if key_wait > wait:
                wait, param = key_wait, key_param
            if not wait:
                self.own.spend(media_bytes)
                key.spend(media_bytes)
        if wait:
            # Whole milliseconds on the wire, rounded up so that a retry on time passes.
            retry_after_s = max(math.ceil(wait * 1000) / 1000, MIN_RETRY_AFTER_S)
            self.retry_at = now + retry_after_s
            raise CommandError(
                RATE_LIMIT_CODE,
                f"too many {_what(param, kind)}; retry after {retry_after_s:.3f} s",
                param=param,
                retryable=True,
                retry_after_s=retry_after_s,
            )


def _what(param: str, kind: str | None) -> str:
    """What a refusal for rate says the client sent too much of."""
    if param != AUDIO_PARAM:
        return "commands"
    return "audio bytes" if kind == "append_input_audio" else "bytes (audio and commands)"


def _media_bytes(request: pb.ConverseRequest) -> int:
    append = request.append_input_audio
    return len(append.audio) + sum(len(frame.data) for frame in append.video_frames)


class KeyAllowances:
    """The allowance of each configured API key, made up front so no client can add one (its
    rates are the tenant policy's).

    Without configured keys there are none: every client is then the same anonymous tenant,
    and a shared allowance would let one of them starve the others.
    """

    __slots__ = ("_by_key",)

    def __init__(self, keys: tuple[str, ...], tenants: TenantPolicy, now: float) -> None:
        self._by_key = {key: Allowance.for_key(tenants, now) for key in keys}

    def get(self, key: str) -> Allowance | None:
        """The allowance of ``key`` (already checked by the transport), or None."""
        return self._by_key.get(key)
