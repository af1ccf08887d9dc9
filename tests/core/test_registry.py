"""The registry: session slots and ids, drain, bad configurations, the earliest deadline."""

from __future__ import annotations

import re

import pytest

from omni_grpc.core import Limits, Registry, Status, StreamRefused
from omni_grpc.wire import pb

from .helpers import ENGINE


def test_open_beyond_max_sessions_is_refused_retryably() -> None:
    registry = Registry(Limits(max_sessions=2, open_retry_after_s=1.5), ENGINE)
    first, _ = registry.open(pb.OpenSession(), now=0.0)
    registry.open(pb.OpenSession(), now=0.0)
    with pytest.raises(StreamRefused) as refused:
        registry.open(pb.OpenSession(), now=0.0)
    error = refused.value
    assert (error.status, error.code, error.retryable, error.retry_after_s) == (
        Status.RESOURCE_EXHAUSTED,
        "resource_exhausted",
        True,
        1.5,
    )
    expected = pb.ErrorReport(
        code="resource_exhausted",
        type=pb.ERROR_TYPE_RATE_LIMIT,
        message="session capacity exhausted: limit=2",
        retryable=True,
    )
    expected.retry_after.FromMilliseconds(1500)
    assert error.to_error() == expected
    assert len(registry) == 2
    registry.discard(first)  # a slot frees when its session ends
    assert len(registry) == 1
    registry.open(pb.OpenSession(), now=0.0)


def test_expiry_frees_the_slot() -> None:
    registry = Registry(Limits(max_sessions=1), ENGINE)
    session, _ = registry.open(pb.OpenSession(), now=0.0)
    session.detach(1, now=0.0)
    assert [s for s, _ in registry.tick(Limits().disconnect_grace_s)] == [session]
    registry.open(pb.OpenSession(), now=40.0)


def test_discarding_a_stale_object_frees_nothing() -> None:
    registry = Registry(Limits(), ENGINE)
    session, _ = registry.open(pb.OpenSession(), now=0.0)
    registry.discard(session)
    registry.discard(session)
    assert len(registry) == 0


def test_a_draining_server_refuses_opens() -> None:
    registry = Registry(Limits(open_retry_after_s=2.0), ENGINE)
    registry.accepting = False
    with pytest.raises(StreamRefused) as refused:
        registry.open(pb.OpenSession(), now=0.0)
    assert (
        refused.value.status,
        refused.value.code,
        refused.value.retryable,
        refused.value.retry_after_s,
    ) == (Status.UNAVAILABLE, "server_shutting_down", True, 2.0)


def test_a_bad_config_refuses_the_stream_with_its_code() -> None:
    registry = Registry(Limits(), ENGINE)
    with pytest.raises(StreamRefused) as refused:
        registry.open(pb.OpenSession(config=pb.SessionConfig(temperature=3.0)), now=0.0)
    assert (refused.value.status, refused.value.code, refused.value.message) == (
        Status.INVALID_ARGUMENT,
        "invalid_session_config",
        "temperature must be in [0, 2]",
    )
    assert len(registry) == 0


def test_session_ids_are_unique_and_unguessable() -> None:
    registry = Registry(Limits(max_sessions=100), ENGINE)
    ids = {registry.open(pb.OpenSession(), now=0.0)[0].id for _ in range(100)}
    assert len(ids) == 100
    assert all(re.fullmatch(r"sess_[0-9a-f]{32}", session_id) for session_id in ids)


def test_registry_iterates_a_snapshot_and_reports_the_earliest_deadline() -> None:
    registry = Registry(Limits(), ENGINE)
    assert registry.next_deadline() is None
    a, _ = registry.open(pb.OpenSession(), now=10.0)
    b, _ = registry.open(pb.OpenSession(), now=0.0)
    b.publish(
        pb.ConverseResponse(response_created=pb.ResponseCreated(response=pb.Response(id="r"))),
        now=0.0,
    )  # no deadline while responding
    assert registry.next_deadline() == 10.0 + Limits().idle_timeout_s
    for session in registry:
        registry.discard(session)  # safe while iterating
    assert len(registry) == 0 and a.id != b.id
