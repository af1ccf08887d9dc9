"""The Go client (clients/go, Debian's grpc-go) and the Node client (clients/node,
@grpc/grpc-js) against the real server, cut on purpose, through one driver
(tests/clients/driver.py).

Each client runs as a subprocess: it says a WAV file through a ChaosProxy to a real server with
the loopback engine, prints every event as a line and saves the reply. Every scenario runs
against both: one run is cut twice (during the audio upload, then during the reply), one is
not, one is cut on a server with a routing key, and one goes straight to a TLS server with its
certificate as the only root. The verdict comes from the server, not from the client
(:func:`~tests.clients.driver.assert_server_agrees`). Then what is one client's own: the Go
client's refusal with a wrong key, the Node client under random cuts, and each one's own
checks (gofmt, go vet and go test; node --test).
"""

from __future__ import annotations

import asyncio
import math
import subprocess
from pathlib import Path

import pytest

from tests.client.proxy import ChaosProxy
from tests.clients.conftest import Served
from tests.clients.driver import (
    CHUNK_BYTES,
    Client,
    GoBuild,
    GoClient,
    NodeClient,
    assert_server_agrees,
    gliding_tone,
)
from tests.clients.server_truth import ServerTruth
from tests.serving import eventually, self_signed_certificate, serving, settings

UPLOAD_CUT_BYTES = 12 * CHUNK_BYTES  # client-to-server bytes: about a third into the upload
REPLY_CUT_BYTES = 40_000  # server-to-client bytes after the first cut: inside the reply
RANDOM_CUT_MEAN_BYTES = 8_000
CLIENTS = Path(__file__).parents[2] / "clients"

# A cold build compiles grpc-go from source, which takes a while on two busy cores.
pytestmark = pytest.mark.timeout(300)


async def test_uncut_run_matches_the_server(client: Client, served: Served, tmp_path: Path) -> None:
    truth, running, proxy = served
    sent = gliding_tone(tmp_path / "in.wav", 1.0)
    process = await client.start(proxy.target, tmp_path / "in.wav", tmp_path / "reply.wav")
    run = await client.finish(process, tmp_path / "reply.wav")
    session_id = assert_server_agrees(client, truth, run, sent)
    assert proxy.stats.cuts == 0
    assert truth.resumes[session_id] == 0 and run.reconnects == 0
    assert [e.kind for e in run.events if not e.seq] == ["session_created"]
    assert len(running.registry) == 0  # closed, and let go


async def test_cuts_during_upload_and_reply_lose_and_double_nothing(
    client: Client, served: Served, tmp_path: Path
) -> None:
    truth, running, proxy = served
    sent = gliding_tone(tmp_path / "in.wav", 2.0)
    proxy.cut_after_bytes(UPLOAD_CUT_BYTES, direction="up")
    process = await client.start(proxy.target, tmp_path / "in.wav", tmp_path / "reply.wav")
    await eventually(lambda: proxy.stats.cuts >= 1, timeout_s=20)
    proxy.cut_after_bytes(REPLY_CUT_BYTES, direction="down")
    run = await client.finish(process, tmp_path / "reply.wav")
    session_id = assert_server_agrees(client, truth, run, sent)
    assert proxy.stats.cuts >= 2, "the reply was never cut"
    # The first cut fell inside the upload (audio still to send), the second inside the reply:
    # some of its audio came before the last resume, and its end after.
    upload_cut_at = truth.input_at_resume[session_id][0]  # commands in when the first resume came
    assert upload_cut_at < math.ceil(len(sent) / CHUNK_BYTES)
    last_resume = max(i for i, e in enumerate(run.events) if e.kind == "session_resumed")
    before, after = run.events[:last_resume], run.events[last_resume:]
    assert "output_audio_delta" in run.kinds(before)
    assert "response_done" in run.kinds(after)
    done_seq = next(e.seq for e in run.events if e.kind == "response_done")
    assert max(e.seq for e in before if e.seq) < done_seq
    # Each cut was followed by a resume the server granted, and the client saw each one.
    resumed = [e for e in run.events if e.kind == "session_resumed"]
    assert truth.resumes[session_id] == len(resumed) == run.reconnects >= 2
    # The upload cut fell inside a chunk's message, so that chunk had to be sent again (and,
    # above, still reached the engine exactly once).
    assert run.resent >= 1
    assert len(running.registry) == 0


