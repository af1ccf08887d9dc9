"""Tenants that cannot starve each other through the bridge: the attacks of issue 26 on it.

One key (``A``) does what the probe did; the other key (``B``) must still be served. The memory
flood runs ``omni-grpc serve`` as a child process, so that its peak memory is its own
(``VmHWM``), as the probe measured it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from tests.bridge.testkit import running_bridge, service_settings
from tests.serving import serving

ROOT = Path(__file__).parents[2]

A, B = "key-a", "key-b"
SECRETS = "/v1/realtime/client_secrets"


async def test_one_key_minting_cannot_stop_another_key_minting() -> None:
    async with (
        serving(service_settings(api_keys=(A, B))) as service,
        running_bridge(service.target, api_keys=(A, B)) as port,
        aiohttp.ClientSession(f"http://127.0.0.1:{port}") as http,
    ):
        refused = None
        for _ in range(10_001):  # the probe minted 10,000 two-hour secrets
            body = {"expires_after": {"seconds": 7200}}
            headers = {"Authorization": f"Bearer {A}"}
            async with http.post(SECRETS, headers=headers, json=body) as response:
                if response.status == 429:
                    refused = response
                    error = (await response.json())["error"]
                    break
                assert response.status == 200
        assert refused is not None, "key A minted without a bound"
        async with http.post(SECRETS, headers={"Authorization": f"Bearer {B}"}) as response:
            assert response.status == 200, await response.text()
        assert error["type"] == "rate_limit_exceeded"
        assert error["code"] in ("rate_limit_exceeded", "client_secrets_outstanding")
        assert int(refused.headers["Retry-After"]) >= 1


async def test_the_bridge_port_shows_its_metrics_only_to_a_key() -> None:
    async with (
        serving(service_settings(api_keys=(A, B))) as service,
        running_bridge(service, api_keys=(A, B)) as port,
        aiohttp.ClientSession(f"http://127.0.0.1:{port}") as http,
    ):
        async with http.get("/metrics") as response:
            assert response.status == 401
        async with http.get("/metrics", headers={"Authorization": "Bearer wrong"}) as response:
            assert response.status == 401
        async with http.get("/metrics", headers={"Authorization": f"Bearer {A}"}) as response:
            assert response.status == 200
            assert "omni_grpc_sessions_opened" in await response.text()


# -- the frame flood ------------------------------------------------------------------------

BUDGET_MIB = 64
MAX_SESSIONS = 16  # 4 MiB of input each; key A's share is 12 of them
NO_TURN_DETECTION = {
    "type": "session.update",
    "session": {"type": "realtime", "audio": {"input": {"turn_detection": None}}},
}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def reset_peak(pid: int) -> None:
    """Starts the process's peak memory (``VmHWM``) again from its resident memory now."""
    with open(f"/proc/{pid}/clear_refs", "w") as clear:
        clear.write("5")


def memory_kib(pid: int, field: str) -> int:
    """A ``VmRSS``/``VmHWM`` line of the process's status, in KiB."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


@contextlib.asynccontextmanager
async def served(*flags: str) -> AsyncIterator[tuple[int, int, int]]:
    """``omni-grpc serve --engine loopback`` with its bridge and a metrics port, as a child;
    yields its pid, its bridge's port and its metrics port."""
    grpc_port, http_port, metrics_port = free_port(), free_port(), free_port()
    command = [sys.executable, "-m", "omni_cli", "serve", "--engine", "loopback"]
    command += ["--grpc-port", str(grpc_port), "--http-port", str(http_port)]
    command += ["--metrics-port", str(metrics_port), *flags]
    child = await asyncio.create_subprocess_exec(*command, "--log-level", "warning", cwd=ROOT)
    try:
        async with aiohttp.ClientSession() as http:
            for _ in range(600):  # imports on a busy machine take a while
                with contextlib.suppress(aiohttp.ClientError):
                    async with http.get(f"http://127.0.0.1:{http_port}/health") as response:
                        if response.status == 200:
                            break
                assert child.returncode is None, "the server ended while starting"
                await asyncio.sleep(0.1)
        yield child.pid, http_port, metrics_port
    finally:
        child.terminate()
        await asyncio.wait_for(child.wait(), 30)


