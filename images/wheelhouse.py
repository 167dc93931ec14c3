"""A wheelhouse: every wheel the image's pip installs, downloaded once on the host by the host's pip (its index,
proxy and certificates), then mounted read-only into the build (`pip install --no-index --find-links`). The build
reaches no network, and a second build downloads nothing."""
from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

from generator import versions

from .errors import ImageError

ROOT = Path(__file__).resolve().parent.parent
REQUIREMENTS = ROOT / "training" / "requirements.txt"


def requirements() -> list[str]:
    """What the image installs: the base's Ray, the Dockerfile's torch, the package's build backend
    (pyproject.toml's build-system) and training/requirements.txt."""
    import tomllib
    v = versions.pinned()
    build = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    return [f"ray[default]=={v.ray}", f"torch=={torch_version()}", *build, "-r", str(REQUIREMENTS)]


def torch_version() -> str:
    import re
    match = re.search(r"^ARG TORCH_VERSION=(\S+)", (ROOT / "training" / "Dockerfile").read_text(), re.M)
    if not match:
        raise ImageError("training/Dockerfile: no `ARG TORCH_VERSION=...` line")
    return match.group(1)


def key() -> str:
    digest = hashlib.sha256(" ".join(requirements()[:-1]).encode())
    digest.update(REQUIREMENTS.read_bytes())
    return digest.hexdigest()[:12]


def directory(cache: Path) -> Path:
    """Where the wheelhouse for the current pins is (or would be) under the image cache."""
    return cache / f"wheels-{key()}"


def ensure(cache: Path, out=sys.stderr) -> Path:
    """The wheelhouse for the current pins (downloaded when missing)."""
    target = directory(cache)
    if (target / ".complete").is_file():
        return target
    target.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
           "--dest", str(target), "--only-binary", ":all:", *requirements()]
    print(f"[image] downloading the image's wheels into {target} (pip download)", file=out, flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ImageError(f"pip download failed:\n$ {' '.join(cmd)}\n{proc.stderr.strip()[-3000:]}")
    (target / ".complete").write_text(" ".join(requirements()) + "\n")
    size = sum(p.stat().st_size for p in target.glob("*.whl"))
    print(f"[image]   {len(list(target.glob('*.whl')))} wheels, {size / 2**30:.2f} GiB", file=out, flush=True)
    return target