async def test_a_resume_sends_the_route_back(
    client: Client, truth: ServerTruth, tmp_path: Path
) -> None:
    """A server started with a routing key (``--route``): the client keeps the key that
    session_created names, and every resume after a cut presents it (``x-omni-route``), so a
    proxy in front of several replicas would take it to this one."""
    sent = gliding_tone(tmp_path / "in.wav", 1.0)
    async with (
        serving(settings(api_keys=(client.api_key,), route="r7")) as running,
        ChaosProxy("127.0.0.1", running.grpc_port, seed=client.seeds["route"]) as proxy,
    ):
        proxy.cut_after_bytes(REPLY_CUT_BYTES // 2, direction="down")
        process = await client.start(
            proxy.target, tmp_path / "in.wav", tmp_path / "reply.wav", *client.route_flags
        )
        run = await client.finish(process, tmp_path / "reply.wav")
    session_id = assert_server_agrees(client, truth, run, sent)
    assert truth.resumes[session_id] == run.reconnects >= 1
    assert run.route == "r7"
    # The open went anywhere; every later call went to r7.
    assert (
        truth.call_routes[0] == "" and truth.call_routes[1:] == ["r7"] * truth.resumes[session_id]
    )


async def test_tls_with_the_servers_certificate_as_the_root(
    client: Client, truth: ServerTruth, tmp_path: Path
) -> None:
    cert, key = self_signed_certificate(tmp_path)
    tls = settings(api_keys=(client.api_key,), tls_cert_file=str(cert), tls_key_file=str(key))
    sent = gliding_tone(tmp_path / "in.wav", 0.5)
    async with serving(tls) as running:
        process = await client.start(
            running.target,
            tmp_path / "in.wav",
            tmp_path / "reply.wav",
            *(client.root_flag, str(cert)),
        )
        run = await client.finish(process, tmp_path / "reply.wav")
    assert_server_agrees(client, truth, run, sent)


@pytest.mark.parametrize("client", ["go"], indirect=True)
async def test_a_wrong_key_fails_with_the_servers_reason(
    client: Client, served: Served, tmp_path: Path
) -> None:
    truth, _, proxy = served
    gliding_tone(tmp_path / "in.wav", 0.2)
    process = await asyncio.create_subprocess_exec(
        *client.command(),
        *("--target", proxy.target, "--api-key", "not-the-key", "--wav", str(tmp_path / "in.wav")),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 1
    assert "code = Unauthenticated" in stderr.decode() and stdout == b""
    assert truth.opened == []


@pytest.mark.parametrize("client", ["node"], indirect=True)
async def test_random_cuts_anywhere_lose_and_double_nothing(
    client: Client, served: Served, tmp_path: Path
) -> None:
    truth, running, proxy = served
    sent = gliding_tone(tmp_path / "in.wav", 2.0)
    # Cuts after random byte counts: mid-message, mid-resume (the second budget is 93 bytes),
    # anywhere but the open. The proxy's seed makes the first budget 26874 bytes, well past it:
    # an open cut after the server created the session cannot be told from one that never
    # arrived, so the client's retry would leave a second session behind (as in the chaos test).
    proxy.cut_randomly(mean_bytes=RANDOM_CUT_MEAN_BYTES)
    process = await client.start(proxy.target, tmp_path / "in.wav", tmp_path / "reply.wav")
    run = await client.finish(process, tmp_path / "reply.wav")
    proxy.cut_randomly(None)
    assert_server_agrees(client, truth, run, sent)
    assert proxy.stats.cuts >= 5, proxy.stats  # about 10 on this seed
    assert len(running.registry) == 0


def _checked(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_clients_own_checks_pass(client: Client) -> None:
    """Go: gofmt-clean, go vet and go test. Node: its own tests (node:test), bookkeeping and
    WAV reading and writing, some run and none failed."""
    if isinstance(client, GoClient):
        build: GoBuild = client.build
        unformatted = _checked(["gofmt", "-l", str(CLIENTS / "go")], CLIENTS)
        assert unformatted == "", f"gofmt would change: {unformatted}"
        for command in (["go", "vet", "./..."], ["go", "test", "./..."]):
            _checked(command, build.package_dir, build.env)
    else:
        assert isinstance(client, NodeClient)
        out = _checked(["node", "--test", "test/"], CLIENTS / "node")
        assert "# fail 0" in out and "# pass 0" not in out
