"""Rate limits: token buckets, the allowances of a session and of a key, and the refusals."""

from __future__ import annotations

import pytest

from omni_grpc.core import Limits
from omni_grpc.core.errors import CommandError
from omni_grpc.core.rate_limits import (
    MIN_RETRY_AFTER_S,
    Allowance,
    KeyAllowances,
    Throttle,
    TokenBucket,
)
from omni_grpc.wire import pb
from omni_grpc.wire.tenant_policy import TenantPolicy

from .helpers import (
    append,
    close,
    created,
    decode,
    done,
    handed,
    heartbeat,
    kinds,
    open_session,
    requests,
    text,
)

# 10 commands a second and 100 audio bytes a second, a bucket holding 1 s of each.
SLOW = Limits(
    session_commands_per_s=10.0,
    session_audio_bytes_per_s=100.0,
    rate_burst_s=1.0,
)

# -- the bucket -------------------------------------------------------------------------


def test_a_bucket_starts_full_and_refills_at_its_rate_up_to_its_capacity() -> None:
    bucket = TokenBucket(rate_per_s=10.0, burst_s=2.0, now=0.0)
    assert bucket.capacity == 20.0
    assert bucket.wait_s(20, now=0.0) == 0.0
    bucket.take(20, now=0.0)
    assert bucket.wait_s(1, now=0.0) == pytest.approx(0.1)
    assert bucket.wait_s(1, now=0.05) == pytest.approx(0.05)
    assert bucket.wait_s(1, now=0.1) == 0.0
    assert bucket.wait_s(20, now=100.0) == 0.0
    assert bucket.tokens == 20.0  # refilled to the capacity, not beyond


def test_a_cost_above_the_capacity_is_charged_as_the_capacity() -> None:
    bucket = TokenBucket(rate_per_s=10.0, burst_s=1.0, now=0.0)
    assert bucket.wait_s(1000, now=0.0) == 0.0  # a full bucket lets any command pass
    bucket.take(1000, now=0.0)
    assert bucket.tokens == 0.0
    assert bucket.wait_s(1000, now=0.0) == pytest.approx(1.0)


def test_a_client_that_waits_exactly_the_hint_passes_despite_float_sums() -> None:
    bucket = TokenBucket(rate_per_s=20.0, burst_s=1.0, now=1000.0)
    bucket.take(20, now=1000.0)
    hint = bucket.wait_s(1, now=1000.0)
    assert 1000.0 + hint - 1000.0 < hint  # the sum falls short of the hint by a hair
    assert bucket.wait_s(1, now=1000.0 + hint) == 0.0


def test_a_clock_that_runs_back_adds_no_tokens() -> None:
    bucket = TokenBucket(rate_per_s=10.0, burst_s=1.0, now=5.0)
    bucket.take(10, now=5.0)
    assert bucket.wait_s(1, now=4.0) == pytest.approx(0.1)


# -- the throttle -----------------------------------------------------------------------


def test_commands_past_the_burst_are_refused_with_the_wait_and_take_nothing() -> None:
    throttle = Throttle(Allowance.for_session(SLOW, now=0.0))
    for _ in range(10):
        throttle.charge(heartbeat(), now=0.0)
    with pytest.raises(CommandError) as refused:
        throttle.charge(heartbeat(), now=0.0)
    error = refused.value
    assert (error.code, error.param, error.retryable) == ("rate_limit_exceeded", "commands", True)
    assert error.retry_after_s == pytest.approx(0.1)
    assert throttle.retry_at == pytest.approx(0.1)
    assert throttle.own.commands.tokens == pytest.approx(0.0)  # the refusal took nothing
    throttle.charge(heartbeat(), now=0.1)


def test_audio_bytes_are_limited_apart_from_commands_and_the_longer_wait_is_named() -> None:
    throttle = Throttle(Allowance.for_session(SLOW, now=0.0))
    throttle.charge(append(1, b"\0" * 80), now=0.0)
    with pytest.raises(CommandError) as refused:
        throttle.charge(append(2, b"\0" * 40), now=0.0)
    assert refused.value.param == "audio"
    assert refused.value.retry_after_s == pytest.approx(0.2)
    assert throttle.own.commands.tokens == pytest.approx(9.0)
    throttle.charge(text(2), now=0.0)  # a command without audio still passes


def test_video_frames_count_as_input_bytes() -> None:
    throttle = Throttle(Allowance.for_session(SLOW, now=0.0))
    frame = pb.VideoFrame(data=b"\0" * 100)
    throttle.charge(append(1, b"", video_frames=[frame]), now=0.0)
    with pytest.raises(CommandError):
        throttle.charge(append(2, b"\0\0"), now=0.0)


def test_a_key_allowance_is_shared_and_refuses_without_taking_from_either() -> None:
    tenants = TenantPolicy(commands_per_s=15.0, audio_bytes_per_s=1000.0, burst_s=1.0)
    keys = KeyAllowances(("k1",), tenants, now=0.0)
    assert keys.get("other") is None
    first, second = (Throttle(Allowance.for_session(SLOW, now=0.0)) for _ in range(2))
    first.key = second.key = keys.get("k1")
    for _ in range(10):
        first.charge(heartbeat(), now=0.0)
    for _ in range(5):
        second.charge(heartbeat(), now=0.0)
    with pytest.raises(CommandError) as refused:
        second.charge(heartbeat(), now=0.0)  # its own bucket has 5 left; the key's has none
    assert refused.value.retry_after_s == 0.067  # 1/15 s, rounded up to the millisecond
    assert second.own.commands.tokens == pytest.approx(5.0)


