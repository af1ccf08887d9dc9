#!/usr/bin/env python3
"""Measures the vllm engine on this machine: start-up, memory, and turn latency.

    .venv-vllm/bin/python scripts/bench_vllm.py [--turns N] [--model DIR] [-o KEY=VALUE ...]

Without ``--model`` it serves the tiny random Qwen2-Audio of scripts/make_tiny_models.py in
vLLM's in-process CPU mode, as the tests do. It starts the engine (import, model load, KV
cache), then plays N turns of one second of speech-like audio, each answered in text and
then in speech, and prints a JSON summary: start-up seconds, resident memory of the process
tree, and the median time from commit to the first text, the first audio and the end.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _tiny_model() -> str:
    path = ROOT / "scripts" / "make_tiny_models.py"
    spec = importlib.util.spec_from_file_location("make_tiny_models", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return str(module.ensure("qwen2-audio"))


def _tree_rss_mb() -> float:
    import psutil

    me = psutil.Process()
    return sum(p.memory_info().rss for p in [me, *me.children(recursive=True)]) / 2**20


async def _turn(engine: object, number: int, text: bool) -> dict[str, float]:
    from omni_grpc.core.config import resolve_config
    from omni_grpc.core.limits import Limits
    from omni_grpc.wire import pb
    from tests.engine.conformance import Probe, voice_like

    modalities = [pb.MODALITY_TEXT] if text else [pb.MODALITY_AUDIO]
    config = resolve_config(
        pb.SessionConfig(output_modalities=modalities), Limits(), engine.features
    )  # type: ignore[attr-defined]
    probe = Probe(await engine.open_session(f"bench{number}", config), 60.0)  # type: ignore[attr-defined]
    try:
        await probe.append(voice_like(1.0, f0_hz=120 + 10 * number), chunk_ms=100)
        await probe.send(commit_input_audio=pb.CommitInputAudio())
        done = (await probe.until("response_done"))[-1].response_done.response
    finally:
        await probe.close()
    return {
        "first_text_ms": done.latency.first_text_ms,
        "first_audio_ms": done.latency.first_audio_ms,
        "total_ms": done.latency.total_ms,
        "output_tokens": done.usage.output_tokens,
    }


async def _bench(options: dict[str, str], turns: int) -> dict[str, object]:
    started = time.monotonic()
    from omni_grpc.engine.vllm import VllmEngine

    engine = VllmEngine(options)
    await engine.start()
    startup_s = time.monotonic() - started
    rss_idle = _tree_rss_mb()
    text = [await _turn(engine, n, text=True) for n in range(turns)]
    speech = [await _turn(engine, n, text=False) for n in range(turns)]
    rss_busy = _tree_rss_mb()
    await engine.stop()

    def median(rows: list[dict[str, float]], key: str) -> float:
        return round(statistics.median(row[key] for row in rows), 1)

    return {
        "model": options["model"],
        "startup_s": round(startup_s, 1),
        "rss_mb_after_start": round(rss_idle),
        "rss_mb_after_turns": round(rss_busy),
        "turns": turns,
        "first_turn_first_token_ms": round(text[0]["first_text_ms"], 1),
        "text_first_token_ms_median": median(text[1:] or text, "first_text_ms"),
        "text_total_ms_median": median(text[1:] or text, "total_ms"),
        "speech_first_audio_ms_median": median(speech, "first_audio_ms"),
        "output_tokens_median": median(text, "output_tokens"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--model", help="a checkpoint directory (default: the tiny model)")
    parser.add_argument("-o", "--option", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    for key, value in {
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        "HF_HUB_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
    }.items():
        os.environ.setdefault(key, value)
    options = {
        "model": args.model or _tiny_model(),
        "dtype": "float32",
        "max_model_len": "2048",
        "kv_cache_bytes": str(64 * 2**20),
        "executor": "uni",
        "enforce_eager": "true",
        "max_tokens": "32",
        "pace": "fast",
    }
    options.update(dict(item.split("=", 1) for item in args.option))
    print(json.dumps(asyncio.run(_bench(options, args.turns)), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
