"""The stand-in for rayproject/ray where it cannot be pulled: Debian (versions.yaml `debian`) with its python3
(versions.yaml `python`), a virtualenv owned by the user `ray` (uid 1000, gid 100 `users`, as in Ray's images) and
`ray[default]` at the pinned Ray, tagged as Ray's image is (`<ray>-<pyXY>-cpu`) under localhost/ray-base.

Made with Debian's mmdebstrap (a minimal root filesystem from Debian's packages) and buildah; cached by a label that
hashes the recipe, so a second `make image` skips it."""
from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
from pathlib import Path

from generator import versions

from .buildah import Buildah
from .errors import ImageError

REPOSITORY = "localhost/ray-base"
RECIPE_LABEL = "io.ray-gitops.base-recipe"
VENV = "/home/ray/venv"
# What Ray's own image has that Ray and KubeRay use: bash and wget (KubeRay's exec probes), ps (procps), the CA
# bundle, OpenMP (xgboost's wheel links libgomp).
PACKAGES = ("python3", "python3-venv", "ca-certificates", "wget", "procps", "libgomp1")
MIRRORS = ("deb http://deb.debian.org/debian {suite} main",
           "deb http://deb.debian.org/debian {suite}-updates main",
           "deb http://deb.debian.org/debian-security {suite}-security main")


def tag() -> str:
    v = versions.pinned()
    return f"{v.ray}-{v.python_tag}-cpu"


def reference() -> str:
    return f"{REPOSITORY}:{tag()}"


def recipe_hash() -> str:
    v = versions.pinned()
    digest = hashlib.sha256(Path(__file__).read_bytes())
    digest.update(f"{v.debian} {v.python} {v.ray}".encode())
    return digest.hexdigest()[:16]


def ensure(buildah: Buildah, wheels: Path, cache: Path, out=sys.stderr) -> str:
    """The base image's reference, built when missing or when its recipe changed."""
    ref = reference()
    if buildah.labels(ref).get(RECIPE_LABEL) == recipe_hash():
        print(f"[image] base {ref} is up to date", file=out, flush=True)
        return ref
    v = versions.pinned()
    print(f"[image] building the base {ref}: Debian {v.debian} + python3 + ray[default]=={v.ray}", file=out,
          flush=True)
    with tempfile.TemporaryDirectory(prefix="rootfs-", dir=cache) as tmp:
        rootfs = Path(tmp) / "rootfs.tar"
        _debootstrap(v.debian, rootfs)
        container = buildah.run("from", "scratch")
        try:
            buildah.run("add", container, str(rootfs), "/")
            _check_python(buildah, container, v.python)
            buildah.run("run", container, "--", "sh", "-c",
                        f"python3 -m venv {VENV} && chown -R ray:users {VENV}")
            buildah.run("run", "--user", "ray", "-v", f"{wheels}:/wheels:ro", container, "--",
                        f"{VENV}/bin/pip", "install", "--quiet", "--no-index", "--find-links", "/wheels",
                        "--no-cache-dir", f"ray[default]=={v.ray}")
            buildah.run("config", "--user", "ray", "--workingdir", "/home/ray",
                        "--env", f"PATH={VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                        "--env", "HOME=/home/ray", "--env", "LANG=C.UTF-8",
                        "--label", f"{RECIPE_LABEL}={recipe_hash()}", "--cmd", "/bin/bash", container)
            buildah.run("commit", "--rm", container, ref)
        except BaseException:
            subprocess.run(buildah.argv("rm", container), capture_output=True)
            raise
    print(f"[image]   base {ref}: {buildah.size(ref) / 2**20:.0f} MiB", file=out, flush=True)
    return ref


def _debootstrap(suite: str, target: Path) -> None:
    cmd = ["mmdebstrap", "--quiet", "--variant=minbase", f"--include={','.join(PACKAGES)}",
           "--dpkgopt=path-exclude=/usr/share/man/*", "--dpkgopt=path-exclude=/usr/share/doc/*",
           "--dpkgopt=path-exclude=/usr/share/locale/*",
           "--customize-hook=chroot \"$1\" useradd --create-home --uid 1000 --gid users --shell /bin/bash ray",
           "--customize-hook=rm -rf \"$1\"/var/lib/apt/lists/* \"$1\"/var/cache/apt/*",
           suite, str(target), *(m.format(suite=suite) for m in MIRRORS)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ImageError(f"mmdebstrap failed (Debian's package, apt-get install mmdebstrap):\n$ {' '.join(cmd)}\n"
                         f"{proc.stderr.strip()[-3000:]}")


def _check_python(buildah: Buildah, container: str, pinned: str) -> None:
    found = buildah.run("run", container, "--", "python3", "-c",
                        "import sys; print('%d.%d' % sys.version_info[:2])")
    if found != pinned:
        raise ImageError(f"Debian {versions.pinned().debian}'s python3 is {found}, versions.yaml pins python "
                         f"{pinned}: change `debian` or `python` in versions.yaml so they agree")
