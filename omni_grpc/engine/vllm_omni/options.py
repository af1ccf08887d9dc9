"""The vllm-omni engine's options: strings in, checked values out.

* ``model``: a duplex model vLLM-Omni has a pipeline for, e.g. ``openbmb/MiniCPM-o-4_5``
  (required).
* ``trust_remote_code``: ``true`` (default) lets the model's own code run; MiniCPM-o needs it.
* ``deploy_config``: the path of a vLLM-Omni deploy YAML (stages, GPUs, ``session_mode: duplex``);
  default: the one vLLM-Omni ships for the model.
* ``ref_audio``: the voice to speak with, as a ``data:``, ``http(s):`` or ``file:`` URI of
  a short recording (MiniCPM-o needs one for spoken answers); a session may name its own in
  ``engine_options.ref_audio``.
* ``auto_response``: ``true`` (default) lets the model decide when to answer, as a natively
  duplex model does; ``false`` answers only a commit or ``create_response``.
* ``control_timeout_s``: the longest wait for vLLM-Omni to open or close a session; default 10.
* ``max_sessions``: admitted sessions, the deploy config's ``duplex_session.max_sessions``
  overrides it on vLLM-Omni's side; default 4 (used for the capabilities handshake).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from omni_grpc.engine.vllm.options import parse_bool


@dataclass(frozen=True, slots=True, kw_only=True)
class VllmOmniOptions:
    """How the vllm-omni engine runs; the module docstring describes each option."""

    model: str
    trust_remote_code: bool = True
    deploy_config: str = ""
    ref_audio: str = ""
    auto_response: bool = True
    control_timeout_s: float = 10.0
    max_sessions: int = 4

    def __post_init__(self) -> None:
        if not self.model.strip():
            raise ValueError("vllm-omni option: model is required")
        if not (math.isfinite(self.control_timeout_s) and 0 < self.control_timeout_s <= 300):
            raise ValueError("vllm-omni option: control_timeout_s must be in (0, 300]")
        if not 1 <= self.max_sessions <= 4096:
            raise ValueError("vllm-omni option: max_sessions must be in [1, 4096]")
        if self.ref_audio and ":" not in self.ref_audio:
            raise ValueError("vllm-omni option: ref_audio must be a data:, http(s): or file: URI")

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> VllmOmniOptions:
        """Reads string options; raises ValueError naming any unknown key or bad value."""
        unknown = sorted(set(options) - set(_CONVERTERS))
        if unknown:
            raise ValueError(
                f"unknown vllm-omni option(s) {', '.join(unknown)}; known: {', '.join(_CONVERTERS)}"
            )
        if not options.get("model", "").strip():
            raise ValueError("the vllm-omni engine needs model=<a duplex model, e.g. MiniCPM-o>")
        values: dict[str, object] = {}
        for key, text in options.items():
            try:
                values[key] = _CONVERTERS[key](text)
            except ValueError:
                raise ValueError(f"vllm-omni option {key}={text!r} is not a valid value") from None
        return cls(**values)  # type: ignore[arg-type]


_CONVERTERS: dict[str, Callable[[str], object]] = {
    "model": str,
    "trust_remote_code": parse_bool,
    "deploy_config": str,
    "ref_audio": str,
    "auto_response": parse_bool,
    "control_timeout_s": float,
    "max_sessions": int,
}
