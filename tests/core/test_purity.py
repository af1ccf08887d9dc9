"""The core stays sans-io: no event loop, network, clock, threads or model runtime.

Two independent checks, each shown to fail on a planted violation:

* a static one walks every module's syntax tree for import statements and dynamic imports;
* a dynamic one imports the package in a fresh interpreter with ``builtins.__import__``
  wrapped, so it sees every import statement the core executes, even of a module the
  interpreter had loaded already (``time`` is loaded at start-up, ``threading`` by protobuf),
  and also lists forbidden modules that appeared in ``sys.modules`` as a consequence.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import omni_grpc.core

FORBIDDEN = frozenset(
    {
        "asyncio",
        "grpc",
        "aiohttp",
        "numpy",
        "torch",
        "socket",
        "threading",
        "time",
        "selectors",
        "vllm",
        "onnxruntime",
    }
)
CORE_DIR = Path(omni_grpc.core.__file__).resolve().parent
REPO_ROOT = CORE_DIR.parents[1]


def static_violations(package_dir: Path) -> list[str]:
    """``file:line: module`` for each forbidden import found in the package's sources."""
    found = []
    for path in sorted(package_dir.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.Call) and _is_dynamic_import(node.func):
                # importlib.import_module("x") / __import__("x") would dodge the statement scan.
                names = [f"<dynamic import: {ast.unparse(node)}>"]
            for name in names:
                top = name.split(".")[0]
                if top in FORBIDDEN or name.startswith("<dynamic"):
                    found.append(f"{path.name}:{getattr(node, 'lineno', 0)}: {name}")
    return found


def _is_dynamic_import(func: ast.expr) -> bool:
    if isinstance(func, ast.Name):
        return func.id == "__import__"
    return isinstance(func, ast.Attribute) and func.attr == "import_module"


# Runs in a fresh interpreter: argv[1] is the package, argv[2] a directory to put on sys.path.
_PROBE = textwrap.dedent("""
    import builtins, importlib, json, pkgutil, sys
    package, path_entry = sys.argv[1], sys.argv[2]
    sys.path.insert(0, path_entry)
    forbidden = set(json.loads(sys.argv[3]))
    import omni_grpc.wire  # the shared vocabulary and generated messages, which the core may use
    baseline = set(sys.modules)
    executed = []
    real_import = builtins.__import__

    def spy(name, globals=None, locals=None, fromlist=(), level=0):
        importer = (globals or {}).get("__name__", "")
        if level == 0 and (importer == package or importer.startswith(package + ".")):
            executed.append([importer, name])
        return real_import(name, globals, locals, fromlist, level)

    builtins.__import__ = spy
    root = importlib.import_module(package)
    for info in pkgutil.walk_packages(root.__path__, package + "."):
        importlib.import_module(info.name)
    builtins.__import__ = real_import
    direct = sorted({f"{who} imports {name}" for who, name in executed
                     if name.split(".")[0] in forbidden})
    loaded = sorted({m for m in set(sys.modules) - baseline if m.split(".")[0] in forbidden})
    # Absolute, not against the baseline: an event loop, a network stack or a model runtime
    # must be absent from the whole interpreter, whoever would have pulled it in.
    heavy = sorted(m for m in forbidden - {"time", "threading"} if m in sys.modules)
    print(json.dumps({"direct": direct, "loaded": loaded, "heavy": heavy}))
""")


def dynamic_violations(package: str, path_entry: Path) -> dict[str, list[str]]:
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, package, str(path_entry), json.dumps(sorted(FORBIDDEN))],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO_ROOT,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    report: dict[str, list[str]] = json.loads(result.stdout)
    return report


def test_core_sources_import_nothing_forbidden() -> None:
    assert static_violations(CORE_DIR) == []


def test_every_core_module_is_scanned() -> None:
    # The scan must see the modules that matter, or an empty result proves nothing.
    scanned = {path.name for path in CORE_DIR.rglob("*.py")}
    assert {
        "session.py",
        "admission.py",
        "responses.py",
        "delivery.py",
        "registry.py",
        "journal.py",
        "credentials.py",
    } <= scanned


@pytest.mark.subprocess
def test_importing_the_core_executes_and_loads_nothing_forbidden() -> None:
    report = dynamic_violations("omni_grpc.core", REPO_ROOT)
    assert report == {"direct": [], "loaded": [], "heavy": []}


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    """A package with the mistakes the checks exist to catch."""
    package = tmp_path / "plantedcore"
    package.mkdir()
    (package / "__init__.py").write_text("from plantedcore import clocked, looped\n")
    # `time` is already loaded when the interpreter starts, so only the spy can see this one.
    (package / "clocked.py").write_text("import time\n")
    (package / "looped.py").write_text("from asyncio import sleep\nimport selectors\n")
    (package / "sneaky.py").write_text("import importlib\nimportlib.import_module('numpy')\n")
    return tmp_path


def test_static_check_catches_planted_imports(planted: Path) -> None:
    assert static_violations(planted / "plantedcore") == [
        "clocked.py:1: time",
        "looped.py:1: asyncio",
        "looped.py:2: selectors",
        "sneaky.py:2: <dynamic import: importlib.import_module('numpy')>",
    ]


@pytest.mark.subprocess
def test_dynamic_check_catches_planted_imports(planted: Path) -> None:
    (planted / "plantedcore" / "sneaky.py").unlink()  # numpy may not be importable everywhere
    report = dynamic_violations("plantedcore", planted)
    assert report["direct"] == [
        "plantedcore.clocked imports time",
        "plantedcore.looped imports asyncio",
        "plantedcore.looped imports selectors",
    ]
    assert "asyncio" in report["loaded"]
    assert {"asyncio", "selectors"} <= set(report["heavy"])
