"""Engines behind the one seam of :mod:`omni_grpc.engine.base`, chosen by name.

Each engine is a package of its own (``loopback``, ``embedded``, ``vllm``, ``vllm_omni``) that
holds only what is its own; what their sessions share is in :mod:`omni_grpc.engine.kit`, and
no engine imports another.

:func:`create_engine` imports an engine's module only when that engine is asked for, so a
server running ``loopback`` never imports a model runtime (torch, vLLM), and a missing runtime
only matters to the engine that needs it. Every engine class takes its options as one
``dict[str, str]`` (from the command line or settings) and raises ValueError for an option it
does not know or a value it cannot use.
"""

from __future__ import annotations

import importlib

from omni_grpc.engine.base import Engine, EngineError, EngineSession

# name -> (module, class). Add an engine here with one line; the module is imported on use.
_ENGINES: dict[str, tuple[str, str]] = {
    "loopback": ("omni_grpc.engine.loopback", "LoopbackEngine"),
    "embedded": ("omni_grpc.engine.embedded", "EmbeddedEngine"),
    "vllm": ("omni_grpc.engine.vllm", "VllmEngine"),
    "vllm-omni": ("omni_grpc.engine.vllm_omni", "VllmOmniEngine"),
}


def known_engines() -> tuple[str, ...]:
    """The names :func:`create_engine` accepts, sorted."""
    return tuple(sorted(_ENGINES))


def create_engine(name: str, options: dict[str, str]) -> Engine:
    """Builds the engine called ``name`` with ``options``; not yet started.

    Raises ValueError for an unknown name (listing the known ones) or bad options.
    """
    try:
        module_name, class_name = _ENGINES[name]
    except KeyError:
        raise ValueError(
            f"unknown engine {name!r}; known engines: {', '.join(known_engines())}"
        ) from None
    engine_class = getattr(importlib.import_module(module_name), class_name)
    engine = engine_class(dict(options))
    if not isinstance(engine, Engine):
        raise TypeError(f"{module_name}.{class_name} is not an Engine")
    return engine


__all__ = [
    "Engine",
    "EngineError",
    "EngineSession",
    "create_engine",
    "known_engines",
]
