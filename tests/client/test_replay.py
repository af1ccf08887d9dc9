"""Replay: a session recorded on one loopback server, driven again against another, gives the
same events (ids and times aside, audio byte for byte) and the same turns; and the
``replay`` and ``recordings`` commands around it."""

from __future__ import annotations

import asyncio
import json
import sys
import tarfile
from pathlib import Path

import pytest

from omni_cli import main
from omni_grpc.client import DuplexClient
from omni_grpc.client.channel import ChannelSettings
from omni_grpc.client.recordings import load
from omni_grpc.client.replay import replay_recording
from omni_grpc.server.recording import RecordSettings
from omni_grpc.wire import pb
from tests.client.conftest import OPTIONS, collect_until, tone
from tests.serving import serving, settings

# 24 kHz input: the server resamples it for the engine, so the replay must send what the
# engine heard (16 kHz, split as the client split its chunks) to get the same answers.
CONFIG = pb.SessionConfig(
    input_audio_format=pb.AudioFormat(encoding=pb.AUDIO_ENCODING_PCM16, sample_rate_hz=24000)
)
GAP_S = 0.5  # between turns: each answer is over well before the next command, even loaded


async def a_conversation(target: str) -> str:
    """A spoken turn, a typed one, a truncate, new instructions, a turn of text; closed."""
    client = await DuplexClient.connect(target, config=CONFIG, options=OPTIONS)
    events: list[pb.ConverseResponse] = []
    for _ in range(15):
        await client.append_audio(tone(60, rate_hz=24000))
        await asyncio.sleep(0.02)
    await client.commit(create_response=True)
    await collect_until(client, "response_done", into=events)
    await asyncio.sleep(GAP_S)
    answer = next(e for e in events if e.WhichOneof("event") == "response_created")
    await client.truncate_item(answer.response_created.item_id, audio_end_ms=300)
    await collect_until(client, "item_truncated", into=events)
    await asyncio.sleep(GAP_S)
    item = pb.ConversationItem(
        role=pb.ITEM_ROLE_USER,
        content=[pb.ContentPart(type=pb.CONTENT_TYPE_INPUT_TEXT, text="what is the time")],
    )
    await client.create_item(item)
    await client.create_response()
    await collect_until(client, "response_done", into=events)
    await asyncio.sleep(GAP_S)
    await client.update_session(pb.SessionConfig(instructions="be brief"))
    await collect_until(client, "session_updated", into=events)
    await client.append_text("and again")
    await client.create_response()
    await collect_until(client, "response_done", into=events)
    await asyncio.sleep(GAP_S)
    await client.close()
    return client.session_id


@pytest.fixture
async def recorded(tmp_path: Path) -> Path:
    record = RecordSettings(policy="all", folder=tmp_path / "recordings")
    async with serving(settings(recording=record)) as running:
        session_id = await a_conversation(running.target)
    return tmp_path / "recordings" / session_id


async def test_a_replay_against_loopback_reproduces_the_recorded_events(recorded: Path) -> None:
    async with serving() as running:
        document = await replay_recording(recorded, ChannelSettings(target=running.target))
    pacing, events = document["pacing"], document["events"]
    assert pacing["in_order"] and pacing["commands"] == pacing["planned"]
    assert events["identical"], events.get("first_difference")
    assert events["by_kind"]["output_audio_delta"][0] > 0
    assert document["turns_match"] and document["turns_identical"], document["turns"]
    said = [pair["recorded"]["said"] for pair in document["turns"]]
    assert said == ["", "what is the time", "and again"]
    assert document["replay_ended"] == "session_closed"


@pytest.mark.subprocess  # the omni-grpc replay and recordings commands, run as a user runs them
async def test_the_replay_and_recordings_commands(recorded: Path, tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    async with serving() as running:
        replay = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "omni_cli", "replay", str(recorded),
            "--target", running.target, "--report", str(report),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(replay.communicate(), 120)
    assert replay.returncode == 0, err
    assert b"the same (ids and times aside, audio byte for byte)" in out, out
    document = json.loads(report.read_bytes())
    assert document["events"]["identical"] and document["turns_match"]
    assert b"<svg" in report.with_suffix(".html").read_bytes()


def test_recordings_list_show_and_export(
    recorded: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = recorded.parent
    assert main(["recordings", "list", "--record-dir", str(root), "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert row["session_id"] == recorded.name and row["end"]["reason"] == "ended"
    assert main(["recordings", "show", recorded.name, "--record-dir", str(root)]) == 0
    shown = capsys.readouterr().out
    assert "turn 3: text 'and again'" in shown, shown
    archive = tmp_path / "bug.tar.gz"
    assert main(["recordings", "export", str(recorded), "--out", str(archive)]) == 0
    with tarfile.open(archive) as tar:
        names = sorted(tar.getnames())
    assert names == [
        f"{recorded.name}/{name}"
        for name in ("audio.wav", "events.jsonl", "manifest.json", "wire.bin")
    ]
    assert main(["recordings", "show", str(tmp_path / "nothing-here")]) == 2
    capsys.readouterr()
    again = tmp_path / "again.tar.gz"
    assert main(["recordings", "export", str(recorded), "--out", str(again), "--json"]) == 0
    written = json.loads(capsys.readouterr().out)  # a document, not a bare path
    assert written == {
        "session_id": recorded.name,
        "archive": str(again.resolve()),
        "bytes": again.stat().st_size,
    }


def test_listing_a_missing_or_empty_record_dir_says_where_it_looked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OMNI_GRPC_RECORD_DIR", raising=False)
    monkeypatch.chdir(tmp_path)  # the default folder, ./recordings, is not there
    assert main(["recordings", "list"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and f"{tmp_path / 'recordings'} is not a folder" in err, err
    (tmp_path / "recordings").mkdir()
    assert main(["recordings", "list"]) == 0
    assert capsys.readouterr().out == f"no recordings in {tmp_path / 'recordings'}\n"
    assert main(["recordings", "list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_the_recording_reads_as_the_session_went(recorded: Path) -> None:
    session = load(recorded)
    kinds = [line["kind"] for _, line in session.lines if line["type"] == "command"]
    assert kinds.count("append_input_audio") == 15 and kinds[-1] == "close_session"
    assert session.end()["reason"] == "ended"
