"""Build training/Dockerfile with Docker where there is an engine, with buildah where there is none.

Both get the same Dockerfile, context (the repository root) and ignore file (training/Dockerfile.dockerignore).
Docker builds on rayproject/ray and lets pip reach its indexes (the CPU variant's torch from PyTorch's CPU index).
buildah builds on the Debian base (images.debian_base) with the wheelhouse mounted at /wheels, so pip reads no
index; .cache/images/sources.json records the hash of every input with the image it gave, and an image whose
inputs did not change is not built again (a changed input rebuilds the steps after its COPY: --layers).
"""
from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from generator import versions

from . import context, debian_base, record, wheelhouse
from .buildah import MEMORY_TMP, Buildah
from .errors import ImageError

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "training" / "Dockerfile"
IGNOREFILE = ROOT / "training" / "Dockerfile.dockerignore"
DEFAULT_CACHE = ROOT / ".cache" / "images"


@dataclass(frozen=True)
class Request:
    reference: str                # repository:tag
    variant: str = "cpu"
    builder: str = "auto"         # auto | docker | buildah
    cache: Path = DEFAULT_CACHE


@dataclass(frozen=True)
class Built:
    reference: str
    builder: str
    size_bytes: int
    seconds: float
    rebuilt: bool


def docker_available() -> bool:
    if not shutil.which("docker"):
        return False
    return subprocess.run(["docker", "info"], capture_output=True).returncode == 0


def choose(builder: str) -> str:
    if builder == "docker" and not docker_available():
        raise ImageError("--builder docker: no running Docker engine (`docker info` fails)")
    if builder == "buildah" and not Buildah.available():
        raise ImageError("--builder buildah: buildah is not installed (Debian: apt-get install buildah)")
    if builder != "auto":
        return builder
    if docker_available():
        return "docker"
    if Buildah.available():
        return "buildah"
    raise ImageError("make image needs a Docker engine or buildah (Debian: apt-get install buildah mmdebstrap)")


def source_hash(variant: str, base: str) -> str:
    """Every input of the build: the Dockerfile, its ignore file, each file of the context, the variant, the base."""
    digest = hashlib.sha256(f"{variant} {base}".encode())
    for path in (DOCKERFILE, IGNOREFILE):
        digest.update(path.read_bytes())
    for rel in context.files(ROOT, IGNOREFILE):
        digest.update(rel.encode())
        digest.update((ROOT / rel).read_bytes())
    return digest.hexdigest()[:16]


def inputs_hash(request: Request) -> str:
    """The buildah build's inputs: the source files, the Debian base's recipe and the wheelhouse's pins."""
    return source_hash(request.variant, f"{debian_base.reference()} {debian_base.recipe_hash()} "
                                        f"{wheelhouse.directory(request.cache).name}")


