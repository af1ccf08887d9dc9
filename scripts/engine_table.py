#!/usr/bin/env python3
"""Writes the capability table of docs/engines.md from the engines' declared features.

    python scripts/engine_table.py           print the table
    python scripts/engine_table.py --write   update docs/engines.md in place
    python scripts/engine_table.py --check   exit 1 if docs/engines.md is stale

Each engine package declares its ``FEATURES`` (an ``EngineFeatures``) at import time, without
loading a model or importing its runtime, so the table needs none of them installed. The
table sits in the doc between two HTML comments, which this script owns.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "engines.md"
BEGIN = "<!-- engine-table:begin (scripts/engine_table.py writes this table) -->"
END = "<!-- engine-table:end -->"

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from omni_grpc.core.limits import EngineFeatures  # noqa: E402
from omni_grpc.engine import known_engines  # noqa: E402
from omni_grpc.wire import pb  # noqa: E402

_ENCODINGS = {
    pb.AUDIO_ENCODING_PCM16: "pcm16",
    pb.AUDIO_ENCODING_PCM_F32: "pcm_f32",
    pb.AUDIO_ENCODING_G711_ULAW: "µ-law",
    pb.AUDIO_ENCODING_G711_ALAW: "A-law",
}


def features() -> dict[str, EngineFeatures]:
    """Every registered engine's declared features, by engine name."""
    from omni_grpc.engine import _ENGINES  # the registry: name -> (module, class)

    found = {}
    for name in known_engines():
        module = importlib.import_module(_ENGINES[name][0])
        declared = getattr(module, "FEATURES", None)
        if not isinstance(declared, EngineFeatures):
            raise SystemExit(f"{_ENGINES[name][0]} declares no FEATURES (an EngineFeatures)")
        found[name] = declared
    return found


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def table() -> str:
    """The capability table, in Markdown."""
    rows = [
        "| engine | default model | input audio | output audio | server VAD | barge-in "
        "| playback ack | built on |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, f in features().items():
        inputs = ", ".join(_ENCODINGS.get(e, str(e)) for e in f.input_encodings)
        rates = "/".join(
            f"{rate // 1000}" if rate % 1000 == 0 else f"{rate / 1000:g}"
            for rate in f.input_sample_rates_hz
        )
        output = f"{_ENCODINGS.get(f.output_encoding, '?')} {f.output_sample_rate_hz // 1000} kHz"
        model = f"`{f.default_model}`" if f.default_model else "(the `model` option)"
        runtime = ", ".join(f"{key}: {value}" for key, value in sorted(f.extra.items())) or "—"
        rows.append(
            f"| `{name}` | {model} | {inputs} at {rates} kHz | {output} "
            f"| {_yes(f.supports_server_vad)} | {_yes(f.supports_barge_in)} "
            f"| {_yes(f.supports_playback_ack)} | {runtime} |"
        )
    return "\n".join(rows)


def render(doc: str) -> str:
    """``doc`` with the table between the markers replaced by the current one."""
    try:
        head, rest = doc.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
    except ValueError:
        raise SystemExit(f"{DOC.name} lacks the table markers {BEGIN!r} ... {END!r}") from None
    return f"{head}{BEGIN}\n{table()}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="update docs/engines.md")
    mode.add_argument("--check", action="store_true", help="fail if docs/engines.md is stale")
    args = parser.parse_args(argv)
    if not (args.write or args.check):
        print(table())
        return 0
    current = DOC.read_text(encoding="utf-8")
    wanted = render(current)
    if args.check:
        if wanted != current:
            print(
                "docs/engines.md: the capability table is stale; run "
                "`python scripts/engine_table.py --write`",
                file=sys.stderr,
            )
            return 1
        return 0
    DOC.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
