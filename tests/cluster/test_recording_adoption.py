"""One recording per session across an adoption: replicas recording into one folder
(``--record all``), one killed (kill -9) in the middle of answers. Each moved session's
recording has the dead replica's part and the adopter's, the manifest names both, and read
together they hold each event once, in order: exactly what the client was given."""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from omni_grpc.client.recordings import RecordingError, load
from tests.cluster.local import LOOPBACK, LocalCluster, wait_for
from tests.cluster.speaker import Speaker

SESSIONS = 4
LONG = "is a long sentence that keeps the answer playing for a good while"


@pytest.fixture(scope="module")
def recording_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    tmp_path = Path(tmp_path_factory.mktemp("cluster"))
    record = ("--record", "all", "--record-dir", str(tmp_path / "recordings"))
    local = LocalCluster(
        tmp_path, replicas=2, serve_args=(*LOOPBACK, "--durability", "sync", *record)
    )
    local.record_dir = tmp_path / "recordings"  # type: ignore[attr-defined]
    try:
        yield local.wait_ready()
    finally:
        local.stop()


async def test_an_adopted_session_keeps_one_recording_in_two_parts(
    recording_cluster: LocalCluster,
) -> None:
    cluster = recording_cluster
    speakers = [await Speaker.open(cluster.target) for _ in range(SESSIONS)]
    for i, speaker in enumerate(speakers):
        await speaker.say(f"alpha{i} {LONG}")
    for speaker in speakers:  # every answer is under way
        await speaker.until(lambda s: len(s.of_kind("output_audio_delta")) > 0, "an answer")
    record_dir: Path = cluster.record_dir  # type: ignore[attr-defined]
    ids = [s.client.session_id for s in speakers]
    await wait_for(lambda: all(_begun(record_dir / sid) for sid in ids), 30, "the recordings")
    victim, _ = Counter(s.route for s in speakers).most_common(1)[0]
    moved = [s for s in speakers if s.route == victim]
    assert len(moved) >= 2
    cluster.kill(victim, signal.SIGKILL)
    for i, speaker in enumerate(speakers):
        await speaker.answered(1)
        await speaker.say(f"beta{i}")
        await speaker.answered(2)
        await speaker.close()
    sessions = {s.client.session_id: s for s in speakers}
    # The adopters end their parts when the sessions close: wait for the last lines.
    await wait_for(lambda: all(_ended(record_dir / sid) for sid in sessions), 60, "the ends")
    for session_id, speaker in sessions.items():
        recorded = load(record_dir / session_id)
        replicas = [part.entry["replica"] for part in recorded.parts]
        events = [line for _, line in recorded.lines if line["type"] == "event"]
        assert [line["seq"] for line in events] == speaker.seqs(), session_id
        assert events[-1]["kind"] == "session_closed"
        if speaker in moved:
            assert len(replicas) == 2 and replicas[0] == victim != replicas[1], replicas
            assert recorded.parts[1].entry["started_by"] == "adopted"
        else:
            assert replicas == [speaker.route]


def _begun(folder: Path) -> bool:
    """Whether the session's recording has its first part on disk (the replica's first
    batch: a replica killed before it leaves only what the store kept, for the adopter)."""
    try:
        return bool(load(folder).parts[0].lines)
    except RecordingError:
        return False


def _ended(folder: Path) -> bool:
    try:
        recorded = load(folder)
    except RecordingError:
        return False  # not written yet
    return recorded.end()["reason"] == "ended"
