"""What every tier shares: the one started server, and the sorting of tests into tiers.

**One server.** ``server`` is a real gRPC server on a free port (tests/serving.py), stopped
after the test. It starts with the ``server_settings`` fixture on the ``server_clock``
fixture; a tier, a module or a test overrides either where it differs (a key, a limit, TLS,
a clock it moves by hand), by defining a fixture of that name or by parametrizing it.

**Tiers.** A test that starts another process (a tool, the CLI, a client in another
language, a browser, a cluster, Redis) is marked ``subprocess``; one that loads a speech or
language model is marked ``model``. ``scripts/test --fast`` runs every test marked neither
(nor ``browser`` nor ``vllm``). The marks come from what a test uses, not from a list of
tests:

* a fixture that starts a process or loads a model says so with :func:`starts_processes` or
  :func:`loads_models`, and every test that uses it, however indirectly, gets the mark;
* a tier whose every test does (tests/cluster, tests/clients, tests/embedded) gets it by its
  folder, a module whose tests do by its ``pytestmark``; ``browser`` implies ``subprocess``
  and ``vllm`` implies ``model``.

**Workers.** Under pytest-xdist (``scripts/test`` runs ``-n 2 --dist loadgroup``) each test
file is one group, run on one worker in its own order, as it runs alone; so are the tiers that
share something across files (:data:`SHARED_GROUPS`: one cluster, one build, one ``npm ci``,
one browser), each as one group. The groups that load models or start processes go first.

And a guard holds the fast tier true: while a test marked neither runs (its fixtures
included), starting a process or loading one of the embedded engine's models fails it. So a
test added later that starts a process cannot slip into the fast tier unnoticed: it fails, in
the fast tier and in the full run, saying which mark it needs.
"""

from __future__ import annotations

import importlib
import multiprocessing.process
import os
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from omni_grpc.server.app import RunningServer
from omni_grpc.server.settings import ServerSettings
from tests.serving import serving, settings

F = TypeVar("F", bound=Callable[..., Any])
TESTS = Path(__file__).resolve().parent
# Tiers whose every test starts processes or loads models, by folder under tests/.
FOLDER_MARKS = {
    "cluster": ("subprocess",),
    "clients": ("subprocess",),
    "embedded": ("subprocess", "model"),
    "vllm": ("subprocess", "model"),
}
# Marks that imply others.
IMPLIED = {"browser": ("subprocess",), "vllm": ("model",)}
# Fixtures and tests of tests/bridge, by name (it keeps its own files, so they are named
# here): the speech fixture runs espeak-ng; these tests start Redis, a second bridge process,
# or the embedded engine.
FOREIGN_FIXTURES = {("bridge", "speech"): ("subprocess",)}
FOREIGN_TESTS = {
    ("bridge", "test_a_resume_waits_out_the_store_and_gets_the_real_answer"): ("subprocess",),
    ("bridge", "test_two_processes_share_the_port_and_both_carry_sessions"): ("subprocess",),
    ("bridge", "test_the_embedded_engine_sends_words_before_the_turn_ends"): (
        "subprocess",
        "model",
    ),
}
_MARKS = "omni_tier_marks"
# What tests share across files, each kept to one worker: tests/cluster one cluster (its files
# run in order: a later one kills a replica); tests/clients the Go build (build/go), the Node
# packages and their cluster; the benchmarks the machine's CPUs; browser tests one Chromium;
# the bridge's agents tests the one npm ci of tests/bridge/node. (tests/embedded shares only
# its loaded engine, which a worker loads once for all the files it gets.)
SHARED_GROUPS = {"cluster": "cluster", "clients": "clients", "bench": "bench"}
SHARED_BY_MARK = {"browser": "browser"}
SHARED_BY_FIXTURE = {"agents_client": "agents-node"}
# Processes that libraries start on their own, which no test means to: ctypes.util.find_library
# asks ldconfig where the C library is (the server does, once per start).
# platform.processor() asks uname (the OpenAI SDK's request headers do, once per process).
ALLOWED = frozenset({"starts a process (/sbin/ldconfig -p)", "starts a process (uname -p)"})


def starts_processes(fixture: F) -> F:
    """Says that a fixture starts another process: every test that uses it is marked
    ``subprocess``. Put it under ``@pytest.fixture``."""
    setattr(fixture, _MARKS, (*getattr(fixture, _MARKS, ()), "subprocess"))
    return fixture


def loads_models(fixture: F) -> F:
    """Says that a fixture loads a model: every test that uses it is marked ``model`` (and
    ``subprocess``: the embedded engine speaks with espeak-ng). Put it under
    ``@pytest.fixture``."""
    setattr(fixture, _MARKS, (*getattr(fixture, _MARKS, ()), "model", "subprocess"))
    return fixture


# -- the one server ------------------------------------------------------------------------


@pytest.fixture
def server_settings() -> ServerSettings:
    """What ``server`` starts with: ``settings()``, the loopback engine at fast pace."""
    return settings()


@pytest.fixture
def server_clock() -> Callable[[], float]:
    """What ``server`` measures session deadlines on."""
    return time.monotonic


@pytest.fixture
async def server(
    server_settings: ServerSettings, server_clock: Callable[[], float]
) -> AsyncIterator[RunningServer]:
    """A started server on a free port, stopped after the test."""
    async with serving(server_settings, clock=server_clock) as running:
        yield running


# -- the tiers -----------------------------------------------------------------------------


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "subprocess: starts another process (a tool, the CLI, another language's client, a "
        "browser, a cluster); not in scripts/test --fast",
    )
    config.addinivalue_line(
        "markers", "model: loads a speech or language model; not in scripts/test --fast"
    )