def test_a_hint_is_never_shorter_than_the_minimum_and_the_input_is_held_that_long() -> None:
    fast = Limits(session_commands_per_s=1000.0, rate_burst_s=0.01)
    throttle = Throttle(Allowance.for_session(fast, now=0.0))
    for _ in range(10):
        throttle.charge(heartbeat(), now=0.0)
    with pytest.raises(CommandError) as refused:
        throttle.charge(heartbeat(), now=0.0)  # one token is 1 ms away
    assert refused.value.retry_after_s == MIN_RETRY_AFTER_S == 0.05
    assert throttle.retry_at == 0.05


def test_closing_is_never_refused() -> None:
    throttle = Throttle(Allowance.for_session(SLOW, now=0.0))
    for _ in range(10):
        throttle.charge(heartbeat(), now=0.0)
    throttle.charge(close(11), now=0.0)


# -- through the session ----------------------------------------------------------------


def test_a_refused_command_is_answered_not_applied_and_its_number_used_up() -> None:
    s = open_session(limits=SLOW).session
    for seq in range(1, 11):
        assert requests(s.receive(1, text(seq), now=0.0)) == [handed(text(seq))]
    refused = s.receive(1, text(11, event_id="e11"), now=0.0)
    assert requests(refused) == []
    [event] = decode(refused)
    assert event.error.code == "rate_limit_exceeded"
    assert event.error.type == pb.ERROR_TYPE_RATE_LIMIT
    assert (event.error.client_seq, event.error.event_id) == (11, "e11")
    assert event.error.retry_after.ToMilliseconds() == 100
    assert event.seq and event.applied_client_seq == 11  # journaled: a resume replays it
    # The retry after the wait is the next command; it is applied.
    assert requests(s.receive(1, text(12), now=0.1)) == [handed(text(12))]
    assert requests(s.receive(1, text(11), now=0.2)) == []  # the old number stays used


def test_a_session_that_waited_goes_on_and_close_passes_even_when_limited() -> None:
    s = open_session(limits=SLOW).session
    for _ in range(10):
        s.receive(1, heartbeat(), now=0.0)
    assert kinds(decode(s.receive(1, heartbeat(), now=0.0))) == ["error"]
    assert kinds(decode(s.receive(1, heartbeat(), now=1.0))) == ["heartbeat_ack"]
    for _ in range(10):
        s.receive(1, heartbeat(), now=1.0)
    assert kinds(decode(s.receive(1, close(1), now=1.0))) == ["session_closed"]


# -- what a response's end reports ------------------------------------------------------


def test_the_limits_reported_are_the_tightest_bucket_of_each_kind_read_without_refilling() -> None:
    throttle = Throttle(Allowance.for_session(SLOW, now=0.0))
    for _ in range(4):
        throttle.charge(append(0, b"\0" * 10), now=0.0)
    assert throttle.limits(now=0.0)[0].remaining == 6  # no time passed: what is left
    commands, audio = throttle.limits(now=0.1)
    # 10 commands full; 6 left, plus 0.1 s at 10 a second; full again in 0.3 s.
    assert (commands.name, commands.limit, commands.remaining) == ("commands", 10, 7)
    assert commands.reset.ToMilliseconds() == 300
    assert (audio.name, audio.limit, audio.remaining) == ("audio", 100, 70)
    assert audio.reset.ToMilliseconds() == 300
    assert throttle.own.commands.tokens == pytest.approx(6.0)  # reading took nothing, added nothing
    # With a key, the key's bucket when it holds less than the session's own.
    tenants = TenantPolicy(commands_per_s=5.0, audio_bytes_per_s=1000.0, burst_s=1.0)
    throttle.key = KeyAllowances(("k",), tenants, now=0.0).get("k")
    assert throttle.key is not None
    throttle.key.commands.take(4, now=0.0)
    commands, audio = throttle.limits(now=0.1)
    assert (commands.limit, commands.remaining) == (5, 1)  # the key's: 1.5 left of 5
    assert (audio.limit, audio.remaining) == (100, 70)  # the session's own: less than the key's


def test_every_response_done_carries_the_session_limits_as_it_ended() -> None:
    s = open_session(limits=SLOW).session
    for seq in range(1, 4):
        s.receive(1, text(seq), now=0.0)
    s.publish(created("resp_1"), now=0.0)
    [event] = decode(s.publish(done("resp_1"), now=0.2))
    commands, audio = event.response_done.rate_limits
    assert (commands.name, commands.limit, commands.remaining) == ("commands", 10, 9)
    # Each command's bytes on the wire were charged to the byte bucket too, and it refills.
    assert (audio.name, audio.limit) == ("audio", 100)
    assert audio.remaining == int(s.throttle.own.audio_bytes.level(0.2)) < 100
    assert audio.reset.ToMilliseconds() > 0


def test_a_listen_that_ends_a_response_carries_the_limits_and_a_bare_one_does_not() -> None:
    s = open_session(limits=SLOW).session
    s.publish(created("resp_1"), now=0.0)
    ending = pb.ResponseListen(response_id="resp_1", reason="model_listen")
    [event] = decode(s.publish(pb.ConverseResponse(response_listen=ending), now=0.0))
    assert [limit.name for limit in event.response_listen.rate_limits] == ["commands", "audio"]
    bare = pb.ResponseListen(reason="silence_or_noise")
    [event] = decode(s.publish(pb.ConverseResponse(response_listen=bare), now=0.0))
    assert not event.response_listen.rate_limits
