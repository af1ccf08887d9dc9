"""One part's ``events.jsonl`` and ``audio.wav``, made from what the server recorded.

A :class:`PartLines` is handed a part's records in order (:mod:`.derive` reads them from the
wire log) and turns them into lines of ``events.jsonl`` (docs/recordings.md) and frames of the
WAV (:mod:`.tracks`). A command comes when its handling ended, so that the audio the engine
received for it (an append's, after conversion; a commit's resampler tail) is named on its line
by its place in the user's track; the events it caused follow it. The server left out what
never reaches a disk (resume tokens, secret engine options, and audio or text when the
recording omits them) before it wrote the log.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Any, BinaryIO

import orjson

from omni_grpc.client.recorded.lines import ENCODINGS, delta_json
from omni_grpc.client.recorded.tracks import Placed, Tracks
from omni_grpc.wire import pb
from omni_grpc.wire.pcm import CANONICAL_INPUT_RATE_HZ, SAMPLE_WIDTH
from omni_grpc.wire.recording import FORMAT, message_json, redact_secrets, redact_text

APPEND_KIND = "append_input_audio"


@dataclass(frozen=True, slots=True, kw_only=True)
class PartHeader:
    """A part as its wire log's first record tells it."""

    session_id: str
    part: int
    replica: str
    t0: float  # the server clock when this part started (frame 0 of its WAV)
    wall: str  # the same moment as UTC ISO 8601
    rate_hz: int  # the WAV's rate: the rate the engine hears the session's input at
    omit_audio: bool
    omit_text: bool


