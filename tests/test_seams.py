"""Two seams held by reading the source: typed engine commands, and no method replaced.

* Engines take the core's typed commands (``omni_grpc.core.commands``): no module under
  ``omni_grpc/engine/`` names the protobuf request or one of its command messages, or asks a
  message which ``oneof`` field it holds (``WhichOneof``): the core read that once.
* Nothing replaces a method of another object: observers register through the seams made for
  them (the session host's taps, the worker's ``handler_meter``) instead of wrapping a method
  on an instance or a class. An assignment to ``obj.name`` where ``name`` is a method defined
  in the packages, and ``setattr`` on one of the packages' classes, are refused outside
  ``self``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from omni_grpc.wire import pb

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("omni_grpc", "bridge", "omni_cli")
_COMMAND = pb.ConverseRequest.DESCRIPTOR.oneofs_by_name["command"]
# The request and every message of its ``command`` oneof.
REQUEST_TYPES = frozenset(
    {"ConverseRequest", *(field.message_type.name for field in _COMMAND.fields)}
)


# Where the generated types are imported from, and the names they are used through.
GENERATED = frozenset({"omni_grpc.wire.pb", "omni_grpc.gen.omni.duplex.v1.duplex_pb2"})
GENERATED_NAMES = frozenset({"pb", "duplex_pb2"})


def _generated(node: ast.Attribute) -> bool:
    return isinstance(node.value, ast.Name) and node.value.id in GENERATED_NAMES


def _modules(*packages: str) -> Iterator[tuple[str, ast.Module]]:
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "gen" in path.relative_to(ROOT).parts:
                continue  # generated code
            yield str(path.relative_to(ROOT)), ast.parse(path.read_text(), str(path))


def request_uses(tree: ast.Module) -> list[str]:
    """Where a module names a request type or calls ``WhichOneof``, as ``line: what``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in REQUEST_TYPES and _generated(node):
            found.append(f"{node.lineno}: {node.attr}")
        elif isinstance(node, ast.ImportFrom) and node.module in GENERATED:
            found += [f"{node.lineno}: {a.name}" for a in node.names if a.name in REQUEST_TYPES]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "WhichOneof"
        ):
            found.append(f"{node.lineno}: WhichOneof")
    return found


def method_names(trees: list[ast.Module]) -> tuple[frozenset[str], frozenset[str]]:
    """The names of the methods and of the classes defined in ``trees`` (module functions
    count as methods: either may be put in the place of a method)."""
    methods, classes = set(), set()
    for tree in trees:
        methods.update(
            node.name
            for node in tree.body
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        )
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                classes.add(node.name)
                methods.update(
                    item.name
                    for item in node.body
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
                )
    # A name that is a field somewhere too (``event_id``: a method of one class, a field of
    # others) says nothing of what is assigned to it.
    fields = {
        target.attr if isinstance(target, ast.Attribute) else target.id
        for tree in trees
        for node in ast.walk(tree)
        for target in _field_targets(node)
    }
    return frozenset(methods - fields), frozenset(classes)


def _field_targets(node: ast.AST) -> list[ast.Attribute | ast.Name]:
    """Fields a node declares: ``name: type`` in a class body, or ``self.name = ...``."""
    if isinstance(node, ast.ClassDef):
        return [
            item.target
            for item in node.body
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
        ]
    if isinstance(node, ast.Assign | ast.AnnAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return [t for t in targets if isinstance(t, ast.Attribute) and _own(t.value)]
    return []


def _own(target: ast.expr) -> bool:
    return isinstance(target, ast.Name) and target.id in ("self", "cls")


def _a_function(value: ast.expr | None, methods: frozenset[str]) -> bool:
    """Whether ``value`` is, by its look, a function: a lambda, a method or function of the
    packages named, or a call that wraps one (``wrap(host.receive)``)."""
    if isinstance(value, ast.Lambda):
        return True
    if isinstance(value, ast.Name):
        return value.id in methods
    if isinstance(value, ast.Attribute):
        return value.attr in methods
    if isinstance(value, ast.Call):
        return any(_a_function(arg, methods) for arg in value.args)
    return False


def method_assignments(
    tree: ast.Module, methods: frozenset[str], classes: frozenset[str]
) -> list[str]:
    """Where a module replaces a method of another object, as ``line: what``."""
    found = []
    # What a function may be assigned from: the packages' methods, and any function of this
    # module, nested ones included (a wrapper is usually one).
    functions = methods | {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AnnAssign | ast.AugAssign):
            targets = [node.target]
        value = getattr(node, "value", None)
        for target in targets:
            if (
                isinstance(target, ast.Attribute)
                and target.attr in methods
                and not _own(target.value)
                and _a_function(value, functions)
            ):
                found.append(f"{node.lineno}: {ast.unparse(target)}")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "setattr"
            and node.args
            and isinstance(node.args[0], ast.Name)
            and node.args[0].id in classes
        ):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_engine_module_reads_a_request() -> None:
    found = {
        name: uses for name, tree in _modules("omni_grpc/engine") if (uses := request_uses(tree))
    }
    assert found == {}


def test_no_module_replaces_a_method_of_another_object() -> None:
    modules = list(_modules(*PACKAGES))
    methods, classes = method_names([tree for _, tree in modules])
    found = {
        name: hits for name, tree in modules if (hits := method_assignments(tree, methods, classes))
    }
    assert found == {}


def test_the_checks_find_what_they_look_for() -> None:
    # The checks themselves, on planted source: each kind of breach is found, and the
    # lawful forms next to them are not.
    planted = ast.parse(
        "def f(request, host, Session):\n"
        "    kind = request.WhichOneof('command')\n"
        "    append = pb.AppendInputAudio()\n"
        "    event = pb.ConverseResponse()\n"
        "    host.receive = wrap(host.receive)\n"
        "    setattr(Session, 'publish', wrap)\n"
        "    host.engine = None\n"
        "    host.receive_count = 0\n"
        "    host.publish = 3\n"
        "class Session:\n"
        "    def publish(self): self.publish = None\n"
        "    def receive(self): pass\n"
        "def wrap(method): return method\n"
    )
    assert request_uses(planted) == ["2: WhichOneof", "3: AppendInputAudio"]
    methods, classes = method_names([planted])
    assert method_assignments(planted, methods, classes) == [
        "5: host.receive",
        "6: setattr(Session, 'publish', wrap)",
    ]