def build(request: Request, out=sys.stderr) -> Built:
    builder = choose(request.builder)
    start = time.monotonic()
    if builder == "docker":
        _run(["docker", "build", "-f", str(DOCKERFILE), "--build-arg", f"VARIANT={request.variant}",
              "-t", request.reference, str(ROOT)], "docker build")
        size = int(subprocess.run(["docker", "image", "inspect", "-f", "{{.Size}}", request.reference],
                                  capture_output=True, text=True).stdout.strip() or 0)
        return Built(request.reference, builder, size, time.monotonic() - start, True)
    if request.variant != "cpu":
        raise ImageError(f"VARIANT={request.variant} builds on rayproject/ray's CUDA image, which needs Docker "
                         "and a registry; without them only VARIANT=cpu is built (on the Debian base)")
    buildah = Buildah(request.cache)
    # whether anything changed is decided before anything is fetched: an up-to-date image needs neither the
    # wheelhouse (which CI deletes once the image is built, for the disk) nor the base
    wanted = inputs_hash(request)
    known = record.entry(request.cache, request.reference)  # beside the image, not a label
    info = buildah.inspect(request.reference)
    if known.get("source") == wanted:
        if info and known.get("id") == info["FromImageID"]:
            print(f"[image] {request.reference} is up to date (its inputs are unchanged)", file=out, flush=True)
            size = buildah.size(request.reference)
            if known.get("size_bytes") != size:  # a record from before sizes were kept
                record.save(request.cache, request.reference, known["id"], wanted, size)
            return Built(request.reference, builder, size, time.monotonic() - start, False)
        archived = record.archived(request.cache, request.reference)
        if not info and archived:
            print(f"[image] {request.reference} is up to date (its inputs are unchanged); buildah's storage was "
                  f"released, its archive {archived.name} stands for it", file=out, flush=True)
            return Built(request.reference, builder, int(known.get("size_bytes") or 0), time.monotonic() - start,
                         False)
    v = versions.pinned()
    wheels = wheelhouse.ensure(request.cache, out)
    base = debian_base.ensure(buildah, wheels, request.cache, out)
    _warn_if_disk_is_short(request.cache, buildah.tmp, out)
    print(f"[image] building {request.reference} with buildah on {base} (its temporary files in {buildah.tmp})",
          file=out, flush=True)
    # --layers: each step's result is cached as Docker's builder caches it, so a change to the package's code (or
    # README.md, which pyproject.toml names) rebuilds only the steps after its COPY, not the pip install before it
    common = ["--layers", "--file", str(DOCKERFILE), "--ignorefile", str(IGNOREFILE),
              "--build-arg", f"VARIANT={request.variant}", "--build-arg", f"RAY_VERSION={v.ray}",
              "--build-arg", f"PYTHON_TAG={v.python_tag}", "--build-arg", f"RAY_IMAGE={debian_base.REPOSITORY}",
              "--build-arg", "WHEELHOUSE=/wheels", "--volume", f"{wheels}:/wheels:ro", "--pull=never"]
    # One bud per install stage, then the image: buildah 1.28 removes a bud's working containers (each step's files
    # beside its committed layer) only when the bud ends, so one bud of every step held them all at once
    for stage in deps_stages():
        print(f"[image] stage {stage} (buildah bud --target {stage})", file=out, flush=True)
        _bud(buildah, *common, "--target", stage, str(ROOT))
    _bud(buildah, *common, "--tag", request.reference, str(ROOT))
    # (a --label would be part of every step's cache key in buildah 1.28, and no step would ever be reused)
    size = buildah.size(request.reference)
    record.save(request.cache, request.reference, buildah.inspect(request.reference)["FromImageID"], wanted, size)
    return Built(request.reference, builder, size, time.monotonic() - start, True)


# Measured on this machine (a cold `make image`, its storage and temporary files sampled every 10 s): buildah keeps
# every step's working container until its bud ends, and holds a layer about four times while it commits it (its
# working container's copy, two temporary files, containers/podman#22342, and the stored layer). The whole training
# stack in one bud peaked at 23 GiB of build (CI machines with less ran out of disk there). One bud per install stage
# (training/Dockerfile's deps-* stages: 2.7, 1.9, 2.0 and 1.1 GiB on a 0.5 GiB base) peaked at 12.3 GiB with the
# temporary files on the disk, TensorFlow's stage committing on top of the 5.1 GiB before it. With them in memory
# (images.buildah.temporary_dir), a layer is held about twice on the disk: about 10 GiB. Beside it: the 3.8 GiB
# wheelhouse the stack is installed from.
PEAK_GIB = {"disk": 13, "memory": 10}


def _warn_if_disk_is_short(cache: Path, tmp: Path, out) -> None:
    peak = PEAK_GIB["memory" if tmp.is_relative_to(MEMORY_TMP) else "disk"]
    free = shutil.disk_usage(cache).free / 2**30
    if free < peak:
        print(f"[image] warning: {free:.0f} GiB free on the disk of {cache}; a cold build needs about {peak} GiB "
              "at its peak (a layer is written several times while it is committed); if it fails "
              "with 'read/write on closed pipe' or 'no space left on device', free space there", file=out,
              flush=True)


def deps_stages(dockerfile: Path = DOCKERFILE) -> list[str]:
    """The Dockerfile's install stages (`FROM ... AS deps-...`), in file order: each builds on the one before."""
    return re.findall(r"^FROM\s+\S+\s+AS\s+(deps-[\w-]+)\s*$", dockerfile.read_text(), re.M | re.I)


def _bud(buildah: Buildah, *args: str) -> None:
    """One `buildah bud`, its working containers removed when it ends (whether or not it succeeded)."""
    before = buildah.containers()
    try:
        buildah.stream("bud", *args)
    finally:
        buildah.remove_containers_since(before)


def _run(cmd: list[str], what: str) -> None:
    proc = subprocess.run(cmd)
    if proc.returncode != 0:
        raise ImageError(f"{what} failed (exit {proc.returncode}); its output is above")
