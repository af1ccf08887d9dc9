"""Scores the records of the turn-taking set (scripts/turn_driver.py): one row per setting.

Each measure is read off the client's clock, the way a person on the other end would notice it:

* **early answers on hesitations**: a turn ended (``speech_stopped``) where the speech paused
  inside the sentence, before its rest was spoken; counted for pauses of up to 1.2 s (the
  target) and for all;
* **end of speech to first audio** on complete requests: from the moment the last speech sample
  was sent to the first audio of the answer (median, 90th percentile);
* **replies cut by backchannels**: a backchannel, filler or cough over the reply, and the reply
  ended cancelled;
* **audio stop after an interruption**: from the interruption's first speech sample to the first
  thing that stops the listener's playback of the reply (an overlap decision that pauses or
  cuts it, or its cancelled end) (p50, p95); and whether the reply ended;
* **resume after a false interruption**: from the sound's last sample to the reply going on
  (p50, p95), and whether any resume repeated or lost audio (by more than 1 ms).

And where the time of each turn went (:func:`timing`, one row per complete request and
hesitation): the judges' verdicts at the pause that ended the turn and how long after it the
decision came (on the service's input clock: the pause is detected 96 ms into the silence),
the wait it chose, then, on the client's clock from the end of speech, the turn's end
(``speech_stopped``), its transcript and the answer's first audio.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from turn_driver import Record

STOPS = ("pause", "barge_in")


def percentile(values: Sequence[float], share: float) -> float | None:
    """The ``share`` percentile (nearest rank), or None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered), max(1, math.ceil(share * len(ordered)))) - 1]


def _reply(record: Record) -> str:
    return next((e.response_id for e in record.events if e.kind == "audio"), "")


def answered_early(record: Record) -> bool:
    """A hesitation's turn ended where its speech paused, before the rest was said."""
    rest_onset_ms = record.dialogue.before.segments[-1][0]
    return any(e.kind == "speech_stopped" and e.audio_end_ms < rest_onset_ms for e in record.events)


def first_audio_ms(record: Record) -> float | None:
    """End of speech to the first audio after it, on the client's clock."""
    first = next((e for e in record.events if e.kind == "audio" and e.at > record.speech_end), None)
    return None if first is None else (first.at - record.speech_end) * 1000


def reply_cut(record: Record) -> bool:
    reply = _reply(record)
    return any(
        e.kind == "response_done" and e.response_id == reply and e.cancelled for e in record.events
    )


def stop_ms(record: Record) -> float | None:
    """An interruption's first sample to the first thing that stops the reply's playback."""
    reply = _reply(record)
    stops = [
        e.at
        for e in record.events
        if e.response_id == reply
        and e.at >= record.over_onset
        and (
            (e.kind == "overlap" and e.action in STOPS)
            or (e.kind == "response_done" and e.cancelled)
        )
    ]
    return (min(stops) - record.over_onset) * 1000 if stops else None


def resume_ms(record: Record) -> float | None:
    """A false interruption's last sample to the reply's resume."""
    resumes = [e.at for e in record.events if e.kind == "overlap" and e.action == "resume"]
    return (resumes[0] - record.over_end) * 1000 if resumes else None


@dataclass(frozen=True, slots=True)
class Row:
    """One setting's measures (None where nothing was measured)."""

    setting: str
    early_judged: tuple[int, int]  # answered early, of the hesitations of up to 1.2 s
    early_all: tuple[int, int]
    first_audio_p50: float | None
    first_audio_p90: float | None
    unanswered: int  # complete requests with no answer in time
    backchannel_cuts: tuple[int, int]
    stop_p50: float | None
    stop_p95: float | None
    interruptions_cut: tuple[int, int]
    resume_p50: float | None
    resume_p95: float | None
    resume_errors: int  # resumes that repeated or lost audio
    failures: int


def score(setting: str, records: Sequence[Record]) -> Row:
    of = {
        kind: [r for r in records if r.dialogue.kind == kind]
        for kind in ("complete", "hesitation", "backchannel", "interruption")
    }
    hesitations = of["hesitation"]
    judged = [r for r in hesitations if r.dialogue.judged_pause]
    latencies = [ms for r in of["complete"] if (ms := first_audio_ms(r)) is not None]
    stops = [ms for r in of["interruption"] if (ms := stop_ms(r)) is not None]
    resumes = [ms for r in of["backchannel"] if (ms := resume_ms(r)) is not None]
    errors = [e for r in records for e in r.resume_errors_ms if abs(e) > 1.0]
    return Row(
        setting=setting,
        early_judged=(sum(map(answered_early, judged)), len(judged)),
        early_all=(sum(map(answered_early, hesitations)), len(hesitations)),
        first_audio_p50=statistics.median(latencies) if latencies else None,
        first_audio_p90=percentile(latencies, 0.9),
        unanswered=len(of["complete"]) - len(latencies),
        backchannel_cuts=(sum(map(reply_cut, of["backchannel"])), len(of["backchannel"])),
        stop_p50=percentile(stops, 0.5),
        stop_p95=percentile(stops, 0.95),
        interruptions_cut=(sum(map(reply_cut, of["interruption"])), len(of["interruption"])),
        resume_p50=percentile(resumes, 0.5),
        resume_p95=percentile(resumes, 0.95),
        resume_errors=len(errors),
        failures=sum(bool(r.failure) for r in records),
    )


