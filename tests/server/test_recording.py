"""Recorded sessions on a real server and a real port: what a recording holds across a resume
and a takeover, what the policies record, and that a slow disk stops a recording, never its
session."""

from __future__ import annotations

import dataclasses
import json
import threading
import wave
from pathlib import Path

import pytest

from omni_grpc.client import DuplexClient
from omni_grpc.client.recordings import load, read_lines
from omni_grpc.server.recording import RecordSettings
from omni_grpc.server.recording import part as part_module
from omni_grpc.server.recording import recorder as recorder_module
from omni_grpc.server.recording.counters import STOPPED
from omni_grpc.server.recording.part import WirePart
from omni_grpc.wire import pb
from tests.client.conftest import CONFIG, OPTIONS, collect_until, tone
from tests.client.proxy import ChaosProxy
from tests.serving import eventually, serving, settings

KEY = "test-key-that-must-not-be-recorded"


def recording(folder: Path, policy: str = "all", **fields: object) -> RecordSettings:
    return RecordSettings(policy=policy, folder=folder, **fields)  # type: ignore[arg-type]


def recorded_ids(folder: Path) -> set[str]:
    return {path.name for path in folder.iterdir()}


async def talk(client: DuplexClient, into: list[pb.ConverseResponse]) -> None:
    """One spoken turn and one typed turn, each answered."""
    for _ in range(5):
        await client.append_audio(tone(100))
    await client.commit(create_response=True)
    await collect_until(client, "response_done", into=into)
    item = pb.ConversationItem(
        role=pb.ITEM_ROLE_USER,
        content=[pb.ContentPart(type=pb.CONTENT_TYPE_INPUT_TEXT, text="the typed turn")],
    )
    await client.create_item(item)
    await client.create_response()
    await collect_until(client, "response_done", into=into)


async def test_a_recording_holds_each_event_once_in_order_across_a_resume_and_a_takeover(
    tmp_path: Path,
) -> None:
    server_settings = settings(recording=recording(tmp_path), api_keys=(KEY,))
    async with (
        serving(server_settings) as running,
        ChaosProxy("127.0.0.1", running.grpc_port) as proxy,
    ):
        client = await DuplexClient.connect(
            proxy.target, api_key=KEY, config=CONFIG, options=OPTIONS
        )
        received: list[pb.ConverseResponse] = []
        await talk(client, received)
        # A cut in the middle of an answer: the client resumes on its own.
        proxy.cut_after_bytes(20_000, direction="down")
        await client.append_audio(tone(1000))
        await client.commit(create_response=True)
        await collect_until(client, "response_done", into=received)
        assert client.stats.reconnects == 1
        tokens = [client.resume_handle().resume_token]
        # Another client takes the session over, speaks, and closes it.
        handle = await client.detach()
        other = await DuplexClient.resume(
            running.target, handle.session_id, handle.resume_token, handle.last_seq,
            api_key=KEY, options=OPTIONS,
        )  # fmt: skip
        await other.append_text("after the takeover")
        await other.create_response()
        await collect_until(other, "response_done", into=received)
        tokens.append(other.resume_handle().resume_token)
        await other.close()
        session_id = handle.session_id
    # The server's stop wrote what was left.
    recorded = load(tmp_path / session_id)
    lines = [line for _, line in recorded.lines]
    events = [line for line in lines if line["type"] == "event"]
    seqs = [line["seq"] for line in events]
    assert seqs == list(range(1, len(seqs) + 1))
    assert events[-1]["kind"] == "session_closed"
    # Exactly what the clients were given, in the same order (the replays were not recorded twice).
    assert [e.seq for e in received if e.seq] == seqs[: len([e for e in received if e.seq])]
    streams = [line["kind"] for line in lines if line["type"] == "stream"]
    assert streams[0] == "session_created" and streams.count("session_resumed") == 2
    assert "session_replaced" not in streams  # the first client had let go
    notes = [line["kind"] for line in lines if line["type"] == "note"]
    assert "detached" in notes and notes.count("assistant_audio") == 4
    commands = [line for line in lines if line["type"] == "command" and not line.get("skipped")]
    numbered = [line["client_seq"] for line in commands if line["client_seq"]]
    assert numbered == list(range(1, len(numbered) + 1))  # each applied command once
    assert recorded.end() == {"reason": "ended", "last_seq": seqs[-1]}
    everything = b"".join(path.read_bytes() for path in (tmp_path / session_id).iterdir())
    for secret in (KEY, *tokens):
        assert secret.encode() not in everything


