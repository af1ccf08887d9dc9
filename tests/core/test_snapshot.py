"""A session exported as plain data and adopted by another registry (core/snapshot.py).

What a replica writes to the store (``export_state`` and the journal's entries) must be enough
for a peer to take the session on: the same token (and no other) resumes it, the events after
the client's cursor replay with their own seqs, a response cut with its replica ends with its
typed reason, and a cursor past what the store holds is a resync, never a silent gap.
"""

from __future__ import annotations

import dataclasses

import pytest

from omni_grpc.core import Limits, Registry, State, StreamRefused
from omni_grpc.core.admission import held_bytes
from omni_grpc.core.commands import AppendAudio, CreateResponse, kind_of
from omni_grpc.core.journal import Journal
from omni_grpc.core.session import ResumeGap, Session
from omni_grpc.core.snapshot import (
    MOVED_REASON,
    SessionState,
    adopt,
    check_adopted_cursor,
    export_state,
)
from omni_grpc.wire import pb
from omni_grpc.wire.pcm import CANONICAL_INPUT
from tests.core.helpers import (
    ENGINE,
    LIMITS,
    ack,
    append,
    cmd,
    created,
    decode,
    delta,
    done,
    open_session,
    resume,
    text,
    token_of,
)

# Input in the canonical form: the pending bytes are the appended bytes, one for one.
CANONICAL = pb.SessionConfig(input_audio_format=CANONICAL_INPUT)


def _stored(session: Session) -> tuple[SessionState, list[tuple[int, bytes]]]:
    """What a store holds of ``session``, through the flat fields it writes."""
    fields = export_state(session).to_fields()
    state = SessionState.from_fields({key.encode(): value for key, value in fields.items()})
    return state, session.journal.entries_after(state.dropped_through)


def _adopt(
    session: Session, now: float = 5.0
) -> tuple[Registry, Session, list[pb.ConverseResponse]]:
    state, entries = _stored(session)
    registry = Registry(LIMITS, ENGINE)
    adopted, effects = adopt(
        state,
        entries,
        limits=LIMITS,
        engine=ENGINE,
        capabilities=registry.capabilities,
        now=now,
    )
    registry.take(adopted)
    return registry, adopted, decode(effects)


def test_an_adopted_session_resumes_with_its_token_and_replays_after_the_cursor() -> None:
    opened = open_session()
    session = opened.session
    session.receive(1, text(1, "first"), 1.0)
    session.publish(created("r1"), 1.0)
    session.publish(done("r1"), 1.0)
    session.receive(1, ack(1, client_seq=2), 1.0)  # the client has seq 1
    head = session.journal.head
    registry, adopted, cut = _adopt(session)
    assert cut == []  # nothing was running
    assert adopted.state is State.DETACHED and adopted.applied_client_seq == 2
    assert adopted.config == session.config
    generation, effects, _ = resume(adopted, opened.token, 1, 6.0)
    assert generation == session.generation + 1
    replayed = [e for e in decode(effects) if e.seq]
    assert [e.seq for e in replayed] == list(range(2, head + 1))
    assert registry.knows(adopted.id)


def test_another_token_or_key_cannot_resume_an_adopted_session() -> None:
    opened = open_session()
    _, adopted, _ = _adopt(opened.session)
    with pytest.raises(StreamRefused):
        adopted.resume("not-the-token", 0, 6.0)
    with pytest.raises(StreamRefused):
        adopted.resume(opened.token, 0, 6.0, key="another-key")


def test_a_response_cut_with_its_replica_ends_with_session_moved() -> None:
    session = open_session().session
    session.publish(created("r1"), 1.0)
    session.publish(delta("r1"), 1.0)
    _, adopted, cut = _adopt(session)
    assert [e.WhichOneof("event") for e in cut] == []  # detached: journaled, not sent
    replay = adopted.journal.entries_after(session.journal.head)
    ending = pb.ConverseResponse.FromString(replay[0][1])
    assert ending.seq == session.journal.head + 1
    response = ending.response_done.response
    assert (response.id, response.status) == ("r1", pb.RESPONSE_STATUS_FAILED)
    assert response.status_reason == MOVED_REASON
    assert adopted.responses.active_response_id == ""


def test_a_cursor_past_the_stored_journal_is_a_resync() -> None:
    session = open_session().session
    session.publish(created("r1"), 1.0)
    _, adopted, _ = _adopt(session)
    check_adopted_cursor(adopted, adopted.journal.head)  # what the store has: fine
    with pytest.raises(ResumeGap) as gap:
        check_adopted_cursor(adopted, adopted.journal.head + 1)
    event = pb.ConverseResponse.FromString(gap.value.payload)
    assert event.resync_required.reason == pb.RESYNC_REASON_JOURNAL_GAP


def test_an_activation_not_yet_confirmed_keeps_the_presented_token_good() -> None:
    opened = open_session()
    session = opened.session
    session.detach(1, 1.0)
    session.resume(opened.token, 0, 2.0)  # the rotated token may never have arrived
    _, adopted, _ = _adopt(session)
    generation, effects = adopted.resume(opened.token, 0, 6.0)
    assert token_of(effects) and generation == session.generation + 1


