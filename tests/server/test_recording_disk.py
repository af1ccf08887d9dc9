"""A disk that fills during recordings: ``omni-grpc serve --record all`` in a child process
whose files may not grow past 256 KiB (``RLIMIT_FSIZE``, the file-size limit a quota or a
small disk puts on a writer). Every session goes on unharmed; each recording that hit the
limit says where it stopped, and reads whole up to there."""

from __future__ import annotations

import asyncio
import json
import os
import resource
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from omni_grpc.client import DuplexClient
from omni_grpc.client.recordings import load, read_lines
from omni_grpc.wire import pb
from tests.client.conftest import CONFIG, OPTIONS, collect_until, tone

LIMIT_BYTES = 256 * 1024
SESSIONS = 3
TURNS = 4  # each answer is 2 s of 24 kHz pcm16 on the wire: the wire log outgrows the limit


def _small_files() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT_BYTES, LIMIT_BYTES))


@asynccontextmanager
async def serve(record_dir: Path) -> AsyncIterator[str]:
    command = [sys.executable, "-m", "omni_cli", "serve", "--engine", "loopback"]
    command += ["--engine-option", "pace=fast", "--grpc-port", "0", "--http-port", "0"]
    command += ["--record", "all", "--record-dir", str(record_dir), "--shutdown-grace-s", "0.5"]
    server = await asyncio.create_subprocess_exec(
        *command,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        preexec_fn=_small_files,  # the limit only, before exec
        env={**os.environ, "OMNI_GRPC_LOG_LEVEL": "warning"},
    )
    try:
        assert server.stdout is not None
        banner = (await asyncio.wait_for(server.stdout.readline(), 60)).decode()
        assert "serving gRPC on" in banner, banner
        yield banner.split("serving gRPC on ", 1)[1].split(",")[0].strip()
    finally:
        server.send_signal(signal.SIGTERM)
        _, errors = await asyncio.wait_for(server.communicate(), 30)
    assert server.returncode == 0, errors
    assert b"recording stopped (disk_full" in errors, errors


async def one_session(target: str) -> tuple[str, list[pb.ConverseResponse]]:
    client = await DuplexClient.connect(target, config=CONFIG, options=OPTIONS)
    received: list[pb.ConverseResponse] = []
    for _ in range(TURNS):
        for _ in range(20):
            await client.append_audio(tone(100))
        await client.commit(create_response=True)
        await collect_until(client, "response_done", into=received)
    await client.close()
    return client.session_id, received


def recording_of(folder: Path) -> tuple[dict[str, Any], list[int], Any]:
    recorded = load(folder)  # its lines made from its wire log, as far as it was written
    [part] = json.loads((folder / "manifest.json").read_bytes())["parts"]
    lines = read_lines(folder / "events.jsonl")
    assert (folder / "events.jsonl").read_bytes().endswith(b"\n")  # no torn last line
    return part, [line["seq"] for line in lines if line["type"] == "event"], recorded.end()


@pytest.mark.subprocess  # a child omni-grpc serve under a file-size limit
async def test_a_full_disk_stops_recordings_and_never_a_session(tmp_path: Path) -> None:
    async with serve(tmp_path) as target:
        results = await asyncio.gather(*(one_session(target) for _ in range(SESSIONS)))
    for session_id, received in results:
        # The session: every answer, every event once, closed as asked.
        kinds = [event.WhichOneof("event") for event in received]
        assert kinds.count("response_done") == TURNS and "error" not in kinds
        numbered = [event.seq for event in received if event.seq]
        assert numbered == list(range(1, len(numbered) + 1))
        # Its recording: stopped by the full disk, saying after which event, whole up to it.
        part, seqs, end = recording_of(tmp_path / session_id)
        assert part["ended"] == "stopped" and part["stopped"]["reason"] == "disk_full", part
        assert seqs == list(range(1, len(seqs) + 1))
        assert part["stopped"]["last_seq"] == (seqs[-1] if seqs else 0)
        assert end == {"reason": "disk_full", "last_seq": part["stopped"]["last_seq"]}
        wire = tmp_path / session_id / "wire.bin"
        assert wire.stat().st_size <= LIMIT_BYTES