async def test_on_request_records_only_the_sessions_that_ask(tmp_path: Path) -> None:
    async with serving(settings(recording=recording(tmp_path, "on-request"))) as running:
        asked = pb.SessionConfig(recording=pb.SessionRecording(enabled=True, omit_text=True))
        plain = await DuplexClient.connect(running.target, options=OPTIONS)
        wanted = await DuplexClient.connect(running.target, config=asked, options=OPTIONS)
        later = await DuplexClient.connect(running.target, options=OPTIONS)
        assert not plain.session.config.recording.enabled
        assert wanted.session.config.recording.enabled
        await later.update_session(pb.SessionConfig(recording=pb.SessionRecording(enabled=True)))
        updated = await collect_until(later, "session_updated")
        assert updated[-1].session_updated.session.config.recording.enabled
        await later.append_text("recorded from here on")
        await later.update_session(pb.SessionConfig(recording=pb.SessionRecording(enabled=False)))
        await collect_until(later, "session_updated")
        await later.append_text("not recorded")
        await later.close()
        await wanted.append_text("a secret")
        await wanted.close()
        await plain.close()
    assert recorded_ids(tmp_path) == {wanted.session_id, later.session_id}
    later_recording = load(tmp_path / later.session_id)
    later_part = later_recording.parts[0].entry
    assert (later_part["started_by"], later_part["ended"]) == ("asked", "not_asked")
    kinds = [line.get("kind", line["type"]) for _, line in later_recording.lines]
    # From the update that asked to the one that stopped it (and what it made), then the end.
    assert kinds[1] == "append_input_text" and kinds[-1] == "end", kinds
    assert kinds.index("update_session") < kinds.index("session_updated") == len(kinds) - 2
    assert kinds.count("append_input_text") == 1  # the text after the stop is not recorded
    load(tmp_path / wanted.session_id)  # its lines made from its wire log
    everything = b"".join(path.read_bytes() for path in (tmp_path / wanted.session_id).iterdir())
    assert b"a secret" not in everything


