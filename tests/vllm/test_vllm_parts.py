"""The parts of the vLLM engines that need no vLLM: options, prompts, the registry, the doc.

These run in the main environment (they carry no ``vllm`` mark).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from omni_grpc import audio
from omni_grpc.engine import create_engine, known_engines
from omni_grpc.engine.embedded.engine import FEATURES as EMBEDDED
from omni_grpc.engine.kit.answers import Answer
from omni_grpc.engine.loopback.engine import FEATURES as LOOPBACK
from omni_grpc.engine.vllm import VllmOptions, VllmUnavailable
from omni_grpc.engine.vllm import runtime as vllm_runtime
from omni_grpc.engine.vllm.engine import FEATURES as VLLM_FEATURES
from omni_grpc.engine.vllm.prompt import Entry, build_prompt
from omni_grpc.engine.vllm.tool_calls import kept_calls
from omni_grpc.engine.vllm_omni import VllmOmniOptions
from omni_grpc.engine.vllm_omni.engine import FEATURES as VLLM_OMNI
from omni_grpc.wire import pb
from omni_grpc.wire.pcm import CANONICAL_INPUT_RATE_HZ
from tests.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]


def pcm(seconds: float, value: float = 0.25) -> bytes:
    samples = np.full(int(CANONICAL_INPUT_RATE_HZ * seconds), value, dtype=np.float32)
    return audio.encode(samples, pb.AUDIO_ENCODING_PCM16, CANONICAL_INPUT_RATE_HZ)


def test_vllm_options_are_parsed_and_checked() -> None:
    options = VllmOptions.parse(
        {
            "model": "m",
            "enforce_eager": "yes",
            "logit_bias": "0:100; 7:-2.5",
            "kv_cache_bytes": "64",
        }
    )
    assert (options.enforce_eager, options.logit_bias) == (True, {0: 100.0, 7: -2.5})
    args = options.engine_args()
    assert args["kv_cache_memory_bytes"] == 64
    assert "gpu_memory_utilization" not in args  # 0 leaves vLLM's default
    assert args["limit_mm_per_prompt"] == {"audio": 2}
    with pytest.raises(ValueError, match="needs model="):
        VllmOptions.parse({})
    with pytest.raises(ValueError, match=r"unknown vllm option\(s\) colour; known: model, "):
        VllmOptions.parse({"model": "m", "colour": "red"})
    with pytest.raises(ValueError, match="enforce_eager='maybe' is not a valid value"):
        VllmOptions.parse({"model": "m", "enforce_eager": "maybe"})
    with pytest.raises(ValueError, match=r"min_tokens must be in \[0, 8\], got 9"):
        VllmOptions.parse({"model": "m", "min_tokens": "9", "max_tokens": "8"})
    with pytest.raises(ValueError, match="dtype must be one of"):
        VllmOptions.parse({"model": "m", "dtype": "int3"})


def test_vllm_omni_options_are_parsed_and_checked() -> None:
    options = VllmOmniOptions.parse({"model": "m", "auto_response": "off"})
    assert (options.auto_response, options.trust_remote_code) == (False, True)
    with pytest.raises(ValueError, match="needs model="):
        VllmOmniOptions.parse({"auto_response": "on"})
    with pytest.raises(ValueError, match="ref_audio must be a data:, http"):
        VllmOmniOptions.parse({"model": "m", "ref_audio": "voice.wav"})


def test_the_prompt_hears_the_latest_audio_items() -> None:
    entries = [
        Entry("user", "", pcm(0.5)),  # audio only, and too old: leaves the prompt
        Entry("assistant", "first answer"),
        Entry("user", "look at this", pcm(0.5, 0.5)),  # too old too: its words stay
        Entry("assistant", "second answer"),
        Entry("user", "", pcm(2.0, 0.1)),
        Entry("user", "and words"),
        Entry("user", "", pcm(0.25, -0.5)),
    ]
    prompt = build_prompt(
        "Be brief.",
        entries,
        placeholder=lambda n: f"<audio {n}>",
        audio_turns=2,
        max_audio_s=1.0,
    )
    assert prompt.messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "assistant", "content": "first answer"},
        {"role": "user", "content": "look at this"},
        {"role": "assistant", "content": "second answer"},
        {"role": "user", "content": "<audio 1>\nand words\n<audio 2>"},
    ]
    # Each clip keeps its last max_audio_s seconds, as float32 at 16 kHz.
    one_second = CANONICAL_INPUT_RATE_HZ
    assert [len(clip) for clip in prompt.audio] == [one_second, one_second // 4]
    assert prompt.audio[0].dtype == np.float32
    assert np.allclose(prompt.audio[0], 0.1, atol=1e-4)
    assert np.allclose(prompt.audio[1], -0.5, atol=1e-4)
    assert prompt.audio_ms == pytest.approx(1250.0)


def test_parallel_tool_calls_false_keeps_the_first_call_the_model_wrote() -> None:
    calls = [("set_alarm", '{"hour":7}'), ("get_weather", '{"city":"Paris"}')]
    answer = Answer(id="resp_1", item_id="item_1", turn_started=0.0, modalities=(pb.MODALITY_TEXT,))
    assert kept_calls(answer, calls) == calls  # OpenAI's default: several at once
    answer.parallel_tool_calls = False
    assert kept_calls(answer, calls) == calls[:1]
    assert kept_calls(answer, []) == []
    # The engine says it may call several at once; the others (one call a response) do not.
    assert VLLM_FEATURES.supports_parallel_tool_calls
    assert not any(f.supports_parallel_tool_calls for f in (LOOPBACK, EMBEDDED, VLLM_OMNI))


def test_both_engines_are_registered_and_need_their_runtime(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert {"vllm", "vllm-omni"} <= set(known_engines())
    real_find_spec = importlib.util.find_spec

    def without(name: str, *args: object) -> object:
        missing = name in ("vllm", "vllm_omni")
        return None if missing else real_find_spec(name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(vllm_runtime.importlib.util, "find_spec", without)
    with pytest.raises(VllmUnavailable, match="needs the vllm package"):
        create_engine("vllm", {"model": "Qwen/Qwen2-Audio-7B-Instruct"})
    with pytest.raises(RuntimeError, match="needs the vllm-omni package"):
        create_engine("vllm-omni", {"model": "openbmb/MiniCPM-o-4_5"})
    with pytest.raises(ValueError, match="needs model="):
        create_engine("vllm", {})


def test_importing_the_engines_imports_no_model_runtime() -> None:
    script = (
        "import json, sys\n"
        "import omni_grpc.engine.vllm, omni_grpc.engine.vllm_omni\n"
        "print(json.dumps(sorted(m for m in ('vllm', 'vllm_omni', 'torch', 'transformers')"
        " if m in sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_the_capability_table_in_the_docs_is_current() -> None:
    table = load_script("engine_table")
    doc = (ROOT / "docs" / "engines.md").read_text(encoding="utf-8")
    assert table.render(doc) == doc, "run `python scripts/engine_table.py --write`"
    for name in known_engines():
        assert f"| `{name}` |" in doc


def test_the_audio_placeholder_is_the_models_own() -> None:
    class AudioModel:
        @classmethod
        def get_placeholder_str(cls, modality: str, i: int) -> str | None:
            if modality.startswith("audio"):
                return f"Audio {i}: <|audio_bos|><|AUDIO|><|audio_eos|>"
            raise ValueError("Only audio modality is supported")

    class VisionModel:
        @classmethod
        def get_placeholder_str(cls, modality: str, i: int) -> str | None:
            if modality == "image":
                return "<image>"
            raise ValueError("Only image modality is supported")

    placeholder = vllm_runtime._declared_placeholder(AudioModel)
    assert placeholder(2) == "Audio 2: <|audio_bos|><|AUDIO|><|audio_eos|>"
    for model in (VisionModel, object):
        with pytest.raises(ValueError, match="takes no audio input"):
            vllm_runtime._declared_placeholder(model)