HEADER = (
    "setting",
    "early on hesitations <= 1.2 s",
    "early, all hesitations",
    "end of speech to first audio, median / p90 ms",
    "backchannels that cut the reply",
    "audio stop after an interruption, p50 / p95 ms",
    "interruptions that ended the reply",
    "resume after a false one, p50 / p95 ms",
    "resumes that repeated or lost audio",
)


def cells(row: Row) -> list[str]:
    def ms(value: float | None) -> str:
        return "—" if value is None else f"{value:.0f}"

    def share(pair: tuple[int, int]) -> str:
        hits, total = pair
        return "—" if not total else f"{hits}/{total} ({100 * hits / total:.0f} %)"

    unanswered = f" ({row.unanswered} unanswered)" if row.unanswered else ""
    return [
        row.setting + (f" ({row.failures} failed)" if row.failures else ""),
        share(row.early_judged),
        share(row.early_all),
        f"{ms(row.first_audio_p50)} / {ms(row.first_audio_p90)}{unanswered}",
        share(row.backchannel_cuts),
        f"{ms(row.stop_p50)} / {ms(row.stop_p95)}",
        share(row.interruptions_cut),
        f"{ms(row.resume_p50)} / {ms(row.resume_p95)}",
        str(row.resume_errors),
    ]


def describe(record: Record) -> str:
    """One line about one dialogue, for the progress log."""
    parts = [f"{record.dialogue.kind}: {record.dialogue.name!r}"]
    if record.dialogue.kind == "complete" and (ms := first_audio_ms(record)) is not None:
        parts.append(f"first audio {ms:.0f} ms")
    if record.dialogue.kind == "hesitation":
        parts.append("EARLY" if answered_early(record) else "one turn")
    judged = [e for e in record.events if e.kind == "turn_end"]
    parts += [f"p={e.probability:.2f} wait {e.wait_ms:.0f} at +{e.decided_ms:.0f}" for e in judged]
    if record.dialogue.over is not None:
        parts.append("cut" if reply_cut(record) else "not cut")
        if (ms := stop_ms(record)) is not None:
            parts.append(f"stopped after {ms:.0f} ms")
        if (ms := resume_ms(record)) is not None:
            parts.append(f"resumed {ms:.0f} ms after")
    if record.failure:
        parts.append(f"FAILED {record.failure}")
    return "; ".join(parts)


TIMING_HEADER = (
    "dialogue",
    "sound / words / combined",
    "decided after the pause, ms (input clock)",
    "wait, ms",
    "turn ended",
    "transcript",
    "first audio",
)


def timing(record: Record) -> list[str]:
    """Where one turn's time went (module docstring): a row of the timing table."""

    def after_speech(kind: str) -> str:
        at = next((e.at for e in record.events if e.kind == kind and e.at > record.speech_end), 0)
        return f"{(at - record.speech_end) * 1000:.0f}" if at else "—"

    def p(value: float | None) -> str:
        return "—" if value is None or value < 0 else f"{value:.2f}"

    stopped = next((e for e in record.events if e.kind == "speech_stopped"), None)
    # The decisions of the pause that ended the turn (the first one, for an early answer).
    decisions = [
        e
        for e in record.events
        if e.kind == "turn_end"
        and stopped is not None
        and e.at <= stopped.at
        and abs(e.audio_end_ms - stopped.audio_end_ms) < 1.0
    ]
    last = decisions[-1] if decisions else None
    verdicts = "—"
    decided = wait = "—"
    if last is not None:
        verdicts = f"{p(last.sound)} / {p(last.words)} / {p(last.probability)}"
        decided = " then ".join(f"{e.decided_ms:.0f}" for e in decisions)
        wait = f"{last.wait_ms:.0f}"
    name = record.dialogue.name + (" (EARLY)" if answered_early(record) else "")
    return [
        f"{record.dialogue.kind}: {name}",
        verdicts,
        decided,
        wait,
        after_speech("speech_stopped"),
        after_speech("transcript"),
        after_speech("audio"),
    ]
