"""A replay's report: the recorded and the replayed conversation side by side.

:func:`report` compares them: how closely the commands kept their recorded pacing (the time
each went out after the session opened, against its recorded offset), whether the events are
the same (:func:`~.turns.normalized`: ids, times and latencies aside, audio by digest), and,
turn by turn, the user's words, the answer, how it ended, its audio and its latency from the
end of input to the first audio. :func:`summary` is the same for a person, :func:`chart_html`
a self-contained page with one bar pair per turn.
"""

from __future__ import annotations

import html
import statistics
from collections import Counter
from typing import Any

from omni_grpc.client.replay.turns import Step, Turn, normalized, turns

TURN_FIELDS = ("input", "said", "answer", "status", "audio_ms", "barge_in")
CUT_FIELDS = frozenset({"answer", "audio_ms"})  # where a barge-in cut it: a chunk either way


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def pacing(pacing: list[tuple[str, float, float]], planned: list[str]) -> dict[str, Any]:
    """How late (or early) each command went out against its recorded offset, in ms."""
    errors = [abs(sent - recorded) * 1000 for _, recorded, sent in pacing]
    late = [(sent - recorded) * 1000 for _, recorded, sent in pacing]
    return {
        "commands": len(pacing),
        "planned": len(planned),
        "in_order": [kind for kind, _, _ in pacing] == planned[: len(pacing)],
        "p50_ms": round(_quantile(errors, 0.5), 2),
        "p95_ms": round(_quantile(errors, 0.95), 2),
        "max_ms": round(max(errors, default=0.0), 2),
        "mean_late_ms": round(statistics.fmean(late), 2) if late else 0.0,
    }


def events(recorded: list[Step], replayed: list[Step]) -> dict[str, Any]:
    """Whether the numbered events are the same, and where they first differ."""
    left, right = normalized(recorded), normalized(replayed)
    first = next(
        (i for i, (a, b) in enumerate(zip(left, right, strict=False)) if a != b),
        None if len(left) == len(right) else min(len(left), len(right)),
    )
    counts_left = Counter(line.split(" ", 1)[0] for line in left)
    counts_right = Counter(line.split(" ", 1)[0] for line in right)
    kinds = sorted(set(counts_left) | set(counts_right))
    result: dict[str, Any] = {
        "recorded": len(left),
        "replayed": len(right),
        "identical": first is None,
        "by_kind": {k: [counts_left[k], counts_right[k]] for k in kinds},
    }
    if first is not None:
        result["first_difference"] = {
            "index": first,
            "recorded": left[first] if first < len(left) else None,
            "replayed": right[first] if first < len(right) else None,
        }
    return result


def turn_pairs(recorded: list[Turn], replayed: list[Turn]) -> list[dict[str, Any]]:
    """Each turn, recorded and replayed, the fields that differ, and whether it is the same
    turn: the same input and words, ended the same way, and, unless it was cut (a barge-in
    lands a few milliseconds apart in a replay, so after more or fewer chunks), the same
    answer and audio."""
    pairs = []
    for index in range(max(len(recorded), len(replayed))):
        a = recorded[index].as_json() if index < len(recorded) else None
        b = replayed[index].as_json() if index < len(replayed) else None
        differs = [name for name in TURN_FIELDS if a[name] != b[name]] if a and b else ["missing"]
        cut = bool(a and b and a["barge_in"] and b["barge_in"])
        same = not [name for name in differs if not (cut and name in CUT_FIELDS)]
        pairs.append(
            {"index": index, "recorded": a, "replayed": b, "differs": differs, "same_turn": same}
        )
    return pairs


def report(
    recording: str,
    target: str,
    via: str,
    recorded: list[Step],
    replayed: list[Step],
    sent: list[tuple[str, float, float]],
    planned: list[str],
    *,
    compare_events: bool = True,
) -> dict[str, Any]:
    """The whole comparison as one JSON document (``--report FILE``); ``compare_events`` off
    for a replay through another dialect (the bridge), whose events cannot be the same."""
    pairs = turn_pairs(turns(recorded), turns(replayed))
    compared = events(recorded, replayed) if compare_events else {"compared": False}
    return {
        "recording": recording,
        "target": target,
        "via": via,
        "pacing": pacing(sent, planned),
        "events": compared,
        "turns": pairs,
        "turns_match": all(pair["same_turn"] for pair in pairs),
        "turns_identical": all(not pair["differs"] for pair in pairs),
    }


