"""The recording format, written by a part's wire log writer without a server and read back
(its lines and WAV made from the log): lines, tracks, redaction, tokens, and a write that fails
part way (all in one process, no event loop)."""

from __future__ import annotations

import json
import os
import wave
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from google.protobuf import json_format

from omni_grpc.client.recorded.tracks import MAX_AHEAD_S, SETTLE_S, AheadOfClock, Tracks
from omni_grpc.client.recordings import load, read_lines, summary
from omni_grpc.server.recording.disk import stop_reason
from omni_grpc.server.recording.part import PartInfo, WirePart, is_delta, without_frames
from omni_grpc.server.recording.retention import over_cap, sweep
from omni_grpc.wire import pb
from omni_grpc.wire.recording import message_json, redact_text

RATE = 16000
TOKEN = "secret-resume-token-0123456789"
CONFIG = pb.SessionConfig(
    instructions="be brief",
    input_audio_format=pb.AudioFormat(encoding=pb.AUDIO_ENCODING_PCM16, sample_rate_hz=24000),
)


def info(root: Path, **overrides: Any) -> PartInfo:
    fields: dict[str, Any] = {
        "session_id": "sess_test",
        "part": 1,
        "replica": "here:1",
        "folder": root / "sess_test",
        "t0": 100.0,
        "wall": "2026-01-01T00:00:00.000+00:00",
        "rate_hz": RATE,
        "omit_audio": False,
        "omit_text": False,
        "session": {"format": 1, "engine": {"name": "test", "options": {}}},
        "started_by": "open",
        "first_seq": 1,
    }
    fields.update(overrides)
    return PartInfo(**fields)


