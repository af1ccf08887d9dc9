"""No module imports, at any depth, a module that imports it back.

A cycle means a file doing two jobs (the review found three: a secret store and its HTTP
handler, a worker pool and the child's entry point, metric definitions and a scrape-time walk
over hosts). The import graph is grimp's (the library import-linter is built on), with the
imports made only for type checking counted too: they tie two files together for a reader as
much as any other.
"""

from __future__ import annotations

import grimp

PACKAGES = ("omni_grpc", "bridge", "omni_cli")


def cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Every cycle through a direct import, as the chain from the importer back to itself."""
    found = []
    for module in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            back = graph.find_shortest_chain(importer=imported, imported=module)
            if back is not None:
                found.append([module, *back])
    return found


def test_no_module_imports_a_module_that_imports_it_back() -> None:
    graph = grimp.build_graph(*PACKAGES)
    assert cycles(graph) == []


def test_a_cycle_is_found_at_any_depth() -> None:
    # The check itself, on a planted graph: a imports b, b imports c, c imports a.
    graph = grimp.ImportGraph()
    for module in ("pkg", "pkg.a", "pkg.b", "pkg.c", "pkg.d"):
        graph.add_module(module)
    graph.add_import(importer="pkg.a", imported="pkg.b")
    graph.add_import(importer="pkg.b", imported="pkg.c")
    graph.add_import(importer="pkg.c", imported="pkg.a")
    graph.add_import(importer="pkg.d", imported="pkg.a")  # imports into the cycle: not one
    assert cycles(graph) == [
        ["pkg.a", "pkg.b", "pkg.c", "pkg.a"],
        ["pkg.b", "pkg.c", "pkg.a", "pkg.b"],
        ["pkg.c", "pkg.a", "pkg.b", "pkg.c"],
    ]