class PartLines:
    """Makes one part's lines (written to ``events``) and WAV (``wav``; None: no audio)."""

    def __init__(self, info: PartHeader, events: int, wav: BinaryIO | None) -> None:
        self.info = info
        self._fd = events
        self.tracks = Tracks(wav, info.rate_hz)
        # The configuration in force as it changed (the manifest's ``configs``).
        self.configs: list[dict[str, Any]] = []
        self._lines: list[tuple[bytes, int]] = []  # (line, its event seq or 0)
        self.last_seq = 0  # the last event seq written whole
        self._made_seq = 0  # the last event seq made into a line
        self._input_format = pb.AudioFormat()  # the session's, as its events tell it
        # The parts of the usual lines that repeat (an append's format, a response's ids).
        self._append_fields: dict[tuple[int, int, int], str] = {}
        self._delta_fields: dict[tuple[str, str, int, int], str] = {}
        self.last_t = info.t0
        self._add({"type": "recording", "format": FORMAT, "session_id": info.session_id,
                   "part": info.part, "replica": info.replica, "t0": info.t0,
                   "started_at": info.wall})  # fmt: skip

    # -- what the host handed over ---------------------------------------------------------

    def append(
        self,
        t: float,
        generation: int,
        skip: str,
        client_seq: int,
        event_id: str,
        sent: tuple[int, int, int],
        extra: bytes | None,
        heard: bytes | None,
        encoding: int,
        rate_hz: int,
    ) -> None:
        """An append the server read at ``t`` (the usual command: its line made here): what
        the client ``sent`` (encoding, rate, bytes), its rare parts (``extra``), and the audio
        the engine ``heard`` for it in ``encoding`` at ``rate_hz`` (None: skipped or refused)."""
        if extra is not None or skip or event_id:  # the rare append: a line as any other
            line = self._command_line(t, generation, client_seq, event_id, skip, APPEND_KIND)
            body = self._append_body(*sent[:2])
            line["sent_ms"] = round(self._sent_ms(*sent), 3)
            if extra is not None:
                rare = pb.AppendInputAudio.FromString(extra)
                line["video_frames"] = len(rare.video_frames)  # counted, never recorded
                del rare.video_frames[:]
                body.update(self._text(message_json(rare)))
            line["command"] = body
            if heard is not None:
                line["audio"] = self._heard(t, heard, encoding, rate_hz)
            self._add(line)
            return
        # The usual one, on every chunk: its line written out directly (the same JSON).
        self.last_t = t
        where = ""
        if heard is not None:
            start, frames, resampled = self.tracks.user(t - self.info.t0, heard, encoding, rate_hz)
            more = f',"resampled_from_hz":{rate_hz}' if resampled else ""
            where = f',"audio":{{"track":"user","start":{start},"frames":{frames}{more}}}'
        fields = self._append_fields.get(sent)
        if fields is None:  # one per format and length a session sends in
            encoded = orjson.dumps(self._append_body(*sent[:2])).decode()
            fields = f'"sent_ms":{round(self._sent_ms(*sent), 3)!r},"command":{encoded}'
            self._append_fields[sent] = fields
        self._lines.append((
            f'{{"type":"command","t":{t!r},"generation":{generation},"client_seq":{client_seq},'
            f'"kind":"append_input_audio",{fields}{where}}}\n'.encode(),
            0,
        ))  # fmt: skip

    @staticmethod
    def _append_body(encoding: int, rate_hz: int) -> dict[str, Any]:
        body: dict[str, Any] = {}
        if encoding:
            body["encoding"] = ENCODINGS[encoding]
        if rate_hz:
            body["sample_rate_hz"] = rate_hz
        return body

    def command(self, t: float, generation: int, body: bytes, skip: str, tail: bytes) -> None:
        """Any other command the server read at ``t`` on attachment ``generation`` (``skip``:
        why the session did not apply it, "duplicate" or "stale"); ``tail``: the audio a
        commit flushed to the engine from the resampler."""
        request = pb.ConverseRequest.FromString(body)
        kind = request.WhichOneof("command") or ""
        line = self._command_line(t, generation, request.client_seq, request.event_id, skip, kind)
        if kind:
            inner = getattr(request, kind)
            if kind == "resume_session":
                inner.resume_token = ""
            line["command"] = self._text(message_json(inner))
        if tail:
            line["audio"] = self._heard(t, tail, pb.AUDIO_ENCODING_PCM16, CANONICAL_INPUT_RATE_HZ)
        self._add(line)

    def _command_line(
        self, t: float, generation: int, client_seq: int, event_id: str, skip: str, kind: str
    ) -> dict[str, Any]:
        self.last_t = t
        line: dict[str, Any] = {"type": "command", "t": t, "generation": generation,
                                "client_seq": client_seq, "kind": kind}  # fmt: skip
        if event_id:
            line["event_id"] = event_id
        if skip:
            line["skipped"] = skip
        return line

    def _heard(self, t: float, data: bytes, encoding: int, rate_hz: int) -> dict[str, Any]:
        """Places audio the engine received on the user's track; returns where."""
        start, frames, resampled = self.tracks.user(t - self.info.t0, data, encoding, rate_hz)
        where: dict[str, Any] = {"track": "user", "start": start, "frames": frames}
        if resampled:
            where["resampled_from_hz"] = rate_hz
        return where

    def event(self, seq: int, t: float, payload: bytes, restored: bool = False) -> None:
        """A numbered event of the session (``restored``: one an adopting replica took from
        the store, numbered by a replica before it)."""
        event = pb.ConverseResponse.FromString(payload)
        if event.HasField("output_audio_delta") and not restored:  # the usual event
            self._delta(seq, t, event)
            return
        line = self._event_line("event", t, event)
        line["seq"] = seq
        if restored:
            line["restored"] = True
        else:
            self._follow(t, event, line)
        self._add(line, seq)

    def _delta(self, seq: int, t: float, event: pb.ConverseResponse) -> None:
        """An output audio delta, on every chunk: its line written out directly."""
        delta = event.output_audio_delta
        data = delta.audio
        self.tracks.output(t - self.info.t0, delta, data)
        self.last_t = t
        key = (delta.response_id, delta.item_id, delta.encoding, delta.sample_rate_hz)
        fields = self._delta_fields.get(key)
        if fields is None:  # one per response
            fields = orjson.dumps(delta_json(delta, timed=False)).decode()[1:-1]
            self._delta_fields = {key: fields}
        timing = ""
        if delta.start_ms:
            timing += f',"start_ms":{delta.start_ms!r}'
        if delta.duration_ms:
            timing += f',"duration_ms":{delta.duration_ms!r}'
        body = "{" + (fields + timing if fields else timing[1:]) + "}"
        if self.info.omit_audio:
            audio = f'{{"bytes":{len(data)}}}'
        else:
            digest = hashlib.blake2b(data, digest_size=8).hexdigest()
            audio = f'{{"bytes":{len(data)},"blake2b":"{digest}"}}'
        applied = event.applied_client_seq
        envelope = f'"applied_client_seq":{applied},' if applied else ""
        self._made_seq = seq
        line = (
            f'{{"type":"event","t":{t!r},"kind":"output_audio_delta",{envelope}'
            f'"audio":{audio},"event":{body},"seq":{seq}}}\n'
        )
        self._lines.append((line.encode(), seq))

    def stream(self, t: float, generation: int, payload: bytes) -> None:
        """An event of one stream only (seq 0): created, resumed, replaced, resync, going away,
        or any event after a journal overflow."""
        event = pb.ConverseResponse.FromString(payload)
        line = self._event_line("stream", t, event)
        line["generation"] = generation
        self._follow(t, event, line)
        self._add(line)

    def note(self, t: float, kind: str, fields: dict[str, Any]) -> None:
        self._add({"type": "note", "t": t, "kind": kind, **fields})

    # -- writing ---------------------------------------------------------------------------

    def flush(self, now: float) -> None:
        """Writes the lines made so far, then the audio both tracks hold for good (the lines
        first: should the disk fill, they are the record of what happened)."""
        self._write_lines()
        for placed in self.tracks.advance(now - self.info.t0):
            self._placed(placed)

    def close(self, t: float, reason: str) -> None:
        """The part's end: everything written."""
        for placed in self.tracks.close(t - self.info.t0):
            self._placed(placed)
        self._add({"type": "end", "t": t, "reason": reason, "last_seq": self._made_seq})
        self._write_lines()

    def cut(self, t: float) -> None:
        """The log ends without an end (a recording stopped, cut by a crash, or still being
        written): the lines made are written, and the audio both tracks hold for good at
        ``t``."""
        self.flush(t)
        self.tracks.drop()

    # -- inside ----------------------------------------------------------------------------

    def _event_line(self, kind: str, t: float, event: pb.ConverseResponse) -> dict[str, Any]:
        what = event.WhichOneof("event") or ""
        line: dict[str, Any] = {"type": kind, "t": t, "kind": what}
        if event.applied_client_seq:
            line["applied_client_seq"] = event.applied_client_seq
        if not what:
            return line
        inner = getattr(event, what)
        if what in ("session_created", "session_resumed"):
            inner.resume_token = ""
        if what == "output_audio_delta":  # the usual event: its JSON made here
            line["audio"] = self._digest(inner.audio)
            line["event"] = delta_json(inner)
            return line
        line["event"] = self._text(message_json(inner))
        self.last_t = t
        return line

    def _follow(self, t: float, event: pb.ConverseResponse, line: dict[str, Any]) -> None:
        """What an event tells the tracks and the manifest."""
        at = t - self.info.t0
        what = line["kind"]
        if what == "output_audio_delta":
            delta = event.output_audio_delta
            self.tracks.output(at, delta, delta.audio)
        elif what == "response_done":
            response = event.response_done.response
            cancelled = response.status == pb.RESPONSE_STATUS_CANCELLED
            self.tracks.ended(at, response.id, cancelled)
        elif what == "output_audio_cleared":
            self.tracks.ended(at, event.output_audio_cleared.response_id, True)
        elif what == "item_truncated":
            cut = event.item_truncated
            self.tracks.truncated(cut.item_id, cut.audio_end_ms)
        elif what == "playback_acknowledged" and event.playback_acknowledged.truncate:
            ack = event.playback_acknowledged
            self.tracks.truncated(ack.response_id, ack.committed_ms)
        elif what in ("session_created", "session_resumed", "session_updated"):
            self._input_format.CopyFrom(getattr(event, what).session.config.input_audio_format)
            config = self._text(message_json(getattr(event, what).session.config))
            self.configs.append({"t": t, "by": what, "config": config})

    def _sent_ms(self, encoding: int, rate_hz: int, size: int) -> float:
        """How long the client's audio in an append was (its format, else the session's)."""
        fmt = self._input_format
        encoding = encoding or fmt.encoding or pb.AUDIO_ENCODING_PCM16
        rate = rate_hz or fmt.sample_rate_hz or self.info.rate_hz
        return size / SAMPLE_WIDTH.get(encoding, 2) * 1000 / rate

    def _digest(self, data: bytes) -> dict[str, Any]:
        if self.info.omit_audio:
            return {"bytes": len(data)}
        return {"bytes": len(data), "blake2b": hashlib.blake2b(data, digest_size=8).hexdigest()}

    def _text(self, body: dict[str, Any]) -> dict[str, Any]:
        """A rare line's body as recorded: secrets in options always left out, and the text
        too when the recording omits it (never on the usual chunk's line)."""
        body = redact_secrets(body)
        return redact_text(body) if self.info.omit_text else body

    def _placed(self, placed: Placed) -> None:
        fields = {"response_id": placed.response_id, "track": "assistant", "start": placed.start,
                  "frames": placed.frames, "audio_ms": round(placed.audio_ms, 3),
                  "heard_ms": round(placed.heard_ms, 3), "cut": placed.cut}  # fmt: skip
        self.note(self.last_t, "assistant_audio", fields)

    def _add(self, line: dict[str, Any], seq: int = 0) -> None:
        self._made_seq = seq or self._made_seq
        self._lines.append((orjson.dumps(line) + b"\n", seq))

    def _write_lines(self) -> None:
        lines, self._lines = self._lines, []
        data = memoryview(b"".join(line for line, _ in lines))
        while data:
            data = data[os.write(self._fd, data) :]
        for _, seq in lines:
            self.last_seq = seq or self.last_seq


__all__ = ["PartHeader", "PartLines"]
