"""buildah (Debian's package: builds OCI images without a daemon), with its storage under the repository's .cache so
that nothing outside the clone holds the images, and chroot isolation (no runtime, no network namespace needed)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from .errors import ImageError

# buildah streams each layer it commits through two temporary files (containers/image's "big files" directory: $TMPDIR,
# else /var/tmp; containers/podman#22342) beside its working container's copy and the stored layer: measured here, a
# 1.4 GiB layer grew the disk by 6.1 GiB while it was committed with them on the disk, by 3.3 GiB with them in memory.
# So they go to memory (/dev/shm) when it has room for the largest install stage's layer twice over (2.7 GiB: the CUDA
# libraries), else beside the storage, on the disk that holds the images (not on whatever filesystem /var/tmp is).
MEMORY_TMP = Path("/dev/shm")
MEMORY_TMP_NEEDS = 8 * 2**30     # free in /dev/shm
MEMORY_AVAILABLE_NEEDS = 12 * 2**30


def memory_available() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def temporary_dir(cache: Path) -> Path:
    override = os.environ.get("RAY_GITOPS_BUILDAH_TMPDIR")
    if override:
        return Path(override)
    try:
        shm_free = shutil.disk_usage(MEMORY_TMP).free
    except OSError:
        shm_free = 0
    if shm_free >= MEMORY_TMP_NEEDS and memory_available() >= MEMORY_AVAILABLE_NEEDS:
        return MEMORY_TMP / f"ray-gitops-buildah-{os.getuid()}"
    return cache / "tmp"


class Buildah:
    def __init__(self, cache: Path):
        self.root, self.runroot = cache / "storage", cache / "run"
        self.tmp = temporary_dir(cache)

    def env(self) -> dict[str, str]:
        self.tmp.mkdir(parents=True, exist_ok=True)
        return dict(os.environ, BUILDAH_ISOLATION="chroot", TMPDIR=str(self.tmp))

    @staticmethod
    def available() -> bool:
        return shutil.which("buildah") is not None

    def argv(self, *args: str) -> list[str]:
        return ["buildah", "--root", str(self.root), "--runroot", str(self.runroot), "--storage-driver", "overlay",
                *args]

    def run(self, *args: str) -> str:
        proc = subprocess.run(self.argv(*args), env=self.env(), text=True, capture_output=True)
        if proc.returncode != 0:
            raise ImageError(f"buildah {args[0]} failed (exit {proc.returncode}):\n{proc.stderr.strip()[-4000:]}")
        return proc.stdout.strip()

    def stream(self, *args: str) -> None:
        """A long step whose output people watch (a build): printed as it comes."""
        proc = subprocess.run(self.argv(*args), env=self.env())
        if proc.returncode != 0:
            raise ImageError(f"buildah {args[0]} failed (exit {proc.returncode}); its output is above")

    def containers(self) -> set[str]:
        """The ids of the working containers in this storage."""
        proc = subprocess.run(self.argv("containers", "--quiet", "--notruncate"), env=self.env(), capture_output=True,
                              text=True)
        return set(proc.stdout.split()) if proc.returncode == 0 else set()

    def remove_containers_since(self, before: set[str]) -> None:
        """Remove the working containers made since `before` was read (buildah 1.28's bud leaves the container of a
        stage with no instructions, `FROM ... AS base-cpu`, mounted: a clone holding it cannot be deleted)."""
        for container in sorted(self.containers() - before):
            subprocess.run(self.argv("rm", container), env=self.env(), capture_output=True)

    def inspect(self, image: str) -> dict | None:
        proc = subprocess.run(self.argv("inspect", "--type", "image", image), capture_output=True, text=True)
        return json.loads(proc.stdout) if proc.returncode == 0 else None

    def labels(self, image: str) -> dict:
        info = self.inspect(image)
        if not info:
            return {}
        return (info.get("OCIv1", {}).get("config", {}) or {}).get("Labels") or {}

    def size(self, image: str) -> int:
        """The image's size in bytes: the sum of its layers as stored (uncompressed: this machine's layers are
        committed, never pulled)."""
        info = self.inspect(image)
        if not info:
            return 0
        manifest = json.loads(info.get("Manifest") or "{}")
        return sum(int(layer.get("size", 0)) for layer in manifest.get("layers", []))
