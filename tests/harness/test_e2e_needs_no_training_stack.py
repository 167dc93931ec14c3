"""`make e2e` runs on `make setup-base`'s .venv (CI drops the training stack after `make test`, for the disk: the
image build and the e2e's node need it). So nothing the e2e imports may import torch, TensorFlow or XGBoost: every
module of the e2e's harness and scenarios, and of what they drive (ops, images, generator, validation), is imported
here in a fresh interpreter where those packages cannot be found."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Import names of what `scripts/setup.sh drop-train` uninstalls (its TRAINING_STACK_RE names distributions)
TRAINING_STACK = ("torch", "triton", "tensorflow", "tf_keras", "keras", "xgboost")
PACKAGES = ("e2e", "ops", "images", "generator", "validation", "tests/e2e")
# what the e2e scenarios import of the training package at run time (test_07: bench-cluster's figures)
EXTRA = ("training.bench.train", "training.bench.report")

PROGRAM = """
import importlib, importlib.abc, sys
blocked = set(sys.argv[1].split(","))

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked: the e2e runs without the training stack)")
        return None

sys.meta_path.insert(0, Block())
for module in sys.argv[2:]:
    importlib.import_module(module)
print("imported", len(sys.argv) - 2)
"""


def modules() -> list[str]:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).with_suffix("")
            parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            if "components" in parts or parts[-1] == "__main__":  # Go modules' folders; CLIs that run on import
                continue
            found.append(".".join(parts))
    return [*found, *EXTRA]


def _run(blocked: tuple[str, ...], names: list[str], path: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", PROGRAM, ",".join(blocked), *names], cwd=path,
                          capture_output=True, text=True, timeout=300)


def test_every_module_the_e2e_imports_loads_without_the_training_stack():
    names = modules()
    assert "e2e.supervisor" in names and "tests.e2e.test_09_real_node" in names and "ops.bench" in names
    proc = _run(TRAINING_STACK, names)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == f"imported {len(names)}"


def test_the_check_fails_when_a_module_imports_the_stack(tmp_path):
    (tmp_path / "trains.py").write_text("import xgboost\n")
    proc = _run(TRAINING_STACK, ["trains"], tmp_path)
    assert proc.returncode != 0 and "blocked: the e2e runs without the training stack" in proc.stderr
