"""The vllm engine's options: strings in, checked values out.

Every option is a string on the command line (``--engine-option KEY=VALUE``) or in the
settings file's ``engine_options`` table. Three groups:

vLLM (passed to ``AsyncEngineArgs``; 0 or empty leaves vLLM's own default):

* ``model``: a Hugging Face model name or a local checkpoint directory of an audio-in,
  text-out model (Qwen2-Audio, Ultravox, ...). Required.
* ``dtype``: ``auto`` (default), ``float32``, ``bfloat16``, ``float16``.
* ``max_model_len``: the context length the engine plans for.
* ``kv_cache_bytes``: the KV cache size in bytes. Set it on a CPU (or vLLM sizes the cache
  from the host's memory); on a GPU ``gpu_memory_utilization`` usually does.
* ``gpu_memory_utilization``: the share of GPU memory vLLM may take, in (0, 1].
* ``tensor_parallel_size``: GPUs one model is split over; default 1.
* ``max_num_seqs``: requests one engine step may batch; also the sessions the engine says it
  serves at once (a server's ``--capacity``), as each has at most one request running.
* ``executor``: ``uni`` (the model in the engine process), ``mp`` or ``ray``; default vLLM's.
* ``enforce_eager``: ``true`` skips CUDA graphs and torch.compile (faster start).
* ``trust_remote_code``: ``true`` lets the model's own Python code run.
* ``seed``: the engine's random seed; default 0.

Answers (per response; a session's ``temperature`` and ``max_output_tokens`` win):

* ``temperature``: default 0.7. ``max_tokens``: default 160. ``min_tokens``: default 0.
* ``logit_bias``: ``TOKEN_ID:BIAS`` pairs separated by ``;`` added to the logits.
* ``audio_turns``: how many of the latest user audio items the model hears; default 2
  (older ones leave the prompt). ``max_audio_s``: the most audio kept of one item, the
  latest part; default 30 (Whisper-style encoders see 30 s windows).
* ``history_items``: conversation items the prompt holds at most; default 12.
* ``instructions``: the system prompt when a session gives none.
* ``tool_parser``: the vLLM tool parser that reads function calls out of the model's own output
  under ``tool_choice: auto`` (a name vLLM registers: ``hermes``, ``llama3_json``,
  ``mistral``, ...); default ``hermes``. Under ``required`` or a named function the call is
  written under vLLM's structured outputs instead (the call's JSON schema), so any model's
  arguments follow the tool's schema.
* ``audio_placeholder``: the prompt text that marks where an audio goes, with ``{n}`` for its
  1-based number; default: what vLLM's model class declares.

Speech (how answers are spoken and paced):

* ``voice``: the espeak-ng voice when a session names none it knows; default ``en-us``.
* ``words_per_minute``: speaking rate, 80 to 450; default 175.
* ``pace``: ``realtime`` (default) releases audio no faster than it plays; ``fast`` releases
  it as it is made. ``speed`` divides the real-time schedule; default 1.
* ``chunk_ms``: output audio chunk length, 20 to 200; default 100.
* ``max_input_s``: the most uncommitted input audio; default 120.
* ``queue_size``: each session's command and event queue bound; default 256.

Hearing:

* ``server_vad``: ``on`` (default) ends turns by itself, with Silero VAD on a CPU thread as
  the embedded engine does (the kit's :class:`~omni_grpc.engine.kit.ListeningSession`), and
  makes it the sessions' default; ``off`` leaves every turn to the client's commits. The model
  hears audio, not words, so semantic turn detection is served as the eagerness's silence and
  interruptions are judged by their length, never their words.
* ``min_speech_ms``: speech shorter than this never starts a turn; default 64.
* ``overlap_min_speech_ms``, ``overlap_pause_ms``: the same bar, and the silence that pauses
  it, for speech over a reply held while it is judged; default 32 each (the embedded engine's
  options say why).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from omni_grpc.engine.kit.options import (
    Converters,
    check_choice,
    check_range,
    parse_bool,
    parse_options,
)

_DTYPES = ("auto", "float32", "bfloat16", "float16")
_EXECUTORS = ("", "uni", "mp", "ray")
_PACES = ("realtime", "fast")


def _bias(text: str) -> dict[int, float]:
    bias: dict[int, float] = {}
    for pair in filter(None, (part.strip() for part in text.split(";"))):
        token, sep, value = pair.partition(":")
        if not sep:
            raise ValueError(pair)
        bias[int(token)] = float(value)
    return bias


DEFAULT_INSTRUCTIONS = (
    "You are a friendly voice assistant. Your answers are spoken aloud, so answer in one or "
    "two short, plain sentences."
)


@dataclass(frozen=True, slots=True, kw_only=True)
class VllmOptions:
    """How the vllm engine runs; the module docstring describes each option."""

    model: str
    dtype: str = "auto"
    max_model_len: int = 0
    kv_cache_bytes: int = 0
    gpu_memory_utilization: float = 0.0
    tensor_parallel_size: int = 1
    max_num_seqs: int = 0
    executor: str = ""
    enforce_eager: bool = False
    trust_remote_code: bool = False
    seed: int = 0
    temperature: float = 0.7
    max_tokens: int = 160
    min_tokens: int = 0
    logit_bias: dict[int, float] = field(default_factory=dict)
    audio_turns: int = 2
    max_audio_s: float = 30.0
    history_items: int = 12
    instructions: str = DEFAULT_INSTRUCTIONS
    tool_parser: str = "hermes"
    audio_placeholder: str = ""
    voice: str = "en-us"
    words_per_minute: int = 175
    pace: str = "realtime"
    speed: float = 1.0
    chunk_ms: int = 100
    max_input_s: float = 120.0
    queue_size: int = 256
    server_vad: str = "on"
    min_speech_ms: float = 64.0
    overlap_min_speech_ms: float = 32.0
    overlap_pause_ms: float = 32.0

    def __post_init__(self) -> None:
        if not self.model.strip():
            raise ValueError("model is required (a model name or a checkpoint path)")
        check_choice("dtype", self.dtype, _DTYPES)
        check_range("max_model_len", self.max_model_len, 0)
        check_range("kv_cache_bytes", self.kv_cache_bytes, 0)
        check_range("gpu_memory_utilization", self.gpu_memory_utilization, 0, 1)
        check_range("tensor_parallel_size", self.tensor_parallel_size, 1, 64)
        check_range("max_num_seqs", self.max_num_seqs, 0)
        check_choice("executor", self.executor, _EXECUTORS)
        check_range("temperature", self.temperature, 0, 2)
        check_range("max_tokens", self.max_tokens, 1, 65536)
        check_range("min_tokens", self.min_tokens, 0, self.max_tokens)
        check_range("audio_turns", self.audio_turns, 1, 16)
        check_range("max_audio_s", self.max_audio_s, 0, 600, above=True)
        check_range("history_items", self.history_items, 1, 256)
        check_range("words_per_minute", self.words_per_minute, 80, 450)
        check_choice("pace", self.pace, _PACES)
        check_range("speed", self.speed, 0, 100, above=True)
        check_range("chunk_ms", self.chunk_ms, 20, 200)
        check_range("max_input_s", self.max_input_s, 1, 3600)
        check_range("queue_size", self.queue_size, 16)
        check_choice("server_vad", self.server_vad, ("on", "off"))
        check_range("min_speech_ms", self.min_speech_ms, 0, 1000)
        check_range("overlap_min_speech_ms", self.overlap_min_speech_ms, 0, 1000)
        check_range("overlap_pause_ms", self.overlap_pause_ms, 32, 1000)

    def engine_args(self) -> dict[str, object]:
        """The ``AsyncEngineArgs`` these options ask for; vLLM's defaults fill the rest."""
        args: dict[str, object] = {
            "model": self.model,
            "dtype": self.dtype,
            "seed": self.seed,
            "tensor_parallel_size": self.tensor_parallel_size,
            "enforce_eager": self.enforce_eager,
            "trust_remote_code": self.trust_remote_code,
            "limit_mm_per_prompt": {"audio": self.audio_turns},
            "disable_log_stats": True,
        }
        optional = {
            "max_model_len": self.max_model_len,
            "kv_cache_memory_bytes": self.kv_cache_bytes,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "max_num_seqs": self.max_num_seqs,
            "distributed_executor_backend": self.executor,
        }
        args.update({key: value for key, value in optional.items() if value})
        return args

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> VllmOptions:
        """Reads string options; raises ValueError naming any unknown key or bad value."""
        values = parse_options("vllm", options, _CONVERTERS)
        if not str(values.get("model", "")).strip():
            raise ValueError(
                "the vllm engine needs model=<Hugging Face name or checkpoint directory>"
            )
        return cls(**values)  # type: ignore[arg-type]


_CONVERTERS: Converters = {
    "model": str,
    "dtype": str,
    "max_model_len": int,
    "kv_cache_bytes": int,
    "gpu_memory_utilization": float,
    "tensor_parallel_size": int,
    "max_num_seqs": int,
    "executor": str,
    "enforce_eager": parse_bool,
    "trust_remote_code": parse_bool,
    "seed": int,
    "temperature": float,
    "max_tokens": int,
    "min_tokens": int,
    "logit_bias": _bias,
    "audio_turns": int,
    "max_audio_s": float,
    "history_items": int,
    "instructions": str,
    "tool_parser": str,
    "audio_placeholder": str,
    "voice": str,
    "words_per_minute": int,
    "pace": str,
    "speed": float,
    "chunk_ms": int,
    "max_input_s": float,
    "queue_size": int,
    "server_vad": str,
    "min_speech_ms": float,
    "overlap_min_speech_ms": float,
    "overlap_pause_ms": float,
}
