"""What a replay sends: a recording's commands, in order, at their recorded offsets.

The offsets count from the moment the recorded session was created. Each command the session
applied is sent again as it was recorded (commands it skipped, a resend after a resume or one
from a replaced stream, are not: the replay holds one stream). An append sends the audio the
engine received, from the user's track, in the track's form (pcm16 at its rate, which the
server passes to the engine untouched when it is the engine's); a commit's resampler tail
joins the append before it, so the engine hears the same samples. Numbered commands are
numbered afresh, 1, 2, 3, and the ids they name are the replay's own (:class:`IdMap`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format

from omni_grpc.client.recordings import RecordedSession
from omni_grpc.client.replay.turns import ID_KEYS, Normalizer, Step
from omni_grpc.wire import pb

# Commands whose response or item may be left empty ("the active one"), should the replay
# not have the response the recording named (yet).
_ACTIVE_WHEN_EMPTY = frozenset({"clear_output_audio", "cancel_response", "ack_playback"})


@dataclass
class Planned:
    """One command to send, ``offset_s`` after the session was created."""

    offset_s: float
    kind: str
    body: dict[str, Any]  # the command as proto JSON, ids as recorded
    audio: bytes = b""
    rate_hz: int = 0
    numbered: bool = True
    event_id: str = ""


@dataclass
class Plan:
    """A recording made ready to replay."""

    config: pb.SessionConfig
    commands: list[Planned]
    recorded: list[Step]  # the recording as steps, for the report
    last_event_offset_s: float


def steps_of(recorded: RecordedSession) -> list[Step]:
    """The recording's applied commands and its events, as :class:`Step`."""
    steps = []
    for _, line in recorded.lines:
        kind = line.get("type")
        if kind == "command" and not line.get("skipped"):
            steps.append(Step(line["t"], "command", line["kind"], line.get("command", {})))
        elif kind in ("event", "stream"):
            steps.append(
                Step(line["t"], kind, line["kind"], line.get("event", {}), line.get("audio", {}))
            )
    return steps


def plan(recorded: RecordedSession) -> Plan:
    """The commands to send, the configuration to open with, and the recording's steps."""
    opened = next(
        ((part, line) for part, line in recorded.lines if line.get("kind") == "session_created"),
        None,
    )
    if opened is None:  # recorded from an update on: the first configuration it knew
        configs = recorded.parts[0].entry.get("configs") or [{"config": {}}]
        body, t0 = configs[0]["config"], recorded.parts[0].entry.get("t0", 0.0)
    else:
        body, t0 = opened[1]["event"]["session"]["config"], opened[1]["t"]
    config = json_format.ParseDict(body, pb.SessionConfig(), ignore_unknown_fields=True)
    config.ClearField("model")  # the replay's engine may be another one, with its own model
    config.ClearField("recording")  # the replay asks for none; its server's policy decides
    commands: list[Planned] = []
    run = _Run()
    for part, line in recorded.lines:
        if line.get("type") != "command" or line.get("skipped"):
            continue
        kind, where = line["kind"], line.get("audio")
        heard = b""
        if where:
            heard = recorded.user_audio(part, int(where["start"]), int(where["frames"]))
        planned = Planned(
            offset_s=line["t"] - t0,
            kind=kind,
            body=line.get("command", {}),
            rate_hz=part.rate_hz,
            numbered=int(line.get("client_seq", 0)) != 0,
            event_id=line.get("event_id", ""),
        )
        if kind == "append_input_audio":
            run.add(planned, heard, float(line.get("sent_ms", 0.0)))
        elif kind in ("commit_input_audio", "clear_input_audio", "cancel_input"):
            run.close(heard)  # a commit's heard audio: the resampler's tail
            run = _Run()
        commands.append(planned)
    run.close(b"")
    steps = steps_of(recorded)
    events = [step.t for step in steps if step.type == "event"]
    return Plan(config, commands, steps, (max(events) - t0) if events else 0.0)


class _Run:
    """The appends of one user turn (up to its commit, clear or cancel), whose audio is sent
    as the engine heard it: all of it, in order, split between them as the client's own
    chunks were (the server's resampler may have held some back: an append the engine heard
    nothing of still sends its share, and the commit's tail goes with the last one)."""

    def __init__(self) -> None:
        self.appends: list[tuple[Planned, float]] = []  # with the client's milliseconds
        self.heard: list[bytes] = []

    def add(self, planned: Planned, heard: bytes, sent_ms: float) -> None:
        self.appends.append((planned, sent_ms))
        self.heard.append(heard)

    def close(self, tail: bytes) -> None:
        if not self.appends:
            return
        if not all(sent_ms > 0 for _, sent_ms in self.appends):  # no lengths: as heard
            for (planned, _), heard in zip(self.appends, self.heard, strict=True):
                planned.audio = heard
            self.appends[-1][0].audio += tail
            return
        audio = b"".join(self.heard) + tail
        frames = len(audio) // 2
        rate = self.appends[0][0].rate_hz
        done, elapsed_ms = 0, 0.0
        for index, (planned, sent_ms) in enumerate(self.appends):
            elapsed_ms += sent_ms
            last = index == len(self.appends) - 1
            end = frames if last else min(frames, round(elapsed_ms * rate / 1000))
            planned.audio = audio[done * 2 : end * 2]
            done = max(done, end)


class IdMap:
    """The replay's ids for the recording's: the n-th response (item, call) of the recording
    is the n-th of the replay."""

    def __init__(self, recorded: list[Step]) -> None:
        self._recorded = Normalizer()
        for step in recorded:
            if step.type == "event":
                self._recorded(step)
        self._back: dict[str, str] = {}  # canonical name -> the replay's id
        self._replayed = Normalizer(on_new=lambda value, canon: self._back.update({canon: value}))

    def saw(self, step: Step) -> None:
        """An event of the replay: its ids join the map."""
        self._replayed(step)

    def request(self, planned: Planned, client_seq: int, last_seq: int) -> pb.ConverseRequest:
        """The command to send: the replay's ids, its own number, and its audio."""
        body = self._translate(planned.body, planned.kind)
        if planned.kind == "ack_events":  # never ahead of what the replay received
            body = {**body, "seq": str(min(int(body.get("seq", 0)), last_seq))}
        request = pb.ConverseRequest(client_seq=client_seq, event_id=planned.event_id)
        inner = getattr(request, planned.kind)
        inner.SetInParent()  # the command even when its body is empty (a heartbeat)
        json_format.ParseDict(body, inner, ignore_unknown_fields=True)
        if planned.kind == "append_input_audio":
            inner.audio = planned.audio
            inner.encoding = pb.AUDIO_ENCODING_PCM16
            inner.sample_rate_hz = planned.rate_hz
        return request

    def _translate(self, node: Any, kind: str, key: str = "") -> Any:
        if isinstance(node, dict):
            return {k: self._translate(v, kind, k) for k, v in node.items()}
        if isinstance(node, list):
            return [self._translate(each, kind, key) for each in node]
        if key in ID_KEYS and isinstance(node, str) and node:
            canon = self._recorded.ids.get(node)
            if canon is None:
                return node  # the client's own id (an item it created): the same again
            if canon in self._back:
                return self._back[canon]
            return "" if kind in _ACTIVE_WHEN_EMPTY else node
        return node


__all__ = ["IdMap", "Plan", "Planned", "plan", "steps_of"]