async def realtime(http: aiohttp.ClientSession, port: int, key: str) -> Any:
    return await http.ws_connect(
        f"http://127.0.0.1:{port}/v1/realtime?model=loopback-test&extensions=1",
        headers={"Authorization": f"Bearer {key}"},
        max_msg_size=0,
    )


async def flood(http: aiohttp.ClientSession, port: int, frame: str, frames: int) -> Any:
    """One of key A's sockets: input held (no turn detection), then ``frames`` big appends."""
    ws = await realtime(http, port, A)
    await ws.receive()  # session.created
    await ws.send_str(orjson.dumps(NO_TURN_DETECTION).decode())

    async def drain() -> None:  # read everything, so that nothing is cut for not reading
        async for _ in ws:
            pass

    reader = asyncio.create_task(drain())
    for _ in range(frames):
        await ws.send_str(frame)
    return ws, reader


async def heartbeats(http: aiohttp.ClientSession, port: int, count: int) -> None:
    """Key B opens a session and has ``count`` heartbeats answered."""
    ws = await realtime(http, port, B)
    try:
        assert orjson.loads((await ws.receive()).data)["type"] == "session.created"
        for _ in range(count):
            await ws.send_str('{"type":"session.heartbeat"}')
            while orjson.loads((await ws.receive()).data)["type"] != "session.heartbeat_ack":
                pass
    finally:
        await ws.close()


async def sessions_on(http: aiohttp.ClientSession, metrics_port: int) -> int:
    async with http.get(f"http://127.0.0.1:{metrics_port}/health") as response:
        return int((await response.json())["sessions"])


@pytest.mark.subprocess  # a child omni-grpc serve whose memory is measured
async def test_a_frame_flood_of_one_key_stays_within_the_budget_and_the_other_key_is_served(
    tmp_path: Path,
) -> None:
    config = tmp_path / "serve.toml"
    config.write_text("[limits]\ndisconnect_grace_s = 1.0\n")  # the flood's sessions end soon
    flags = ["--api-key", A, "--api-key", B, "--engine-option", "pace=fast"]
    flags += ["--memory-budget-mib", str(BUDGET_MIB), "--max-sessions", str(MAX_SESSIONS)]
    flags += ["--config", str(config)]
    audio = base64.b64encode(b"\x00\x08" * (3 * 1024 * 1024 // 2)).decode()
    frame = orjson.dumps({"type": "input_audio_buffer.append", "audio": audio}).decode()
    async with served(*flags) as (pid, port, metrics), aiohttp.ClientSession() as http:
        await heartbeats(http, port, 1)  # everything the victim needs is loaded
        reset_peak(pid)
        baseline_kib = memory_kib(pid, "VmRSS")
        sockets = await asyncio.gather(*(flood(http, port, frame, 3) for _ in range(12)))
        # The victim: a session and 20 heartbeats within 20 s, as the probe asked of it.
        await asyncio.wait_for(heartbeats(http, port, 20), 20)
        peak_kib = memory_kib(pid, "VmHWM")
        for ws, reader in sockets:
            assert not ws.closed  # held back, never cut
            await ws.close()
            reader.cancel()
        grown_mib = (peak_kib - baseline_kib) / 1024
        assert grown_mib <= 1.25 * BUDGET_MIB, f"the server grew {grown_mib:.0f} MiB"
        # Once the flood's sessions have ended, what they held goes back to the system.
        async with asyncio.timeout(60):
            while True:  # polled: sessions end inside the server, with nothing to await
                if not await sessions_on(http, metrics):
                    break
                await asyncio.sleep(0.2)
        kept_mib = (memory_kib(pid, "VmRSS") - baseline_kib) / 1024
        assert kept_mib <= BUDGET_MIB / 2, f"the server kept {kept_mib:.0f} MiB"
