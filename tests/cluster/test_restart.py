"""A replica killed (kill -9) under scripts/cluster's supervision (``--restart always``, as
systemd or Kubernetes would run it) comes back on its own route, and the sessions it owned go on
with nothing lost or doubled: those whose clients resumed at once on its peers (they adopt once
its lease lapses, or on it if it is back first), and a session whose client was away during the
death on the restarted replica itself, which takes back from the store what still names its
route.
"""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from omni_grpc.client import DuplexClient
from tests.cluster.local import LOOPBACK, LocalCluster, wait_for
from tests.cluster.speaker import OPTIONS, Speaker, words

SESSIONS = 6
LONG = "is a long sentence that keeps the answer playing for a good while"
# Longer than a restart takes on a loaded machine: the parked session's record must outlive
# the replica's death and its start (a detached record lapses with the disconnect grace).
LIMITS = "[limits]\ndisconnect_grace_s = 180.0\n"
RESTART_TIMEOUT_S = 120.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    tmp_path = Path(tmp_path_factory.mktemp("cluster"))
    config = tmp_path / "limits.toml"
    config.write_text(LIMITS)
    local = LocalCluster(
        tmp_path,
        serve_args=(*LOOPBACK, "--durability", "sync", "--config", str(config)),
        cluster_args=("--restart", "always"),
    )
    try:
        yield local.wait_ready()
    finally:
        local.stop()


async def test_a_killed_replica_restarts_on_its_route_and_takes_back_its_sessions(
    cluster: LocalCluster,
) -> None:
    speakers = [await Speaker.open(cluster.target) for _ in range(SESSIONS)]
    for i, speaker in enumerate(speakers):
        await speaker.say(f"alpha{i}")
    for speaker in speakers:
        await speaker.answered(1)
    victim, held = Counter(s.route for s in speakers).most_common(1)[0]
    assert held >= 2, "every replica has one session: the test needs two on one"
    # One of the victim's sessions is parked: its client lets go before the death and comes
    # back only once the replica is back.
    parked_index = next(i for i, s in enumerate(speakers) if s.route == victim)
    parked = speakers.pop(parked_index)
    handle = await parked.client.detach()
    parked_seqs = parked.seqs()
    for i, speaker in enumerate(speakers):
        await speaker.say(f"beta{i} {LONG}")
    for speaker in speakers:  # every second answer is under way
        await speaker.until(
            lambda s: len(s.of_kind("response_created")) >= 2 and s.of_kind("output_audio_delta"),
            "a second answer",
        )
    old_pid = cluster.replica(victim)["pid"]
    cluster.kill(victim, signal.SIGKILL)
    await wait_for(
        lambda: cluster.restarted(victim, 1), RESTART_TIMEOUT_S, f"{victim} to come back"
    )
    assert cluster.replica(victim)["pid"] != old_pid
    assert cluster.health(victim)[0] == 200

    # The parked session resumes through the proxy with its route: its own replica, restarted,
    # takes it back from the store, the conversation whole.
    back = Speaker(
        await DuplexClient.resume(
            cluster.target,
            handle.session_id,
            handle.resume_token,
            handle.last_seq,
            options=OPTIONS,
            route=handle.route,
        )
    )
    await back.say("gamma")
    answer = await back.answered(1)
    assert back.route == victim
    assert cluster.metric(victim, "omni_sessions_adopted_total", 'why="own_route"') >= 1
    assert f"alpha{parked_index}" in words(answer), words(answer)
    seqs = parked_seqs + back.seqs()
    assert seqs == list(range(1, len(seqs) + 1)), seqs

    # The sessions that were talking go on wherever they were adopted, nothing lost or doubled.
    for speaker in speakers:
        await speaker.answered(2)
    for i, speaker in enumerate(speakers):
        await speaker.say(f"gamma{i}")
    for i, speaker in enumerate(speakers):
        third = await speaker.answered(3)
        seqs = speaker.seqs()
        assert seqs == list(range(1, len(seqs) + 1)), (i, seqs)
        assert speaker.client.stats.duplicate_events == 0
        name = f"alpha{i + (i >= parked_index)}"  # the names given before the parked one left
        assert name in words(third) and f"beta{i}" in words(third), words(third)
    for speaker in [*speakers, back]:
        await speaker.close()
