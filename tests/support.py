"""Helpers shared by every test folder (imported by name; the conftest.py files hold only fixtures and hooks)."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent

# libyaml's scanner (PyYAML's C loader, the one generator/manifests.py and validation/ read with): the same safe
# constructors as yaml.safe_load at about a tenth of the time. The fast lane parsed YAML for 27 of its 110 s with
# the pure-Python one (cProfile, 2026-11-29).
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(text_or_stream):
    """yaml.safe_load, through libyaml."""
    return yaml.load(text_or_stream, Loader=YAML_LOADER)


def load_yaml_all(text_or_stream) -> list:
    """yaml.safe_load_all, through libyaml (a list: the documents are read at once)."""
    return list(yaml.load_all(text_or_stream, Loader=YAML_LOADER))


def run_generator(root: Path, *args, env=None) -> subprocess.CompletedProcess:
    environ = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "generator", "--root", str(root), *args], cwd=REPO,
                          capture_output=True, text=True, env=environ)


def tree_digest(path: Path) -> dict:
    """{relative path: sha256} of every file under `path` (an absent tree is {})."""
    if not path.exists():
        return {}
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


def built_binary(component: str, binary: str, what: str):
    """A binary of an e2e component, built from its pinned module by e2e.components (cached after the first build);
    a build that fails fails the test that needs it."""
    import pytest

    from e2e import components
    try:
        paths = components.build([component], out=sys.stderr)
    except components.BuildError as exc:
        pytest.fail(f"cannot build {what} from its module (Go >= 1.26 and the module proxy are needed): {exc}")
    return paths[binary]


def go_module_dir(module: str, version: str) -> Path:
    """An upstream Go module's source, read in place from Go's module cache (`go mod download`: from the module
    proxy the first time); the test that needs it fails with Go's message when it cannot be had."""
    import json

    import pytest
    proc = subprocess.run(["go", "mod", "download", "-json", f"{module}@{version}"], capture_output=True, text=True)
    info = json.loads(proc.stdout or "{}") if proc.stdout.strip().startswith("{") else {}
    if proc.returncode != 0 or not info.get("Dir"):
        pytest.fail(f"go mod download {module}@{version} failed: {info.get('Error') or proc.stderr.strip()}")
    return Path(info["Dir"])


def app_dir(root: Path, env: str, app: str, cluster: str | None = None) -> Path:
    """Where an app of an environment is rendered for one of its clusters (default: the one keyed like the
    environment): that cluster's own apps/<env>/clusters/<cluster>/<app>/ when there is one, else the shared
    apps/<env>/<app>/ (generator/render.py place)."""
    own = root / "apps" / env / "clusters" / (cluster or env) / app
    return own if own.is_dir() else root / "apps" / env / app