def _fixture_marks(item: pytest.Item) -> set[str]:
    marks: set[str] = set()
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return marks
    for name, definitions in info.name2fixturedefs.items():
        for definition in definitions:
            marks.update(getattr(definition.func, _MARKS, ()))
            where = Path(definition.baseid.split("::")[0] or ".").parts[1:2]
            marks.update(FOREIGN_FIXTURES.get((where[0] if where else "", name), ()))
    return marks


def tier_marks(item: pytest.Item) -> set[str]:
    """The marks ``item`` gets from its folder, its fixtures and its other marks."""
    marks = _fixture_marks(item)
    relative = Path(str(item.path)).resolve().relative_to(TESTS)
    folder = relative.parts[0] if len(relative.parts) > 1 else ""
    marks.update(FOLDER_MARKS.get(folder, ()))
    name = getattr(item, "originalname", item.name)
    marks.update(FOREIGN_TESTS.get((folder, name), ()))
    own = {mark.name for mark in item.iter_markers()}
    for name in own | marks:
        marks.update(IMPLIED.get(name, ()))
    return marks - own


def worker_group(item: pytest.Item) -> str:
    """The xdist group of ``item``: what it shares with tests of other files, else its file."""
    relative = Path(str(item.path)).resolve().relative_to(TESTS)
    if len(relative.parts) > 1 and relative.parts[0] in SHARED_GROUPS:
        return SHARED_GROUPS[relative.parts[0]]
    for mark, group in SHARED_BY_MARK.items():
        if item.get_closest_marker(mark) is not None:
            return group
    for fixture, group in SHARED_BY_FIXTURE.items():
        if fixture in getattr(item, "fixturenames", ()):
            return group
    return relative.as_posix()


def _heavy_first(item: pytest.Item) -> int:
    """Tests that load models, then those that start processes, then the rest: on workers
    the long groups start first and the many short ones fill in at the end."""
    if item.get_closest_marker("model") is not None:
        return 0
    return 1 if item.get_closest_marker("subprocess") is not None else 2


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    workers = config.pluginmanager.hasplugin("xdist")
    for item in items:
        for name in sorted(tier_marks(item)):
            item.add_marker(name)
        if workers and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(worker_group(item)))
    if hasattr(config, "workerinput"):  # an xdist worker, whose order the scheduler takes
        items.sort(key=_heavy_first)  # stable: each file and group keeps its own order


# -- the guard -----------------------------------------------------------------------------


class _Guard:
    """Fails a test that starts a process or loads a model without the mark that says so."""

    def __init__(self) -> None:
        self.item: pytest.Item | None = None
        self.caught: list[str] = []

    def check(self, mark: str, what: str) -> None:
        item = self.item
        if item is None or what in ALLOWED or any(item.iter_markers("subprocess")):
            return
        if any(item.iter_markers("model")):  # out of the fast tier already
            return
        decorator = "starts_processes" if mark == "subprocess" else "loads_models"
        message = (
            f"{item.nodeid} {what} but is not marked {mark!r}: mark the test "
            f"(@pytest.mark.{mark}, or the module's pytestmark), or decorate the fixture that "
            f"does it with tests.conftest.{decorator}"
        )
        self.caught.append(message)
        raise UnmarkedTierError(message)


class UnmarkedTierError(RuntimeError):
    """A test started a process or loaded a model without saying so."""


_GUARD = _Guard()


def _guarded(owner: Any, attribute: str, mark: str, what: Callable[..., str]) -> None:
    original = getattr(owner, attribute)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        _GUARD.check(mark, what(*args, **kwargs))
        return original(*args, **kwargs)

    wrapper.__wrapped__ = original  # type: ignore[attr-defined]
    setattr(owner, attribute, wrapper)


def _command(args: Any) -> str:
    return " ".join(map(str, args)) if isinstance(args, list | tuple) else str(args)


def _popen(self: subprocess.Popen[Any], args: Any, *rest: Any, **options: Any) -> str:
    return f"starts a process ({_command(args)[:80]})"


def _install_guard() -> None:
    _guarded(subprocess.Popen, "__init__", "subprocess", _popen)
    # asyncio starts its processes through Popen; multiprocessing through these.
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp"):
        if hasattr(os, name):
            _guarded(os, name, "subprocess", lambda *a, _n=name, **k: f"calls os.{_n}")
    _guarded(
        multiprocessing.process.BaseProcess, "start", "subprocess", lambda *a: "starts a process"
    )
    # The embedded engine's models: Whisper (faster-whisper), Silero VAD and the Piper voice
    # (onnxruntime), SmolLM2 (our GGUF reader).
    for module, name in (
        ("faster_whisper", "WhisperModel"),
        ("onnxruntime", "InferenceSession"),
        ("omni_grpc.engine.embedded.gguf_file", "GgufFile"),
    ):
        try:
            owner = getattr(importlib.import_module(module), name)
        except ImportError:  # an environment without it (the vLLM tier's) loads none
            continue
        _guarded(owner, "__init__", "model", lambda *a, _n=name, **k: f"loads {_n}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    _GUARD.item, _GUARD.caught = item, []
    try:
        return (yield)
    finally:
        _GUARD.item = None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Iterator[pytest.TestReport]:
    report: pytest.TestReport = yield
    if _GUARD.caught and _GUARD.item is item:
        if report.passed:  # caught even where the code under test swallowed the error
            report.outcome = "failed"
            report.longrepr = "\n".join(_GUARD.caught)
        _GUARD.caught = []  # told once, in the phase that did it
    return report


_install_guard()