def test_an_overflowed_journal_stays_overflowed() -> None:
    session = open_session().session
    session.journal.overflowed = True
    _, adopted, _ = _adopt(session)
    assert adopted.journal.overflowed


def test_a_broken_journal_is_refused() -> None:
    journal = Journal(ttl_s=60, max_bytes=1 << 20)
    with pytest.raises(ValueError, match="expected seq 3"):
        journal.restore(2, [(4, b"x")], 0.0)


def test_a_draining_or_full_registry_takes_no_session() -> None:
    session = open_session().session
    registry = Registry(LIMITS, ENGINE)
    registry.accepting = False
    with pytest.raises(StreamRefused) as draining:
        registry.take(session)
    assert draining.value.code == "server_shutting_down"
    full = Registry(Limits(max_sessions=0), ENGINE)
    with pytest.raises(StreamRefused) as refused:
        full.take(session)
    assert refused.value.code == "resource_exhausted"


def test_a_forgotten_session_leaves_no_tombstone() -> None:
    opened = open_session()
    opened.registry.forget(opened.session)
    assert not opened.registry.knows(opened.session.id)
    opened.registry.forget(opened.session)  # twice: nothing more to forget


def test_the_hosting_server_s_route_is_told_in_created_and_resumed() -> None:
    registry = Registry(LIMITS, ENGINE)
    registry.route = "r1"
    session, effects = registry.open(pb.OpenSession(), 0.0)
    assert decode(effects)[0].session_created.route == "r1"
    token = token_of(effects)
    peer = Registry(LIMITS, ENGINE)
    peer.route = "r2"
    state, entries = _stored(session)
    adopted, _ = adopt(
        state, entries, limits=LIMITS, engine=ENGINE, capabilities=peer.capabilities, now=1.0
    )
    peer.take(adopted)
    _, resumed = adopted.resume(token, 0, 2.0)
    assert decode(resumed)[0].session_resumed.route == "r2"  # the adopter's, for the next calls


# -- the input not yet committed (issue 29) ---------------------------------------------------


def _adopt_into(session: Session, registry: Registry) -> Session:
    state, entries = _stored(session)
    adopted, _ = adopt(
        state,
        entries,
        limits=LIMITS,
        engine=ENGINE,
        capabilities=registry.capabilities,
        now=5.0,
        budget=registry.budget,
    )
    registry.take(adopted)
    return adopted


def test_the_pending_input_ledger_goes_with_the_session() -> None:
    opened = open_session(config=CANONICAL)
    session = opened.session
    session.receive(1, append(1, b"\0" * 6), 1.0)
    session.receive(1, append(2, b"\0" * 4), 1.0)
    registry = Registry(LIMITS, ENGINE)
    adopted = _adopt_into(session, registry)
    # Held in the adopter's budget, as the replayed audio will be in its engine.
    assert adopted.admission.pending_input_bytes == 10 == registry.budget.held
    assert adopted.admission.max_pending_input_bytes == LIMITS.max_pending_input_bytes
    resume(adopted, opened.token, 0, 6.0)
    # The commit the client sends next finds the input: not input_audio_buffer_empty.
    commit = adopted.receive(
        adopted.generation, cmd(3, commit_input_audio=pb.CommitInputAudio()), 6.0
    )
    assert [kind_of(command) for command in commit.engine] == ["commit_input_audio"]
    assert adopted.admission.pending_input_bytes == 0 == registry.budget.held


def test_a_record_written_before_the_input_was_kept_has_none_pending() -> None:
    fields = export_state(open_session().session).to_fields()
    del fields["pending"]
    state = SessionState.from_fields({key.encode(): value for key, value in fields.items()})
    assert state.pending_input_bytes == 0


@pytest.mark.parametrize(
    ("rate_hz", "native"), [(16000, True), (24000, False)], ids=["native", "converted"]
)
def test_a_stored_append_is_readmitted_as_it_was_admitted(rate_hz: int, native: bool) -> None:
    engine = dataclasses.replace(ENGINE, native_input_rates_hz=(16000,))
    session = open_session(engine=engine).session
    request = append(1, b"\1\0" * 3, encoding=pb.AUDIO_ENCODING_PCM16, sample_rate_hz=rate_hz)
    [admitted] = session.receive(1, request, 1.0).engine
    stored = pb.ConverseRequest.FromString(request.SerializeToString())
    again = session.admission.readmit(stored)
    assert type(again) is AppendAudio and again == admitted and again.native is native
    held = held_bytes(len(again.audio), again.encoding, again.rate_hz, again.native, ())
    assert held == session.admission.pending_input_bytes == (6 if native else 6 * 2 // 3)


def test_a_stored_command_is_readmitted_as_it_is() -> None:
    request = cmd(4, create_response=pb.CreateResponse())
    again = open_session().session.admission.readmit(request)
    assert type(again) is CreateResponse and again.client_seq == 4
