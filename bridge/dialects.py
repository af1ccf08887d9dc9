"""Which dialect a connection speaks: the one place in the bridge that names the dialects.

* ``openai``: OpenAI's Realtime API (GA names, beta spellings accepted), on ``/v1/realtime``;
  :mod:`bridge.realtime`.
* ``vllm-omni``: vLLM-Omni's dialect, on ``/v1/duplex`` and on ``/v1/realtime?duplex=1`` (the
  URL vLLM-Omni's clients build), so its clients work unchanged; :mod:`bridge.vllm_omni`.

Everything else in the bridge sees a connection's dialect only as a
:class:`bridge.dialect.Dialect` (``.importlinter`` holds that). The map of every contract
command and event to its JSON events in each dialect is ``docs/dialects.md``, generated from
the dialects by ``scripts/dialect_map.py``.
"""

from __future__ import annotations

from collections.abc import Mapping

from bridge.dialect import Dialect
from bridge.realtime.dialect import minted_config, openai_dialect
from bridge.vllm_omni.dialect import vllm_omni_dialect

OPENAI = "openai"
VLLM_OMNI = "vllm-omni"
# The reference's wire names for its endpoint: the path, and the query its clients add.
VLLM_OMNI_PATH = "/v1/duplex"
VLLM_OMNI_QUERY = "duplex"
_TRUE = frozenset({"1", "true", "yes", "on"})


def dialect_name(path: str, query: Mapping[str, str]) -> str:
    """The dialect of a connection to ``path`` with ``query``."""
    if path == VLLM_OMNI_PATH or query.get(VLLM_OMNI_QUERY, "").lower() in _TRUE:
        return VLLM_OMNI
    return OPENAI


# What a client secret's ``session`` becomes: OpenAI's, whose endpoint mints them.
secret_session_config = minted_config


def make_dialect(name: str, *, max_audio_delta_bytes: int, extensions: bool = False) -> Dialect:
    """A fresh dialect (its outbound half holds one session's state); ``extensions`` says
    whether an OpenAI-dialect client asked for the duplex extensions."""
    if name == VLLM_OMNI:
        return vllm_omni_dialect(max_audio_delta_bytes=max_audio_delta_bytes)
    return openai_dialect(max_audio_delta_bytes=max_audio_delta_bytes, extensions=extensions)