def pcm(ms: int, value: int = 1000, rate: int = RATE) -> bytes:
    return np.full(rate * ms // 1000, value, dtype="<i2").tobytes()


def event(seq: int, **fields: Any) -> bytes:
    return pb.ConverseResponse(seq=seq, applied_client_seq=1, **fields).SerializeToString()


def created() -> bytes:
    body = pb.SessionCreated(
        session=pb.Session(id="sess_test", config=CONFIG),
        resume_token=TOKEN,
    )
    return pb.ConverseResponse(session_created=body).SerializeToString()


def delta(seq: int, start_ms: float, ms: int, response: str = "resp_1") -> bytes:
    body = pb.OutputAudioDelta(
        audio=pcm(ms, 2000, 24000),
        encoding=pb.AUDIO_ENCODING_PCM16,
        sample_rate_hz=24000,
        start_ms=start_ms,
        duration_ms=ms,
        response_id=response,
        item_id="item_a",
    )
    return event(seq, output_audio_delta=body)


def append(client_seq: int, audio: bytes, event_id: str = "", **fields: Any) -> bytes:
    body = pb.AppendInputAudio(audio=audio, **fields)
    request = pb.ConverseRequest(client_seq=client_seq, event_id=event_id, append_input_audio=body)
    return request.SerializeToString()


def a_session(writer: WirePart) -> None:
    """Open, 300 ms of speech, a commit, a 400 ms answer cut at 150 ms by a truncate."""
    writer.stream(100.0, 1, created())
    for n in range(3):  # 100 ms sent at 24 kHz each, heard at 16 kHz
        sent = append(n + 1, pcm(100, 7, 24000))
        writer.append(100.1 + n / 10, 1, "", sent, pcm(100), 1, RATE, False)
    commit = pb.ConverseRequest(client_seq=4, commit_input_audio=pb.CommitInputAudio())
    writer.command(100.4, 1, commit.SerializeToString(), "", b"")
    writer.event(1, 100.4, event(1, input_committed=pb.InputCommitted(item_id="item_u")))
    created_response = pb.ResponseCreated(response=pb.Response(id="resp_1"), item_id="item_a")
    writer.event(2, 100.5, event(2, response_created=created_response))
    for n in range(4):
        writer.event(3 + n, 100.5, delta(3 + n, n * 100.0, 100))
    done = pb.Response(id="resp_1", status=pb.RESPONSE_STATUS_COMPLETED)
    writer.event(7, 100.5, event(7, response_done=pb.ResponseDone(response=done)))
    cut = pb.TruncateConversationItem(item_id="item_a", audio_end_ms=150)
    request = pb.ConverseRequest(client_seq=5, truncate_conversation_item=cut)
    writer.command(100.7, 1, request.SerializeToString(), "", b"")
    truncated = pb.ItemTruncated(item_id="item_a", audio_end_ms=150)
    writer.event(8, 100.7, event(8, item_truncated=truncated))
    writer.flush(100.8)


def test_a_part_is_its_lines_its_tracks_and_its_manifest(tmp_path: Path) -> None:
    writer = WirePart(info(tmp_path))
    a_session(writer)
    writer.close(101.0, "ended")
    folder = tmp_path / "sess_test"
    assert {path.name for path in folder.iterdir()} == {"manifest.json", "wire.bin"}
    load(folder)  # the lines and the WAV, made from the wire log when it is read
    assert {path.name for path in folder.iterdir()} == {
        "manifest.json",
        "wire.bin",
        "events.jsonl",
        "audio.wav",
    }
    lines = read_lines(folder / "events.jsonl")
    assert [line["type"] for line in lines[:2]] == ["recording", "stream"]
    assert lines[-1] == {"type": "end", "t": 101.0, "reason": "ended", "last_seq": 8}
    events = [line for line in lines if line["type"] == "event"]
    assert [line["seq"] for line in events] == list(range(1, 9))
    # A command comes before what it caused, and names the audio the engine heard.
    commands = [line for line in lines if line["type"] == "command"]
    assert [c["client_seq"] for c in commands] == [1, 2, 3, 4, 5]
    assert [c["audio"] for c in commands[:3]] == [
        {"track": "user", "start": 1600 * n, "frames": 1600} for n in range(3)
    ]
    assert commands[0]["sent_ms"] == 100.0 and "audio" not in commands[0]["command"]
    kinds = [line.get("kind") for line in lines]
    assert kinds.index("commit_input_audio") < kinds.index("input_committed")
    # Audio by its length and digest, never inline.
    first_delta = next(line for line in events if line["kind"] == "output_audio_delta")
    assert (
        set(first_delta["audio"]) == {"bytes", "blake2b"} and first_delta["audio"]["bytes"] == 4800
    )
    # The answer as heard: placed when its first audio went out, cut by the truncate.
    [placed] = [line for line in lines if line.get("kind") == "assistant_audio"]
    assert (placed["start"], placed["frames"], placed["cut"]) == (8000, 2400, "truncate")
    with wave.open(str(folder / "audio.wav")) as wav:
        assert (wav.getnchannels(), wav.getframerate()) == (2, RATE)
        frames = np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2").reshape(-1, 2)
    assert (frames[:4800, 0] == 1000).all() and (frames[4800:, 0] == 0).all()
    # (resampled from 24 kHz: the filter rings at the answer's first few frames)
    heard = frames[8000:10400, 1].astype(int)
    assert (abs(heard[100:] - 2000) <= 50).all() and (frames[10400:, 1] == 0).all()
    assert (frames[:8000, 1] == 0).all()
    manifest = json.loads((folder / "manifest.json").read_bytes())
    [part] = manifest["parts"]
    assert part["ended"] == "ended" and part["configs"][0]["config"]["instructions"] == "be brief"
    assert part["audio_format"] == {"sample_rate_hz": RATE, "channels": ["user", "assistant"]}
    # Never a token in any file; every file the server's user's alone, as its folder.
    for path in folder.iterdir():
        assert TOKEN.encode() not in path.read_bytes(), path.name
        assert path.stat().st_mode & 0o777 == 0o600, path.name
    assert folder.stat().st_mode & 0o777 == 0o700


def test_a_recording_without_text_or_audio_keeps_timings_only(tmp_path: Path) -> None:
    writer = WirePart(info(tmp_path, omit_audio=True, omit_text=True))
    a_session(writer)
    text = pb.ConverseRequest(client_seq=6, append_input_text=pb.AppendInputText(text="my pin"))
    writer.command(100.9, 1, text.SerializeToString(), "", b"")
    writer.close(101.0, "ended")
    folder = tmp_path / "sess_test"
    assert b"\x07\x00" * 8 not in (folder / "wire.bin").read_bytes()  # no audio sent
    assert b"\xd0\x07" * 8 not in (folder / "wire.bin").read_bytes()  # nor the answer's
    load(folder)
    assert not (folder / "audio.wav").exists()
    everything = b"".join(path.read_bytes() for path in folder.iterdir())
    assert b"my pin" not in everything and b"be brief" not in everything
    lines = read_lines(folder / "events.jsonl")
    typed = next(line for line in lines if line.get("kind") == "append_input_text")
    assert typed["command"]["text"] == "<6 characters left out>"
    deltas = [line for line in lines if line.get("kind") == "output_audio_delta"]
    assert all(set(line["audio"]) == {"bytes"} for line in deltas)
    [placed] = [line for line in lines if line.get("kind") == "assistant_audio"]
    assert placed["heard_ms"] == 150  # the places and lengths stay
    assert load(folder).user_audio(load(folder).parts[0], 0, 10) == bytes(20)  # silence


def test_a_failed_write_is_cut_back_to_its_last_whole_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = WirePart(info(tmp_path))
    writer.stream(100.0, 1, created())
    writer.flush(100.0)
    writes = {"left": 120}  # the disk takes 120 more bytes, then is full

    def filling(fd: int, data: bytes) -> int:
        if writes["left"] <= 0:
            raise OSError(28, "No space left on device")
        n = min(len(data), writes["left"])
        writes["left"] -= n
        return real_write(fd, data[:n])

    real_write = os.write
    monkeypatch.setattr(os, "write", filling)
    for n in range(1, 6):
        writer.event(n, 100.0 + n, event(n, heartbeat_ack=pb.HeartbeatAck(session_id="s")))
    with pytest.raises(OSError) as failure:
        writer.flush(106.0)
    monkeypatch.undo()
    assert stop_reason(failure.value) == "disk_full"
    writer.stopped(106.0, "disk_full")
    folder = tmp_path / "sess_test"
    load(folder)
    raw = (folder / "events.jsonl").read_bytes()
    assert raw.endswith(b"\n")  # no torn line
    lines = read_lines(folder / "events.jsonl")
    seqs = [line["seq"] for line in lines if line["type"] == "event"]
    assert seqs == list(range(1, len(seqs) + 1)) and len(seqs) < 5
    [part] = json.loads((folder / "manifest.json").read_bytes())["parts"]
    assert part["stopped"] == {
        "reason": "disk_full",
        "t": 106.0,
        "last_seq": seqs[-1] if seqs else 0,
    }
    assert load(folder).end() == {"reason": "disk_full", "last_seq": seqs[-1] if seqs else 0}


def test_the_user_track_keeps_pauses_and_lays_fast_audio_end_to_end() -> None:
    tracks = Tracks(None, RATE)
    # Faster than real time: end to end. A chunk within the jitter: no gap. A pause: a gap.
    assert tracks.user(0.0, pcm(100), pb.AUDIO_ENCODING_PCM16, RATE)[:2] == (0, 1600)
    assert tracks.user(0.01, pcm(100), pb.AUDIO_ENCODING_PCM16, RATE)[:2] == (1600, 1600)
    assert tracks.user(0.35, pcm(100), pb.AUDIO_ENCODING_PCM16, RATE)[:2] == (3200, 1600)
    assert tracks.user(2.1, pcm(100), pb.AUDIO_ENCODING_PCM16, RATE)[:2] == (32000, 1600)
    start, frames, resampled = tracks.user(2.2, pcm(100, rate=8000), pb.AUDIO_ENCODING_PCM16, 8000)
    assert (start, frames, resampled) == (33600, 1600, True)


def test_audio_far_ahead_of_the_clock_stops_the_track_before_memory_holds_it() -> None:
    tracks = Tracks(None, RATE)
    seconds = int(MAX_AHEAD_S)
    for _ in range(seconds):  # a client at 120 times real time: all of it waits ahead
        tracks.user(0.0, pcm(1000), pb.AUDIO_ENCODING_PCM16, RATE)
    with pytest.raises(AheadOfClock, match="ahead of the clock"):
        tracks.user(0.0, pcm(1000), pb.AUDIO_ENCODING_PCM16, RATE)
    paced = Tracks(None, RATE)  # the same audio at real time never comes near the bound
    for second in range(seconds + 10):
        paced.user(float(second + 1), pcm(1000), pb.AUDIO_ENCODING_PCM16, RATE)


def test_a_cancelled_answer_is_heard_until_its_cancel_and_placed_after_the_one_before() -> None:
    tracks = Tracks(None, RATE)
    for n in range(10):  # a 1 s answer sent at once at 1.0 s
        chunk = pb.OutputAudioDelta(
            response_id="r1", start_ms=n * 100.0, duration_ms=100, sample_rate_hz=24000
        )
        tracks.output(1.0, chunk, b"")
    tracks.ended(1.1, "r1", cancelled=False)
    second = pb.OutputAudioDelta(response_id="r2", duration_ms=500, sample_rate_hz=24000)
    tracks.output(1.5, second, b"")
    tracks.ended(1.8, "r2", cancelled=True)  # a barge-in 0.3 s into it
    assert tracks.advance(1.9) == []  # the first may still be truncated while it plays
    placed = tracks.advance(2.0 + SETTLE_S)
    assert [(p.response_id, p.start, p.frames, p.cut) for p in placed] == [
        ("r1", 16000, 16000, ""),
        ("r2", 32000, 0, "cancel"),  # it would have played after r1: nothing of it was heard
    ]


def test_retention_deletes_old_recordings_then_the_oldest_past_the_cap(tmp_path: Path) -> None:
    for name, age_s, size in (("old", 100, 10), ("a", 30, 600), ("b", 20, 600), ("live", 10, 600)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "manifest.json").write_bytes(b"{}")
        (folder / "events.jsonl").write_bytes(b"x" * size)
        for path in folder.iterdir():
            os.utime(path, (1000 - age_s, 1000 - age_s))
    (tmp_path / "not-a-recording").mkdir()
    gone = sweep(tmp_path, max_age_s=50, max_total_bytes=1500, live={"live"}, now=1000)
    assert sorted(path.name for path in gone) == ["a", "old"]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["b", "live", "not-a-recording"]


def test_live_recordings_past_the_cap_are_stopped_largest_first(tmp_path: Path) -> None:
    for name, size in (("done", 300), ("small", 200), ("large", 900), ("mid", 500)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "manifest.json").write_bytes(b"{}")
        (folder / "audio.wav").write_bytes(b"x" * (size - 2))
    live = {"small", "large", "mid"}
    assert over_cap(tmp_path, 900, live) == ["large", "mid"]  # 1,900 -> 1,000 -> 500
    assert over_cap(tmp_path, 5000, live) == []
    assert over_cap(tmp_path, 0, live) == []  # no cap


def test_the_usual_event_is_written_as_proto_json_is() -> None:
    from omni_grpc.client.recorded.lines import delta_json
    from omni_grpc.wire.recording import message_json

    for delta in (
        pb.OutputAudioDelta(),
        pb.OutputAudioDelta(
            response_id="r", item_id="i", encoding=1, sample_rate_hz=24000, start_ms=100.0
        ),
    ):
        assert delta_json(delta) == message_json(delta)


def test_an_append_with_hints_keeps_them_and_counts_its_frames(tmp_path: Path) -> None:
    from google.protobuf import struct_pb2

    hints = struct_pb2.Struct()
    hints.update({"is_speech": True, "transcript": "hello"})
    frame = pb.VideoFrame(data=b"\xff\xd8 a photo", mime_type="image/jpeg")
    fields = {"audio_end_ms": 12.5, "hints": hints, "video_frames": [frame]}
    fields |= {"encoding": pb.AUDIO_ENCODING_PCM16, "sample_rate_hz": 16000}
    sent = pb.ConverseRequest.FromString(append(1, pcm(100), "e1", **fields))
    writer = WirePart(info(tmp_path, omit_text=True))
    body = without_frames(sent).SerializeToString()  # as the event loop hands it over
    writer.append(100.1, 1, "", body, pcm(100), 1, RATE, True)
    writer.close(100.2, "ended")
    folder = tmp_path / "sess_test"
    load(folder)
    [line] = [line for line in read_lines(folder / "events.jsonl") if line["type"] == "command"]
    assert line["command"] == {
        "encoding": "AUDIO_ENCODING_PCM16",
        "sample_rate_hz": 16000,
        "audio_end_ms": 12.5,
        "hints": {"is_speech": True, "transcript": "<5 characters left out>"},
    }
    assert (line["video_frames"], line["sent_ms"], line["event_id"]) == (1, 100.0, "e1")
    for path in folder.iterdir():
        assert b"a photo" not in path.read_bytes() and b"hello" not in path.read_bytes()


# A recording of format 1 (events.jsonl and audio.wav written by the server itself, before the
# wire log), made by that writer from the session below; kept as it was written.
FORMAT_1 = Path(__file__).parent / "recording_format1" / "sess_format1"


def test_a_recording_of_format_1_reads_as_the_same_session_logged_on_the_wire(
    tmp_path: Path,
) -> None:
    old = load(FORMAT_1)
    assert old.manifest["format"] == 1 and "wire" not in old.parts[0].entry
    folder = tmp_path / "sess_format1"
    session = {"format": 2, "engine": {"name": "test", "options": {}}, "versions": {},
               "policy": "all", "redaction": {"audio": False, "text": False}}  # fmt: skip
    writer = WirePart(info(tmp_path, session_id="sess_format1", folder=folder, session=session))
    writer.stream(100.0, 1, pb.ConverseResponse(session_created=pb.SessionCreated(
        session=pb.Session(id="sess_format1", config=CONFIG))).SerializeToString())  # fmt: skip
    for n in range(3):
        writer.append(100.1 + n / 10, 1, "", append(n + 1, pcm(100, 7, 24000)), pcm(100), 1,
                      RATE, False)  # fmt: skip
    commit = pb.ConverseRequest(client_seq=4, commit_input_audio=pb.CommitInputAudio())
    writer.command(100.4, 1, commit.SerializeToString(), "", b"")
    writer.event(1, 100.4, event(1, input_committed=pb.InputCommitted(item_id="item_u")))
    created_response = pb.ResponseCreated(response=pb.Response(id="resp_1"), item_id="item_a")
    writer.event(2, 100.5, event(2, response_created=created_response))
    for n in range(4):
        writer.event(3 + n, 100.5, delta(3 + n, n * 100.0, 100))
    done = pb.Response(id="resp_1", status=pb.RESPONSE_STATUS_COMPLETED)
    writer.event(7, 100.5, event(7, response_done=pb.ResponseDone(response=done)))
    cut = pb.TruncateConversationItem(item_id="item_a", audio_end_ms=150)
    request = pb.ConverseRequest(client_seq=5, truncate_conversation_item=cut)
    writer.command(100.7, 1, request.SerializeToString(), "", b"")
    truncated = pb.ItemTruncated(item_id="item_a", audio_end_ms=150)
    writer.event(8, 100.7, event(8, item_truncated=truncated))
    text = pb.ConverseRequest(client_seq=6, append_input_text=pb.AppendInputText(text="and again"))
    writer.command(100.9, 1, text.SerializeToString(), "", b"")
    writer.close(101.0, "ended")
    new = load(folder)
    old_lines, new_lines = [line for _, line in old.lines], [line for _, line in new.lines]
    assert old_lines[0].pop("format") == 1 and new_lines[0].pop("format") == 2
    assert new_lines == old_lines
    assert new.parts[0].frames() == old.parts[0].frames()
    assert new.parts[0].entry["configs"] == old.parts[0].entry["configs"]
    assert summary(new) | {"bytes": 0} == summary(old) | {"bytes": 0}


@pytest.mark.parametrize("seq", [1, 127, 128, 186, 16383, 16384, 2**40])
@pytest.mark.parametrize("applied", [0, 1, 186, 2**33])
def test_a_delta_is_told_from_its_first_bytes_as_parsing_would(seq: int, applied: int) -> None:
    """The writer keeps an output audio delta's bytes as they came without parsing them; any
    other event, which may hold a secret, must never be taken for one (186 is the varint of the
    delta's own key)."""
    kinds = {
        "output_audio_delta": pb.OutputAudioDelta(audio=b"\xba\x01" * 4, response_id="r"),
        "session_created": pb.SessionCreated(resume_token="\xba\x01"),
        "session_updated": pb.SessionUpdated(),
        "heartbeat_ack": pb.HeartbeatAck(session_id="s"),
        "response_done": pb.ResponseDone(response=pb.Response(id="r")),
    }
    for kind, body in kinds.items():
        payload = pb.ConverseResponse(seq=seq, applied_client_seq=applied, **{kind: body})
        assert is_delta(payload.SerializeToString()) == (kind == "output_audio_delta"), kind
    assert not is_delta(pb.ConverseResponse(seq=seq).SerializeToString())
    assert not is_delta(b"")


def test_a_wire_log_cut_by_a_crash_reads_to_its_last_whole_record(tmp_path: Path) -> None:
    writer = WirePart(info(tmp_path))
    a_session(writer)  # written, never closed: the replica died here
    folder = tmp_path / "sess_test"
    wire = folder / "wire.bin"
    whole = load(folder)
    wire.write_bytes(wire.read_bytes()[:-5])  # the last record torn
    cut = load(folder)  # made again: the log changed
    assert [line for _, line in cut.lines] == [line for _, line in whole.lines][:-1]
    assert cut.lines[-1][1]["kind"] == "truncate_conversation_item"  # event 8 was torn
    assert cut.end() == {"reason": "unfinished", "last_seq": 7}
    assert (folder / "events.jsonl").read_bytes().endswith(b"\n")


def test_a_recording_without_text_leaves_out_transcript_logprobs_and_prompts() -> None:
    transcript = pb.InputTranscription(
        item_id="i1",
        transcript="my pin",
        logprobs=[pb.TranscriptLogprob(token="my", logprob=-0.1, bytes=b"my")],
    )
    config = pb.SessionConfig(input_transcription=pb.InputTranscriptionConfig(prompt="Zoë"))
    for message in (pb.ConverseResponse(input_transcription=transcript), config):
        kept = redact_text(message_json(message))
        parsed = type(message)()
        json_format.ParseDict(kept, parsed)  # still the message it was, less its words
        assert "my" not in str(kept) and "Zo" not in str(kept)
