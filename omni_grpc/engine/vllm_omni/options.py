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
  overrides it on vLLM-Omni's side; default 4 (used for the capabilities handshake, and as the
  sessions the engine says it serves at once: a server's ``--capacity``). Set it to what the
  deploy config admits.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from omni_grpc.engine.kit.options import Converters, check_range, parse_bool, parse_options


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
            raise ValueError("model is required (a duplex model, e.g. MiniCPM-o)")
        check_range("control_timeout_s", self.control_timeout_s, 0, 300, above=True)
        check_range("max_sessions", self.max_sessions, 1, 4096)
        if self.ref_audio and ":" not in self.ref_audio:
            raise ValueError("ref_audio must be a data:, http(s): or file: URI")

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> VllmOmniOptions:
        """Reads string options; raises ValueError naming any unknown key or bad value."""
        values = parse_options("vllm-omni", options, _CONVERTERS)
        if not str(values.get("model", "")).strip():
            raise ValueError("the vllm-omni engine needs model=<a duplex model, e.g. MiniCPM-o>")
        return cls(**values)  # type: ignore[arg-type]


_CONVERTERS: Converters = {
    "model": str,
    "trust_remote_code": parse_bool,
    "deploy_config": str,
    "ref_audio": str,
    "auto_response": parse_bool,
    "control_timeout_s": float,
    "max_sessions": int,
}
