"""The Node and Go clients when the replica holding their session is killed (kill -9) in the
middle of their appends: the adopter has the audio the dead replica had applied (the clients
resend only what comes after the number it tells them), so the turn they commit is whole.

The replicas carry the fault hook (``OMNI_TEST_KILL_AT``, omni_grpc/server/fault_hook.py): the
owner of a session SIGKILLs itself once the store holds the session's 10th append, a second
into the 4 s the client says at real-time pace. The loopback says how long the turn it heard
was. tests/cluster/test_exactly_once.py kills the Python client's owner at every moment of a
turn; this file shows the other two clients resend exactly what the adopter lacks.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.protobuf import json_format

from omni_grpc.wire import pb
from tests.clients.driver import GoBuild
from tests.clients.test_clients_cluster import SECONDS, assert_contiguous, opened_so_far, tone
from tests.cluster.local import LOOPBACK, LocalCluster, wait_for

pytestmark = pytest.mark.timeout(300)
SAID = f"you said {SECONDS:.2f} seconds of audio"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    tmp_path = Path(tmp_path_factory.mktemp("cluster"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OMNI_TEST_KILL_AT", "command:append_input_audio:10")
        local = LocalCluster(tmp_path, replicas=3, serve_args=(*LOOPBACK, "--durability", "sync"))
    try:
        yield local.wait_ready()
    finally:
        local.stop()


async def _run(cluster: LocalCluster, command: list[str]) -> tuple[str, str]:
    """Runs a client to its end; checks that the replica its session opened on killed itself."""
    before = opened_so_far(cluster)
    process = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, stderr.decode()
    await wait_for(
        lambda: any(not cluster.alive(route) for route in before), 30, "the owner to kill itself"
    )
    return stdout.decode(), stderr.decode()


async def test_the_node_client_commits_a_whole_turn_across_a_kill(
    cluster: LocalCluster, stream_wav: Path, tmp_path: Path
) -> None:
    tone(tmp_path / "in.wav")
    stdout, stderr = await _run(
        cluster,
        [
            *("node", str(stream_wav), "--target", cluster.target),
            *("--wav", str(tmp_path / "in.wav"), "--out", str(tmp_path / "reply.wav")),
            *("--timeout", "60"),
        ],
    )
    summary = json.loads(stderr.splitlines()[-1])
    events = [json.loads(line) for line in stdout.splitlines()]
    assert summary["answered"] and summary["reconnects"] >= 1
    assert [e["type"] for e in events].count("input_committed") == 1
    assert SAID in stdout, [e for e in events if e["type"] == "response_done"]
    assert_contiguous([e["seq"] for e in events if e["seq"]])


async def test_the_go_client_commits_a_whole_turn_across_a_kill(
    cluster: LocalCluster, go_build: GoBuild, tmp_path: Path
) -> None:
    tone(tmp_path / "in.wav")
    stdout, stderr = await _run(
        cluster,
        [
            *(str(go_build.binary), "--target", cluster.target),
            *("--wav", str(tmp_path / "in.wav"), "--out", str(tmp_path / "reply.wav")),
            *("--realtime", "--timeout", "60s"),
        ],
    )
    events = [json_format.Parse(line, pb.ConverseResponse()) for line in stdout.splitlines()]
    assert any(e.HasField("session_resumed") for e in events), stderr
    committed = [e.input_committed for e in events if e.HasField("input_committed")]
    assert len(committed) == 1 and abs(committed[0].audio_duration_ms - SECONDS * 1000) <= 2
    (done,) = [e.response_done.response for e in events if e.HasField("response_done")]
    said = " ".join(p.transcript or p.text for item in done.output for p in item.content)
    assert SAID in said, said
    assert_contiguous([e.seq for e in events if e.seq])
