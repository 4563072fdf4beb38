"""Import cycles among this repository's Python files: no file may import one that imports it back.

Reads every ``*.py`` file of the source roots below (the runtime package, the certifier, the
catalog and each environment under envs/) with :mod:`ast`, draws one edge per import statement
wherever it stands (a function-level import closes a circle as surely as a top-level one, and so
does one under ``if TYPE_CHECKING:``: neither file of such a pair can be read, type-checked or
changed alone), and reports every strongly
connected component of more than one file. An import of ``a.b`` that names a module reaches that
module's file (``a/b.py`` or ``a/b/__init__.py``), not its parent packages: a package's
``__init__`` re-exporting its children would otherwise join everything into one circle.

``make lint`` runs it: it exits 1 when a component exists that is not listed in ``EXEMPT``
(each entry named, with the reason it is still there) and prints every component found.
``--all`` prints the components with the exemptions ignored.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: The directories that hold importable packages (their children are top-level packages).
SOURCE_ROOTS: tuple[str, ...] = (
    "python/src",
    "conformance/src",
    "catalog/src",
    *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "envs").glob("*/src")),
)

#: Components still present that are being removed elsewhere, each named by its sorted modules.
#: An entry that no longer matches a component is reported, so that the list only shrinks.
EXEMPT: dict[frozenset[str], str] = {}


def _modules(roots: Iterable[Path]) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            rel = path.relative_to(root).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts.pop()
            if parts and all(p.isidentifier() for p in parts):
                found.setdefault(".".join(parts), path)
    return found


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node


def import_graph(roots: Iterable[Path]) -> dict[str, set[str]]:
    """Each module of ``roots`` and the modules of ``roots`` it imports (see the module docstring)."""
    mods = _modules(roots)
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        is_pkg = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in _imports(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    pkg = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    pkg = pkg[: len(pkg) - (node.level - 1)]
                    base = ".".join([*pkg, base] if base else pkg)
                for a in node.names:
                    sub = f"{base}.{a.name}" if base else a.name
                    targets.append(sub if sub in mods else base)
            for t in targets:
                # The deepest module of ours the dotted name reaches.
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                if t and t != mod:
                    graph[mod].add(t)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on: set[str] = set()
    stack: list[str] = []
    out: list[frozenset[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            node, it = work[-1]
            advanced = False
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    advanced = True
                    break
                if nxt in on:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp: set[str] = set()
                while True:
                    m = stack.pop()
                    on.discard(m)
                    comp.add(m)
                    if m == node:
                        break
                if len(comp) > 1:
                    out.append(frozenset(comp))
    return sorted(out, key=lambda c: sorted(c))


def _describe(comp: frozenset[str], graph: dict[str, set[str]]) -> str:
    edges = [f"    {a} -> {b}" for a in sorted(comp) for b in sorted(graph[a] & comp)]
    return f"  {len(comp)} modules: {', '.join(sorted(comp))}\n" + "\n".join(edges)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--all", action="store_true", help="ignore the exemptions")
    ap.add_argument("roots", nargs="*", help="source roots (default: this repository's)")
    args = ap.parse_args(argv)
    roots = [Path(r) for r in args.roots] if args.roots else [ROOT / r for r in SOURCE_ROOTS]
    graph = import_graph(r for r in roots if r.is_dir())
    found = cycles(graph)
    exempt = {} if args.all or args.roots else EXEMPT
    bad = [c for c in found if c not in exempt]
    stale = [c for c in exempt if c not in found]
    for c in found:
        tag = f"exempt ({exempt[c]})" if c in exempt else "CYCLE"
        print(f"{tag}:\n{_describe(c, graph)}")
    for c in stale:
        print(f"stale exemption (no such cycle any more; remove it from EXEMPT): {', '.join(sorted(c))}")
    print(f"{len(graph)} modules, {len(found)} import cycles ({len(bad)} not exempt)")
    return 1 if bad or stale else 0


if __name__ == "__main__":
    sys.exit(main())
