"""The real helm: found once, called with a values file, its own message shown when it fails."""
from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .errors import RenderError

MIN_VERSION = (3, 14)


PROJECT = Path(__file__).resolve().parent.parent


def binary(root: Path | None = None) -> str:
    """$HELM, else this project's .tools/bin/helm, else a helm >= 3.14 on PATH."""
    return _binary(os.environ.get("HELM"))


@functools.cache
def _binary(env_helm) -> str:
    candidates = [env_helm, str(PROJECT / ".tools" / "bin" / "helm"), shutil.which("helm")]
    seen = []
    for candidate in candidates:
        if not candidate or not Path(candidate).is_file():
            continue
        version = _version(candidate)
        seen.append(f"{candidate} ({'.'.join(map(str, version)) if version else 'unknown version'})")
        if version and version >= MIN_VERSION:
            return candidate
    found = "; found: " + ", ".join(seen) if seen else ""
    raise RenderError(f"no helm >= {'.'.join(map(str, MIN_VERSION))} found (run `make setup`, which installs one "
                      f"into .tools/bin, or set HELM=/path/to/helm){found}")


def _version(path: str):
    try:
        out = subprocess.run([path, "version", "--template", "{{.Version}}"], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.match(r"v?(\d+)\.(\d+)", out.strip())
    return (int(match.group(1)), int(match.group(2))) if match else None


@dataclass
class Result:
    stdout: str
    seconds: float


def _clean_stderr(text: str) -> str:
    # helm 4 logs an INFO line for the symlinked library chart; it is not part of any failure
    lines = [l for l in text.splitlines() if not l.startswith("level=INFO")]
    return "\n".join(lines).strip()


def _run(root: Path, args: list, what: str) -> Result:
    start = time.perf_counter()
    proc = subprocess.run([binary(root), *args], capture_output=True, text=True, cwd=root)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        # helm template says why on stderr; helm lint lists its findings on stdout
        message = "\n".join(part for part in (proc.stdout.strip() if args[0] == "lint" else "",
                                               _clean_stderr(proc.stderr)) if part) or f"exit code {proc.returncode}"
        raise RenderError(f"{what}: helm failed:\n" + "\n".join("  " + l for l in message.splitlines()))
    return Result(proc.stdout, seconds)


def _values_file(values: dict, tmp: str) -> str:
    path = Path(tmp) / "values.json"
    path.write_text(json.dumps(values, sort_keys=True))
    return str(path)


def template(root: Path, release: str, chart_dir: Path, namespace: str, kube_version: str, values: dict,
             what: str) -> Result:
    with tempfile.TemporaryDirectory(prefix="helm-values-") as tmp:
        return _run(root, ["template", release, str(chart_dir), "--namespace", namespace,
                           "--kube-version", kube_version, "--values", _values_file(values, tmp)], what)


def lint(root: Path, chart_dir: Path, namespace: str, kube_version: str, values: dict | None, what: str) -> Result:
    with tempfile.TemporaryDirectory(prefix="helm-values-") as tmp:
        args = ["lint", "--strict", str(chart_dir), "--namespace", namespace, "--kube-version", kube_version]
        if values is not None:
            args += ["--values", _values_file(values, tmp)]
        return _run(root, args, what)
