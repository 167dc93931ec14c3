"""buildah (Debian's package: builds OCI images without a daemon), with its storage under the repository's .cache so
that nothing outside the clone holds the images, and chroot isolation (no runtime, no network namespace needed)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from .errors import ImageError


class Buildah:
    def __init__(self, cache: Path):
        self.root, self.runroot = cache / "storage", cache / "run"
        # buildah writes each committed layer to a temporary file first (containers/image's "big files" directory:
        # $TMPDIR, else /var/tmp). The training stack's layer is several GiB, so that file goes beside the storage,
        # on the disk that holds the images, not on whatever filesystem /var/tmp is.
        self.tmp = cache / "tmp"

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