def summary(document: dict[str, Any]) -> str:
    """The report for a person: pacing, events, then one block per turn."""
    pace, ev = document["pacing"], document["events"]
    lines = [
        f"replay of {document['recording']} against {document['target']} ({document['via']})",
        f"commands: {pace['commands']} of {pace['planned']} sent"
        f"{', in order' if pace['in_order'] else ', OUT OF ORDER'}; pacing error "
        f"p50 {pace['p50_ms']} ms, p95 {pace['p95_ms']} ms, max {pace['max_ms']} ms",
    ]
    if "compared" in ev:
        lines.append("events: not compared (another dialect); turns below")
    else:
        same = "the same (ids and times aside, audio byte for byte)"
        lines.append(
            f"events: {ev['recorded']} recorded, {ev['replayed']} replayed, "
            + (same if ev["identical"] else "differ")
        )
    if not ev.get("identical", True):
        diff = ev["first_difference"]
        lines.append(f"  first difference at event {diff['index'] + 1}:")
        lines.append(f"    recorded: {_cut(diff['recorded'])}")
        lines.append(f"    replayed: {_cut(diff['replayed'])}")
        changed = {k: v for k, v in ev["by_kind"].items() if v[0] != v[1]}
        if changed:
            lines.append("  counts that differ: " + ", ".join(
                f"{k} {a} -> {b}" for k, (a, b) in changed.items()))  # fmt: skip
    for pair in document["turns"]:
        verdict = "differs in " + ", ".join(pair["differs"]) if pair["differs"] else "the same"
        if pair["differs"] and pair["same_turn"]:
            verdict = f"the same turn, cut a little apart ({verdict})"
        lines.append(f"turn {pair['index'] + 1}: {verdict}")
        for side in ("recorded", "replayed"):
            turn = pair[side]
            if turn is None:
                lines.append(f"  {side}: (none)")
                continue
            latency = turn["input_end_to_first_audio_ms"]
            lines.append(
                f"  {side}: {turn['input'] or '-'} {_cut(repr(turn['said']), 40)} -> "
                f"{_cut(repr(turn['answer']), 60)} [{turn['status']}"
                f"{', barge-in' if turn['barge_in'] else ''}, {turn['audio_ms']:.0f} ms audio, "
                f"first audio {'-' if latency is None else f'{latency:.0f} ms'}]"
            )
    return "\n".join(lines) + "\n"


def _cut(text: str | None, width: int = 110) -> str:
    text = text or "-"
    return text if len(text) <= width else text[: width - 1] + "…"


def chart_html(document: dict[str, Any]) -> str:
    """A page with the latency of each turn, recorded and replayed, as bars (inline SVG)."""
    pairs = document["turns"]
    values = [
        (side, pair[side]["input_end_to_first_audio_ms"] if pair[side] else None)
        for pair in pairs
        for side in ("recorded", "replayed")
    ]
    top = max([v for _, v in values if v is not None] + [1.0])
    bar, gap, left, width = 18, 14, 70, 520
    rows = []
    y = 10
    for pair in pairs:
        for side, color in (("recorded", "#5b7db1"), ("replayed", "#d98c3f")):
            turn = pair[side]
            value = turn["input_end_to_first_audio_ms"] if turn else None
            length = 0 if value is None else max(1, round(value / top * width))
            label = "-" if value is None else f"{value:.0f} ms"
            rows.append(
                f'<rect x="{left}" y="{y}" width="{length}" height="{bar}" fill="{color}"/>'
                f'<text x="{left + length + 6}" y="{y + 13}">{label}</text>'
            )
            y += bar + 2
        rows.append(f'<text x="4" y="{y - bar}">turn {pair["index"] + 1}</text>')
        y += gap
    table = "".join(
        "<tr>"
        + f"<td>{pair['index'] + 1}</td>"
        + "".join(
            f"<td>{html.escape(str((pair[side] or {}).get(name, '')))}</td>"
            for side in ("recorded", "replayed")
            for name in ("said", "answer", "status")
        )
        + f"<td>{html.escape(', '.join(pair['differs']) or 'the same')}</td></tr>"
        for pair in pairs
    )
    head = "".join(f"<th>{side} {name}</th>" for side in ("recorded", "replayed")
                   for name in ("said", "answer", "status"))  # fmt: skip
    title = html.escape(f"Replay of {document['recording']}")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>body{{font:14px system-ui,sans-serif;margin:2em}}svg text{{font:12px system-ui}}
table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:4px 8px;text-align:left}}
</style></head><body>
<h1>{title}</h1>
<p>End of the user's input to the first audio of the answer, per turn:
<span style="color:#5b7db1">recorded</span> and <span style="color:#d98c3f">replayed</span>.</p>
<svg width="{left + width + 90}" height="{y + 10}" role="img">{"".join(rows)}</svg>
<pre>{html.escape(summary(document))}</pre>
<table><tr><th>turn</th>{head}<th>differs</th></tr>{table}</table>
</body></html>
"""


__all__ = ["chart_html", "events", "pacing", "report", "summary", "turn_pairs"]
