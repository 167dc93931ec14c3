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


# ------------------------------------------------------------------ the stages: who may import whom

FRAMEWORK_LIBRARIES = ("ray", "torch", "tensorflow", "tf_keras", "keras", "xgboost")
FRAMEWORK_NAMES = ("pytorch", "tensorflow", "xgboost")


def _stage(stage: str) -> dict[str, set[str]]:
    """The modules of ``training/<stage>/`` and the training modules each imports."""
    files = sorted((PACKAGE / stage).rglob("*.py"))
    assert len(files) >= 4, f"training/{stage}/ has {len(files)} modules"
    return {".".join(p.relative_to(REPO).with_suffix("").parts): _imports(p) for p in files}


def _libraries(path: Path) -> set[str]:
    """The top-level names of everything ``path`` imports (at any depth)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
    return out


def test_the_job_stage_imports_no_ray_and_no_framework_library():
    """training/job/ (stage one: a spec's text -> the typed job)."""
    files = sorted((PACKAGE / "job").rglob("*.py"))
    assert len(files) >= 6
    found = {f"{p.relative_to(REPO)}: {lib}" for p in files for lib in _libraries(p) & set(FRAMEWORK_LIBRARIES)}
    assert not found, "\n".join(sorted(found))


def test_loading_every_example_imports_no_ray_and_no_framework_library():
    """What the spec stage imports, followed through the registry it asks: none of them, for every example."""
    import subprocess
    import sys

    probe = ("import glob, sys; from training.job import load_job\n"
             "for f in sorted(glob.glob('training/examples/*.yaml')): load_job(f, environ={})\n"
             f"print(sorted(m for m in sys.modules if m.split('.')[0] in {FRAMEWORK_LIBRARIES!r}))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout


def test_runtime_imports_neither_frameworks_nor_tune():
    found = {f"{m} -> {i}" for m, imports in _stage("runtime").items() for i in imports
             if i.startswith(("training.frameworks", "training.tune"))}
    assert not found, "\n".join(sorted(found))


def test_frameworks_import_no_tune():
    found = {f"{m} -> {i}" for m, imports in _stage("frameworks").items() for i in imports
             if i.startswith("training.tune")}
    assert not found, "\n".join(sorted(found))


#: What tune/ may import of frameworks/: the registry and the framework-agnostic Ray trainer builder.
FRAMEWORK_DOORS = {"training.frameworks", "training.frameworks.registry", "training.frameworks.trainer"}


def test_tune_reaches_the_frameworks_only_through_the_registry():
    found = {f"{m} -> {i}" for m, imports in _stage("tune").items() for i in imports
             if i.startswith("training.frameworks") and i not in FRAMEWORK_DOORS}
    assert not found, "\n".join(sorted(found))


def test_only_frameworks_branch_on_a_framework_name():
    """Outside frameworks/ (and the benchmarks, which compare frameworks by name), no code compares a value with a
    framework's name: it asks the registry."""
    from training.frameworks import registry

    assert set(registry.names()) == set(FRAMEWORK_NAMES)
    found = []
    for path in SOURCES:
        rel = path.relative_to(PACKAGE).parts
        if rel[0] in ("frameworks", "bench"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Compare):
                for operand in [node.left, *node.comparators]:
                    values = operand.elts if isinstance(operand, (ast.Tuple, ast.List, ast.Set)) else [operand]
                    if any(isinstance(v, ast.Constant) and v.value in FRAMEWORK_NAMES for v in values):
                        found.append(f"{path.relative_to(REPO)}:{node.lineno}: {ast.unparse(node)}")
    assert not found, "\n".join(found)


def test_the_stage_checks_can_fail(tmp_path):
    """The stage checks see an import at any depth, and a comparison with a framework's name."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f(job):\n    from training.tune.trial import trial_job\n    import torch.nn\n"
                   "    return job.framework == 'pytorch'\n")
    assert "training.tune.trial" in _imports(bad) and "torch" in _libraries(bad)
    compare = next(n for n in ast.walk(ast.parse(bad.read_text())) if isinstance(n, ast.Compare))
    assert compare.comparators[0].value in FRAMEWORK_NAMES


#: Who may write a file: the one local-or-URI writer, and the test hooks' ledger (append-only, local, tests only).
WRITERS = {"runtime/storage.py", "runtime/faults.py"}


def _writes(path: Path, root: Path = REPO) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        mode = node.args[1] if name == "open" and len(node.args) > 1 else next(
            (k.value for k in node.keywords if k.arg == "mode"), None) if name == "open" else None
        if name in ("write_text", "write_bytes", "open_output_stream", "open_append_stream") and not (
                isinstance(node.func, ast.Attribute) and ast.unparse(node.func.value) == "storage"):
            out.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node.func)}")
        elif isinstance(mode, ast.Constant) and set(str(mode.value)) & set("wax+"):
            out.append(f"{path.relative_to(root)}:{node.lineno}: open(..., {mode.value!r})")
    return out


def test_one_writer():
    """Results, summaries, journals, manifests and markers go through runtime/storage.py's write_bytes (a local path
    atomically, or a URI); the benchmarks write their own report folder."""
    found = [w for p in SOURCES if p.relative_to(PACKAGE).parts[0] not in ("bench", "examples")
             and "/".join(p.relative_to(PACKAGE).parts) not in WRITERS for w in _writes(p)]
    assert not found, "\n".join(found)


def test_the_writer_check_can_fail(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f(p, fs):\n    open(p, 'w').write('x')\n    p.write_text('x')\n    fs.open_output_stream(p)\n"
                   "    storage.write_bytes(p, b'')\n    open(p, encoding='utf-8').read()\n")
    assert sorted(w.split(": ", 1)[1] for w in _writes(bad, tmp_path)) == ["fs.open_output_stream", "open(..., 'w')",
                                                                           "p.write_text"]


def test_every_folder_of_modules_is_a_package_the_install_takes():
    """The image installs training/ with pip (not editable): setuptools' packages.find (pyproject.toml) takes a folder
    only when it has an __init__.py, so a folder of modules without one would be missing from the image while every
    test here passes from the checkout (training/runtime/ was, for a while)."""
    import tomllib

    from setuptools import find_packages

    include = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    found = set(find_packages(str(REPO), include=include))
    folders = {".".join(p.parent.relative_to(REPO).parts) for p in SOURCES}
    folders = {f for f in folders if not f.startswith("training.examples")}  # data: package-data, not imported
    assert folders - found == set(), f"folders with modules setuptools does not install: {sorted(folders - found)}"
