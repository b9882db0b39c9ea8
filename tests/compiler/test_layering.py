"""The compiler's layering: no import cycle between its files or subpackages (imports inside functions
included), and no code outside an operator's own file that branches on the operator's kind."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import vta_compiler
from vta_compiler.tiling import registry

ROOT = Path(vta_compiler.__file__).resolve().parent
PACKAGE = ROOT.name


def _modules(root: Path) -> dict[str, tuple[Path, bool]]:
    mods = {}
    for p in root.rglob("*.py"):
        parts = list(p.relative_to(root.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        mods[".".join(parts[:-1] if is_pkg else parts)] = (p, is_pkg)
    return mods


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the package's modules it imports, anywhere in the file (function bodies too); importing
    ``a.b.c`` also imports the packages ``a.b`` and ``a`` above it, except the importer's own ancestors."""
    mods = _modules(root)

    def known(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, (path, is_pkg) in mods.items():
        here = m.split(".") if is_pkg else m.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(here[:len(here) - node.level + 1] + ([node.module] if node.module else [])) \
                    if node.level else node.module
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            for t in targets:
                t = known(t)
                if t is None or t == m:
                    continue
                parts = t.split(".")
                for i in range(1, len(parts) + 1):
                    q = ".".join(parts[:i])
                    if q in mods and q != m and not m.startswith(q + "."):
                        edges[m].add(q)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one member (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def subpackage(m: str) -> str:
    return ".".join(m.split(".")[:2])


def test_no_import_cycle_between_files():
    found = cycles(import_graph())
    assert not found, f"import cycles between files: {found}"


def test_no_import_cycle_between_subpackages():
    edges = import_graph()
    by_sub: dict[str, set[str]] = {}
    for m, ts in edges.items():
        by_sub.setdefault(subpackage(m), set()).update(subpackage(t) for t in ts if subpackage(t) != subpackage(m))
    found = cycles(by_sub)
    assert not found, f"import cycles between subpackages: {found}"


def test_the_layers_import_only_downwards():
    """tiling below the operators (top), the operators below graph, graph below autotune."""
    edges = import_graph()
    order = ["tiling", "top", "graph", "autotune"]
    for m, ts in edges.items():
        if subpackage(m).split(".")[-1] not in order:
            continue
        level = order.index(subpackage(m).split(".")[-1])
        for t in ts:
            name = subpackage(t).split(".")[-1]
            assert name not in order or order.index(name) <= level, f"{m} imports {t}, a layer above it"


def test_the_checker_sees_a_cycle_inside_a_function(tmp_path):
    """Negative control: a cycle made only by an import inside a function is found."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from .. import a\n")
    assert cycles(import_graph(pkg)) == [["pkg.a", "pkg.sub.b"]]


def _names_a_kind(e) -> bool:
    """``kind``, ``layer.kind``, ``key.kind``, ``t.kind``, ``op_kind``: an expression that holds a kind."""
    return (isinstance(e, ast.Name) and "kind" in e.id) or (isinstance(e, ast.Attribute) and "kind" in e.attr)


def _kind_comparisons(path: Path, kinds: set[str]) -> list[str]:
    """Comparisons of a kind with operator kinds (``kind == "dense"``, ``layer.kind in ("conv2d", ...)``), and
    dicts keyed by operator kinds (a table per kind instead of the operator's own method)."""
    found = []
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(_names_a_kind(e) for e in [node.left, *node.comparators]):
            for c in [node.left, *node.comparators]:
                values = [c] if isinstance(c, ast.Constant) else \
                    list(c.elts) if isinstance(c, (ast.Tuple, ast.List, ast.Set)) else []
                hit = [v.value for v in values if isinstance(v, ast.Constant) and v.value in kinds]
                if hit:
                    found.append(f"{path.name}:{node.lineno} compares a kind with {hit}")
        elif isinstance(node, ast.Dict):
            hit = [k.value for k in node.keys if isinstance(k, ast.Constant) and k.value in kinds]
            if len(hit) > 1:
                found.append(f"{path.name}:{node.lineno} a dict keyed by kinds {hit}")
    return found


def test_nothing_outside_an_operator_file_branches_on_its_kind():
    ops = list(registry.operators())
    kinds = {op.kind for op in ops}
    own = {Path(__import__(type(op).__module__, fromlist=["_"]).__file__).resolve() for op in ops}
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        if path.resolve() not in own:
            found += _kind_comparisons(path, kinds)
    assert not found, "branches on operator kinds outside their files:\n" + "\n".join(found)


def test_the_kind_checker_sees_a_branch(tmp_path):
    """Negative control: the branches the old graph_pack had are found."""
    f = tmp_path / "old.py"
    f.write_text('if kind == "dense":\n    pass\nif layer.kind in ("conv2d", "group_conv2d"):\n    pass\n'
                 'T = {"conv2d": 1, "dense": 2}\n')
    assert len(_kind_comparisons(f, {"conv2d", "group_conv2d", "dense"})) == 3


@pytest.mark.parametrize("kind", ["conv2d", "group_conv2d", "conv2d_transpose", "dense"])
def test_every_operator_is_whole(kind):
    """Each registered operator answers everything the flow asks of it for a small workload of its own."""
    from vta_compiler import get_env
    from vta_compiler.top import DCGAN, MOBILENET_DEPTHWISE, RESNET18, DenseWorkload
    env = get_env()
    op = registry.get(kind)
    wkl = {"conv2d": RESNET18["C11"], "group_conv2d": MOBILENET_DEPTHWISE["DW9"], "conv2d_transpose": DCGAN["CT1"],
           "dense": DenseWorkload(1, 512, 1008)}[kind]
    assert registry.of(wkl) is op
    assert op.workload_from_json(op.workload_to_json(wkl)) == wkl
    t = op.tiling(wkl, env, tuned=False)
    assert op.valid(wkl, t, env) and op.fits(wkl, t, env) and op.estimate(wkl, t, env) > 0
    assert op.refusal(wkl, env) is None
    func = op.compute(wkl, env)
    assert op.workload_of(func) == wkl, "a layer records its workload for its schedule"
    assert op.schedule(func, env=env) is not None
    assert op.issued_macs(wkl, env) >= op.useful_macs(wkl) > 0
    assert op.pattern() is not None and op.relax_ops
