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

import importlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "engines.md"
BEGIN = "<!-- engine-table:begin (scripts/engine_table.py writes this table) -->"
END = "<!-- engine-table:end -->"

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
if str(ROOT / "scripts") not in sys.path:
    sys.path.insert(0, str(ROOT / "scripts"))

from doc_section import Section  # noqa: E402

from omni_grpc.core.limits import EngineFeatures  # noqa: E402
from omni_grpc.engine import known_engines  # noqa: E402
from omni_grpc.wire import pb  # noqa: E402

_ENCODINGS = {
    pb.AUDIO_ENCODING_PCM16: "pcm16",
    pb.AUDIO_ENCODING_PCM_F32: "pcm_f32",
    pb.AUDIO_ENCODING_G711_ULAW: "µ-law",
    pb.AUDIO_ENCODING_G711_ALAW: "A-law",
}

_NOISE_REDUCTION = {
    pb.NOISE_REDUCTION_TYPE_NEAR_FIELD: "near field",
    pb.NOISE_REDUCTION_TYPE_FAR_FIELD: "far field",
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
        "| engine | default model | input audio | output audio | server VAD "
        "| semantic end of turn | interruption by words | barge-in | playback ack "
        "| parallel tool calls | audio items | item audio kept | out-of-band responses "
        "| truncation | noise reduction | built on |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- "
        "| --- | --- |",
    ]
    for name, f in features().items():
        inputs = ", ".join(_ENCODINGS.get(e, str(e)) for e in f.input_encodings)
        rates = "/".join(
            f"{rate // 1000}" if rate % 1000 == 0 else f"{rate / 1000:g}"
            for rate in f.input_sample_rates_hz
        )
        output = f"{_ENCODINGS.get(f.output_encoding, '?')} {f.output_sample_rate_hz // 1000} kHz"
        model = f"`{f.default_model}`" if f.default_model else "(the `model` option)"
        side = "no"
        if f.supports_out_of_band_responses:
            side = "beside the reply" if f.out_of_band_beside_response else "after the reply"
        reduces = " and ".join(
            _NOISE_REDUCTION[kind] for kind in f.noise_reduction_types if kind in _NOISE_REDUCTION
        )
        runtime = ", ".join(f"{key}: {value}" for key, value in sorted(f.extra.items())) or "—"
        rows.append(
            f"| `{name}` | {model} | {inputs} at {rates} kHz | {output} "
            f"| {_yes(f.supports_server_vad)} | {_yes(f.supports_semantic_vad)} "
            f"| {_yes(f.supports_interruption_by_words)} | {_yes(f.supports_barge_in)} "
            f"| {_yes(f.supports_playback_ack)} | {_yes(f.supports_parallel_tool_calls)} "
            f"| {_yes(f.supports_input_audio_items)} | {f.item_audio_kept_ms / 1000:g} s "
            f"| {side} | {'every kind' if f.supports_truncation else 'auto alone'} "
            f"| {reduces or 'no'} | {runtime} |"
        )
    return "\n".join(rows)


SECTION = Section(DOC, BEGIN, END, table, "the capability table", "scripts/engine_table.py")


# ``doc`` with the table between the markers made again: what the doc's test compares.
render = SECTION.render

if __name__ == "__main__":
    sys.exit(SECTION.main(None, __doc__.split("\n\n")[0]))
