"""The error codes are a closed set: the proto's list, the Python set and the code all agree.

``ErrorReport.code`` in the proto lists every code with its meaning; ``ERROR_CODES`` is the same
list in Python. The scan reads every module of the service and the bridge (not the generated
code) and finds each place an error is made: the code argument of ``CommandError``,
``StreamRefused``, the bridge's ``DialectError``, ``Refusal`` and ``error_json``, and ``code=``
of an ``ErrorReport``. A literal there must be in the set; a code computed from something else is
allowed only at the places listed in ``_FORWARDED``, whose sources are checked one by one below.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from bridge import stream_ends
from bridge.errors import BRIDGE_ERROR_CODES, RATE_LIMIT_CODE
from omni_grpc.core import admission, rate_limits
from omni_grpc.core.errors import RATE_LIMIT_CODES, SERVER_CODES
from omni_grpc.engine.vllm.session import Failure
from omni_grpc.wire.error_codes import ERROR_CODES, known_code

ROOT = Path(__file__).resolve().parent.parent
PROTO = ROOT / "proto" / "omni" / "duplex" / "v1" / "duplex.proto"
SOURCES = ("omni_grpc", "bridge", "omni_cli")
GENERATED = ROOT / "omni_grpc" / "gen"

# Callee name -> index of its code argument.
_MAKERS = {
    "CommandError": 0,
    "StreamRefused": 1,
    "DialectError": 0,
    "Refusal": 0,
    "error_json": 0,
}
# The module whose local helper wraps CommandError with the code first.
_WRAPPERS = {("omni_grpc/core/config.py", "_refuse"): 0}
# Code arguments that are not literals, by (module, source text), and why each is safe.
_FORWARDED = {
    # _refuse(code, ...) builds the error; its callers' literals are scanned as makers.
    ("omni_grpc/core/config.py", "code"): "the _refuse helper",
    # A CommandError re-raised as a StreamRefused keeps its (scanned) code.
    ("omni_grpc/core/registry.py", "error.code"): "re-raise",
    # HANDSHAKE_REFUSALS values, checked below.
    ("omni_grpc/core/admission.py", "HANDSHAKE_REFUSALS[kind]"): "constant",
    # RATE_LIMIT_CODE, checked below.
    ("omni_grpc/core/rate_limits.py", "RATE_LIMIT_CODE"): "constant",
    # Failure's codes, checked below.
    ("omni_grpc/engine/vllm/session.py", "code"): "Failure enum",
    # The reference engine's code after known_code(), which maps it into the set.
    ("omni_grpc/engine/vllm_omni/events.py", "ours"): "known_code",
    # A DialectError told as a Refusal keeps its (scanned) code.
    ("bridge/errors.py", "self.code"): "re-tell",
    # A Refusal rendered as JSON keeps its (scanned) code.
    ("bridge/realtime/server_events.py", "refusal.code"): "re-render",
    # A stream's end: the service's code, or the bridge's own tables, checked below.
    ("bridge/stream_ends.py", "code"): "status_refusal",
    # CommandError.to_error renders its own (scanned) code.
    ("omni_grpc/core/errors.py", "self.code"): "render",
}


def proto_codes() -> dict[str, str]:
    """The ``code`` list in the comment of ``ErrorReport.code``: code -> meaning."""
    text = PROTO.read_text()
    body = text[text.index("message ErrorReport {") :]
    comment = body[: body.index("string code = 1;")]
    found = re.findall(r"^\s*// \* `([a-z_]+)`: (.+)\.$", comment, flags=re.MULTILINE)
    return dict(found)


def modules() -> list[Path]:
    return sorted(
        path
        for top in SOURCES
        for path in (ROOT / top).rglob("*.py")
        if GENERATED not in path.parents
    )


def _callee(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def code_arguments(path: Path) -> list[ast.expr]:
    """Every expression passed as an error code in ``path``."""
    rel = path.relative_to(ROOT).as_posix()
    found: list[ast.expr] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        name = _callee(node)
        index = _MAKERS.get(name, _WRAPPERS.get((rel, name)))
        if name == "ErrorReport" or index is not None:
            keyword = [k.value for k in node.keywords if k.arg == "code"]
            if keyword:
                found.extend(keyword)
            elif index is not None and len(node.args) > index:
                found.append(node.args[index])
    return found


def scan() -> tuple[dict[str, set[str]], set[tuple[str, str]]]:
    """(literal code -> modules using it, the non-literal code arguments by module)."""
    literals: dict[str, set[str]] = {}
    computed: set[tuple[str, str]] = set()
    for path in modules():
        rel = path.relative_to(ROOT).as_posix()
        for arg in code_arguments(path):
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                literals.setdefault(arg.value, set()).add(rel)
            else:
                computed.add((rel, ast.unparse(arg)))
    return literals, computed


def test_the_proto_lists_exactly_the_python_codes_with_the_same_meanings() -> None:
    listed = proto_codes()
    assert listed, "no code list found in the comment of ErrorReport.code"
    assert set(listed) == set(ERROR_CODES), (
        f"only in the proto: {sorted(set(listed) - set(ERROR_CODES))}; "
        f"only in error_codes.py: {sorted(set(ERROR_CODES) - set(listed))}"
    )
    assert listed == ERROR_CODES


def test_every_literal_code_in_the_code_is_in_the_closed_set() -> None:
    literals, _ = scan()
    assert "client_seq_gap" in literals and "invalid_json" in literals  # the scan sees both
    service = {code: where for code, where in literals.items() if code not in BRIDGE_ERROR_CODES}
    unknown = {code: sorted(where) for code, where in service.items() if code not in ERROR_CODES}
    assert not unknown, f"codes not in omni_grpc/wire/error_codes.py: {unknown}"
    in_service = {
        code: sorted(where)
        for code, where in literals.items()
        if code in BRIDGE_ERROR_CODES and not all(w.startswith("bridge/") for w in where)
    }
    assert not in_service, f"the service uses bridge-only codes: {in_service}"


def test_every_computed_code_is_a_known_forwarding_place() -> None:
    _, computed = scan()
    assert computed == set(_FORWARDED), (
        f"unchecked computed codes: {sorted(computed - set(_FORWARDED))}; "
        f"stale entries: {sorted(set(_FORWARDED) - computed)}"
    )


def test_the_forwarded_sources_are_in_the_set() -> None:
    assert set(admission.HANDSHAKE_REFUSALS.values()) <= set(ERROR_CODES)
    assert rate_limits.RATE_LIMIT_CODE in ERROR_CODES
    assert RATE_LIMIT_CODE == rate_limits.RATE_LIMIT_CODE
    assert {failure.value[0] for failure in Failure} <= set(ERROR_CODES)
    ends = {*stream_ends._DIALECT_CODES.values(), *stream_ends._FALLBACK_CODES.values()}
    assert ends | {"stream_failed"} <= set(BRIDGE_ERROR_CODES)
    classified = RATE_LIMIT_CODES | SERVER_CODES
    assert classified <= set(ERROR_CODES)


@pytest.mark.parametrize(
    ("given", "expected"),
    [("response_already_active", "response_already_active"), ("busy", "engine_error")],
)
def test_known_code_maps_foreign_codes_into_the_set(given: str, expected: str) -> None:
    assert known_code(given) == expected


def test_the_bridge_adds_codes_without_redefining_the_services() -> None:
    assert not set(BRIDGE_ERROR_CODES) & set(ERROR_CODES)