async def test_a_disk_that_falls_behind_stops_the_recording_and_never_the_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(recorder_module, "RECORDING_BUFFER_BYTES", 128 * 1024)
    slow_event, disk = WirePart.event, threading.Event()

    def hanging(self: WirePart, *args: object) -> None:
        disk.wait(30)  # the writer thread's disk hangs until the session is over
        slow_event(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(WirePart, "event", hanging)
    before = STOPPED.labels("too_slow")._value.get()
    async with serving(settings(recording=recording(tmp_path))) as running:
        client = await DuplexClient.connect(running.target, config=CONFIG, options=OPTIONS)
        received: list[pb.ConverseResponse] = []
        for _ in range(3):  # three answers of a second each: far more than the buffer
            for _ in range(10):
                await client.append_audio(tone(100))
            await client.commit(create_response=True)
            await collect_until(client, "response_done", into=received)
        await client.close()
        folder = tmp_path / client.session_id
        disk.set()
    # (the server's stop waits for the writer to finish what it was handed)
    # The session was whole: three answers, every event once.
    assert [e.WhichOneof("event") for e in received].count("response_done") == 3
    assert [e.seq for e in received if e.seq] == list(
        range(1, len([e for e in received if e.seq]) + 1)
    )
    assert STOPPED.labels("too_slow")._value.get() == before + 1
    [part] = json.loads((folder / "manifest.json").read_bytes())["parts"]
    assert part["stopped"]["reason"] == "too_slow" and part["ended"] == "stopped"
    load(folder)  # its lines made from its wire log
    lines = read_lines(folder / "events.jsonl")
    seqs = [line["seq"] for line in lines if line["type"] == "event"]
    assert seqs == list(range(1, len(seqs) + 1))
    assert part["stopped"]["last_seq"] == (seqs[-1] if seqs else 0)
    assert len(seqs) < len([e for e in received if e.seq])


async def test_audio_sent_far_faster_than_real_time_stops_the_recording_not_the_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(part_module, "MAX_AHEAD_S", 2.0)
    before = STOPPED.labels("ahead_of_clock")._value.get()
    async with serving(settings(recording=recording(tmp_path))) as running:
        client = await DuplexClient.connect(running.target, config=CONFIG, options=OPTIONS)
        received: list[pb.ConverseResponse] = []
        for _ in range(40):  # 4 s of audio at once, then cleared: the flood of the probe
            await client.append_audio(tone(100))
        await client.clear_input()
        for _ in range(5):  # the session goes on
            await client.append_audio(tone(100))
        await client.commit(create_response=True)
        await collect_until(client, "response_done", into=received)
        await client.close()
        folder = tmp_path / client.session_id
    assert STOPPED.labels("ahead_of_clock")._value.get() == before + 1
    [part] = json.loads((folder / "manifest.json").read_bytes())["parts"]
    assert (part["ended"], part["stopped"]["reason"]) == ("stopped", "ahead_of_clock")
    load(folder)  # its WAV made from its wire log
    with wave.open(str(folder / "audio.wav")) as wav:  # what it held up to its stop, no more
        assert wav.getnframes() / wav.getframerate() < 3.0


async def test_a_live_recording_past_the_cap_is_stopped_and_its_session_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The recording being written is stopped once all recordings pass the cap; its session is
    served on; and, stopped, it is a recording like any other that the next sweeps delete while
    the cap is passed (so its files are not read here: the sweep may take them at any time)."""
    monkeypatch.setattr(recorder_module, "RETENTION_EVERY_S", 0.1)
    before = STOPPED.labels("max_total_bytes")._value.get()
    chosen = settings(recording=recording(tmp_path, max_total_bytes=16 * 1024))
    async with serving(chosen) as running:
        client = await DuplexClient.connect(running.target, config=CONFIG, options=OPTIONS)
        received: list[pb.ConverseResponse] = []
        for _ in range(4):  # answers of a second each: far past 16 KiB of files in all
            for _ in range(10):
                await client.append_audio(tone(100))
            await client.commit(create_response=True)
            await collect_until(client, "response_done", into=received)
        await eventually(lambda: STOPPED.labels("max_total_bytes")._value.get() > before)
        await client.append_text("still served")
        await client.create_response()
        await collect_until(client, "response_done", into=received)
        folder = tmp_path / client.session_id
        await eventually(lambda: not folder.exists())  # the cap holds: the sweep took it
        await client.close()
    assert [e.WhichOneof("event") for e in received].count("response_done") == 5
    stopped = [r.getMessage() for r in caplog.records if "recording stopped" in r.getMessage()]
    assert stopped == [f"session {client.session_id}: recording stopped (max_total_bytes: "
                       "the recordings passed their cap); the session goes on"]  # fmt: skip


async def test_a_recording_server_says_so_when_it_starts(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="omni_grpc.server.app")
    chosen = recording(tmp_path, omit_text=True, max_age_s=7 * 86400.0)
    async with serving(settings(recording=chosen)):
        pass
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("recording ")]
    assert said == [f"recording every session (--record all) into {tmp_path}, "
                    "without text; kept 7 days, 10240 MiB"]  # fmt: skip


def test_recording_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="record must be one of"):
        RecordSettings(policy="sometimes")
    assert dataclasses.replace(RecordSettings(), policy="all").policy == "all"


async def test_options_named_as_secrets_are_left_out_at_any_depth(tmp_path: Path) -> None:
    """Engine options a client names like secrets (``api_key``, ``apiKey``, ``token``,
    ``password``, nested too) never reach a recording; the rest of them is kept."""
    secrets = ("sk-top-level", "camel-cased", "tok-nested", "pw-in-a-list")
    async with serving(settings(recording=recording(tmp_path))) as running:
        config = pb.SessionConfig()
        config.CopyFrom(CONFIG)
        config.engine_options.update(
            {
                "api_key": secrets[0],
                "apiKey": secrets[1],
                "upstream": {"token": secrets[2], "retries": 3},
                "servers": [{"name": "a", "password": secrets[3]}],
            }
        )
        client = await DuplexClient.connect(running.target, config=config, options=OPTIONS)
        await client.update_session(config)
        await collect_until(client, "session_updated")
        await client.close()
    recorded = load(tmp_path / client.session_id)
    everything = b"".join(path.read_bytes() for path in (tmp_path / client.session_id).iterdir())
    for secret in secrets:
        assert secret.encode() not in everything, secret
    created = next(line for _, line in recorded.lines if line.get("kind") == "session_created")
    kept = created["event"]["session"]["config"]["engine_options"]
    assert kept["upstream"] == {"token": "<left out>", "retries": 3}  # the rest is kept
    assert kept["servers"] == [{"name": "a", "password": "<left out>"}]
