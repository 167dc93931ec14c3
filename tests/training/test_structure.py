"""The training package reaches Ray through its public API only, and its modules import one way (no cycles)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.training.support import REPO

PACKAGE = REPO / "training"
SOURCES = sorted(p for p in PACKAGE.rglob("*.py"))

PRIVATE_RAY = re.compile(r"\bray\.(?:[\w.]*\._[a-z]\w*|_\w+)")  # ray._private, ray.train.v2._internal, ...


def test_no_private_ray_module_or_attribute():
    found = []
    for path in SOURCES:
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                # tuner._local_tuner, grid._experiment_analysis, ...: private attributes of Ray's objects
                if isinstance(node.value, ast.Name) and node.value.id in ("tuner", "grid", "result", "trainer"):
                    names = [f"{node.value.id}.{node.attr}"]
            for name in names:
                if (name.startswith("ray") and PRIVATE_RAY.search(name)) or "._" in name and name.startswith(
                        ("tuner.", "grid.", "result.", "trainer.")):
                    found.append(f"{path.relative_to(REPO)}:{node.lineno}: {name}")
    assert not found, "private Ray API used:\n" + "\n".join(found)


def test_no_monkeypatching_of_ray():
    """Nothing assigns attributes of Ray's modules (a Tune trial used to replace ray.train's functions)."""
    found = []
    for path in SOURCES:
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr":
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: setattr")
            if isinstance(node, (ast.Assign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    if isinstance(t, ast.Attribute) and ast.unparse(t).startswith("ray."):
                        found.append(f"{path.relative_to(REPO)}:{node.lineno}: {ast.unparse(t)}")
    assert not found, "\n".join(found)


def _imports(path: Path) -> set[str]:
    """The training modules ``path`` imports (at any depth: a function-level import still makes a cycle)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("training"):
            out.add(node.module)
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                if (REPO / (candidate.replace(".", "/") + ".py")).exists():
                    out.add(candidate)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("training"))
    return out


def test_no_import_cycles():
    modules = {".".join(p.relative_to(REPO).with_suffix("").parts): p for p in SOURCES}
    graph = {m: {i for i in _imports(p) if i in modules and i != m} for m, p in modules.items()}
    cycles = []

    def visit(module, stack):
        for nxt in sorted(graph[module]):
            if nxt in stack:
                cycles.append(" -> ".join(stack[stack.index(nxt):] + [nxt]))
            elif nxt not in done:
                visit(nxt, stack + [nxt])
        done.add(module)

    done: set[str] = set()
    for module in sorted(graph):
        if module not in done:
            visit(module, [module])
    assert not cycles, "import cycles:\n" + "\n".join(sorted(set(cycles)))


def test_the_checks_above_can_fail(tmp_path):
    """The patterns catch what they are for."""
    assert PRIVATE_RAY.search("ray._private.state") and PRIVATE_RAY.search("ray.train.v2._internal.execution")
    assert not PRIVATE_RAY.search("ray.train.torch") and not PRIVATE_RAY.search("ray.util.placement_group")
