"""The upstream components of the e2e cluster, built from their Go modules at pinned versions.

Each component is a Go module of ours under e2e/components/<name>/ (go.mod + go.sum, committed: the pins and
their checksums) whose `tool` directives name the upstream main packages. `build()` runs `go build` once per
component into .cache/e2e/bin/<name>-<key>/, where the key hashes everything that decides the output (go.mod,
go.sum, linker flags, Go version), so a second run finds the binaries and starts in seconds. Binaries are never
committed; nothing is downloaded at run time except Go modules from the module proxy.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from generator import versions

ROOT = Path(__file__).resolve().parent.parent
COMPONENTS_DIR = Path(__file__).resolve().parent / "components"
DEFAULT_CACHE = ROOT / ".cache" / "e2e" / "bin"


@dataclass(frozen=True)
class Component:
    name: str
    module: str                          # the upstream module whose version is the component's version
    binaries: dict[str, str]             # binary name -> main package
    ldflags: tuple[str, ...] = ()        # -X flags; {version} is the module's version ("v1.34.4")
    aliases: dict[str, str] = field(default_factory=dict)  # extra names (symlinks) -> binary
    # files of the module installed beside the binaries, as the upstream image does (name -> path in the module)
    module_files: dict[str, str] = field(default_factory=dict)
    pinned: str | None = None            # the version the project pins, when the proxy cannot serve it
    cgo: bool = False                    # built with CGO_ENABLED=1 (gcc): a C library the component cannot do without

    @property
    def directory(self) -> Path:
        return COMPONENTS_DIR / self.name

    @property
    def version(self) -> str:
        return module_version(self.directory / "go.mod", self.module)

    def linker_flags(self) -> list[str]:
        version = self.version
        numbers = re.match(r"v?(\d+)\.(\d+)", version)
        major, minor = numbers.groups() if numbers else ("", "")
        flags = ["-s", "-w"]
        flags += [flag.format(version=version, bare=version.lstrip("v"), major=major, minor=minor)
                  for flag in self.ldflags]
        return flags


_K8S_VERSION = ("-X k8s.io/{pkg}.gitVersion={version}", "-X k8s.io/{pkg}.gitMajor={major}",
                "-X k8s.io/{pkg}.gitMinor={minor}", "-X k8s.io/{pkg}.gitTreeState=clean")

COMPONENTS = [
    Component(
        "kubernetes", "k8s.io/kubernetes",
        {"etcd": "github.com/example-org/ray-gitops/e2e/components/kubernetes/etcd",
         "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
         "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
         "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
         # the real node: a kubelet over containerd, and kube-proxy for Services
         "kubelet": "k8s.io/kubernetes/cmd/kubelet",
         "kube-proxy": "k8s.io/kubernetes/cmd/kube-proxy"},
        ldflags=tuple(f.replace("{pkg}", pkg) for pkg in ("component-base/version", "client-go/pkg/version")
                      for f in _K8S_VERSION)),
    Component("kwok", "sigs.k8s.io/kwok", {"kwok": "sigs.k8s.io/kwok/cmd/kwok"},
              ldflags=("-X sigs.k8s.io/kwok/pkg/consts.Version={version}",)),
    # KubeRay v1.7.0 is what the project pins (charts, Argo CD); the module proxy answers 403 "This module version
    # is not available" for github.com/ray-project/kuberay/ray-operator@v1.7.0.zip (its .info and .mod are
    # served), so the e2e builds the newest release it does serve. See docs/e2e.md.
    Component("kuberay", "github.com/ray-project/kuberay/ray-operator",
              {"kuberay-operator": "github.com/ray-project/kuberay/ray-operator",
               # the real node's operator image runs it through this (kuberay/launcher/main.go)
               "kuberay-operator-launcher": "github.com/example-org/ray-gitops/e2e/components/kuberay/launcher"},
              pinned=f"v{versions.pinned().kuberay}"),
    Component("training-operator", "github.com/kubeflow/training-operator",
              {"training-operator": "github.com/kubeflow/training-operator/cmd/training-operator.v1"}),
    # Kueue, where an environment queues (eks): the version versions.yaml pins and the Argo CD layer installs.
    Component("kueue", "sigs.k8s.io/kueue", {"kueue": "sigs.k8s.io/kueue/cmd/kueue"},
              ldflags=("-X sigs.k8s.io/kueue/pkg/version.GitVersion={version}",)),
    Component("argocd", "github.com/argoproj/argo-cd/v3", {"argocd": "github.com/argoproj/argo-cd/v3/cmd"},
              ldflags=("-X github.com/argoproj/argo-cd/v3/common.version={bare}",
                       "-X github.com/argoproj/argo-cd/v3/common.gitTreeState=clean"),
              aliases={"argocd-application-controller": "argocd", "argocd-repo-server": "argocd",
                       "argocd-applicationset-controller": "argocd", "argocd-notifications": "argocd",
                       # the API server and UI: the e2e's logins (e2e.identity, test_13_access)
                       "argocd-server": "argocd"},
              # the Dockerfile copies these into the image's PATH; the repo-server runs them for GPG checks
              module_files={"gpg-wrapper.sh": "hack/gpg-wrapper.sh",
                            "git-verify-wrapper.sh": "hack/git-verify-wrapper.sh"}),
    # The real node's cluster DNS (only the plugins a cluster's Corefile uses: coredns/main.go) and its NetworkPolicy
    # enforcer (kube-router's firewall controller: iptables + ipset, which this kernel has).
    Component("coredns", "github.com/coredns/coredns",
              {"coredns": "github.com/example-org/ray-gitops/e2e/components/coredns/coredns"},
              ldflags=("-X github.com/coredns/coredns/coremain.GitCommit=v{bare}",)),
    Component("kube-router", "github.com/cloudnativelabs/kube-router/v2",
              {"kube-router": "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router"},
              ldflags=("-X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version={version}",)),
    # The S3-compatible object store of the checkpoints (charts/platform objectStore, image ghcr.io/versity/versitygw
    # at the same tag): the training tests run Ray Train against it on 127.0.0.1 (tests/training/test_s3_checkpoints).
    Component("versitygw", "github.com/versity/versitygw",
              {"versitygw": "github.com/versity/versitygw/cmd/versitygw"},
              ldflags=("-X main.Version={version}",)),
    # The e2e's single sign-on (e2e.identity): Dex over an LDAP directory (Debian's slapd), whose password grant gives
    # ID tokens with the users' groups. Its storage registry links SQLite (cgo); Dex runs with its memory storage.
    Component("dex", "github.com/dexidp/dex", {"dex": "github.com/dexidp/dex/cmd/dex"},
              ldflags=("-X github.com/dexidp/dex/version.Version={version}",), cgo=True),
    Component("tools", "helm.sh/helm/v4",
              {"helm": "helm.sh/helm/v4/cmd/helm", "kustomize": "sigs.k8s.io/kustomize/kustomize/v5",
               "kubeconform": "github.com/yannh/kubeconform/cmd/kubeconform"},
              ldflags=("-X helm.sh/helm/v4/internal/version.version={version}",)),
]
BY_NAME = {c.name: c for c in COMPONENTS}


def module_version(go_mod: Path, module: str) -> str:
    """The version `go_mod` requires of `module` (after its replace directives)."""
    text = go_mod.read_text()
    replaced = re.search(rf"^\s*(?:replace\s+)?{re.escape(module)}\s*=>\s*\S+\s+(v\S+)", text, re.M)
    if replaced:
        return replaced.group(1)
    required = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", text, re.M)
    if not required:
        raise ValueError(f"{go_mod}: no requirement of {module}")
    return required.group(1)


def go_version() -> str:
    go = shutil.which("go")
    if not go:
        raise BuildError("the e2e cluster is built from Go modules: install Go >= 1.26 (https://go.dev/dl/)")
    return subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, check=True).stdout.strip()


class BuildError(Exception):
    pass


def cache_key(component: Component, go: str) -> str:
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum"):
        digest.update((component.directory / name).read_bytes())
    for extra in (" ".join(component.linker_flags()), go, sys.platform, os.uname().machine,
                  repr(sorted(component.module_files.items())), "cgo" if component.cgo else ""):
        digest.update(extra.encode())
    for path in sorted(component.directory.rglob("*.go")):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def binary_dir(component: Component, cache: Path = DEFAULT_CACHE, go: str | None = None) -> Path:
    return cache / f"{component.name}-{cache_key(component, go or go_version())}"


def is_built(component: Component, cache: Path = DEFAULT_CACHE, go: str | None = None) -> bool:
    return (binary_dir(component, cache, go) / ".complete").is_file()


def module_dir(component: Component) -> Path:
    """The upstream module's directory in the Go module cache."""
    import json
    proc = subprocess.run(["go", "mod", "download", "-json", f"{component.module}@{component.version}"],
                          cwd=component.directory, env=go_env(), capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"go mod download {component.module}@{component.version} failed: {proc.stderr.strip()}")
    return Path(json.loads(proc.stdout)["Dir"])


def go_caches_empty() -> bool:
    """True on a fresh machine: no Go build cache and no downloaded modules yet (a cold build)."""
    proc = subprocess.run(["go", "env", "GOCACHE", "GOMODCACHE"], capture_output=True, text=True)
    if proc.returncode != 0:
        return True
    gocache, gomodcache = (Path(p) for p in proc.stdout.split())
    built = any(gocache.glob("??")) if gocache.is_dir() else False
    return not built and not (gomodcache / "cache" / "download").is_dir()


def go_env(cgo: bool = False) -> dict:
    env = dict(os.environ)
    # go.sum (committed) pins every module's checksum; the checksum database is not reachable offline
    env.update({"CGO_ENABLED": "1" if cgo else "0", "GOFLAGS": "-mod=readonly -buildvcs=false -trimpath", "GOSUMDB": "off",
                "GOTOOLCHAIN": "local"})
    return env


def _heartbeat(label: str, stop: threading.Event, start: float, out) -> None:
    while not stop.wait(30):
        print(f"[e2e-build]   ... {label}: {time.monotonic() - start:.0f} s", file=out, flush=True)


def default_exec_name(package: str) -> str:
    """The file name ``go build -o <dir>/`` gives a main package: its last path element, or the one before a
    major-version suffix (``sigs.k8s.io/kustomize/kustomize/v5`` -> ``kustomize``)."""
    parts = package.rstrip("/").split("/")
    if len(parts) > 1 and re.fullmatch(r"v(?:[2-9]|[1-9]\d+)", parts[-1]):  # Go's isVersionElement: v2, v10, not v1
        return parts[-2]
    return parts[-1]


def _go_build(component: Component, staging: Path, label: str) -> None:
    """All of a component's binaries in one ``go build``: one action graph, so one binary links while the next
    one's packages compile (on two cores, separate builds leave a core idle through each link)."""
    packages = list(component.binaries.values())
    out = staging / ".go-build"
    out.mkdir()
    cmd = ["go", "build", "-ldflags", " ".join(component.linker_flags()), "-o", f"{out}/", *packages]
    proc = subprocess.run(cmd, cwd=component.directory, env=go_env(component.cgo), capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"building {', '.join(component.binaries)} of {label} failed:\n$ {' '.join(cmd)}\n"
                         f"{proc.stderr.strip()[-4000:]}")
    for binary, package in component.binaries.items():
        built = out / default_exec_name(package)
        if not built.is_file():
            raise BuildError(f"go build of {label} left no {built.name} for {package} in {out}")
        built.rename(staging / binary)
    out.rmdir()


def build_one(component: Component, cache: Path = DEFAULT_CACHE, out=sys.stderr) -> Path:
    go = go_version()
    target = binary_dir(component, cache, go)
    if (target / ".complete").is_file():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{component.name}-", dir=cache))
    label = f"{component.name} ({component.module} {component.version})"
    print(f"[e2e-build] building {label}: {', '.join(component.binaries)}", file=out, flush=True)
    start = time.monotonic()
    stop = threading.Event()
    threading.Thread(target=_heartbeat, args=(label, stop, start, out), daemon=True).start()
    try:
        _go_build(component, staging, label)
        for alias, binary in component.aliases.items():
            (staging / alias).symlink_to(binary)
        if component.module_files:
            source = module_dir(component)
            for name, rel in component.module_files.items():
                shutil.copyfile(source / rel, staging / name)
                (staging / name).chmod(0o755)
        (staging / ".complete").write_text(f"{component.module} {component.version}\n")
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    finally:
        stop.set()
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    print(f"[e2e-build] built {component.name} in {time.monotonic() - start:.0f} s", file=out, flush=True)
    return target


BUILT_NOW: dict[str, float] = {}  # component -> seconds, for the components the last build() compiled


def build(names: list[str] | None = None, cache: Path = DEFAULT_CACHE, out=sys.stderr) -> dict[str, Path]:
    """Build (or find) every component; {binary name: path}."""
    unknown = set(names or ()) - set(BY_NAME)
    if unknown:
        raise BuildError(f"unknown component(s) {', '.join(sorted(unknown))}; known: {', '.join(BY_NAME)}")
    paths = {}
    BUILT_NOW.clear()
    for component in COMPONENTS:
        if names and component.name not in names:
            continue
        was_built = is_built(component, cache)
        start = time.monotonic()
        directory = build_one(component, cache, out)
        if not was_built:
            BUILT_NOW[component.name] = time.monotonic() - start
        for alias, binary in component.aliases.items():  # an alias added after the build: a name, not a build
            if not (directory / alias).is_symlink():
                (directory / alias).symlink_to(binary)
        for binary in [*component.binaries, *component.aliases]:
            paths[binary] = directory / binary
    if BUILT_NOW:
        print(f"[e2e-build] built {len(BUILT_NOW)} component(s) in {sum(BUILT_NOW.values()):.0f} s", file=out,
              flush=True)
    return paths


def describe() -> list[tuple[str, str, str, str]]:
    """(component, module, version built, version pinned) for the README and the e2e banner."""
    return [(c.name, c.module, c.version, c.pinned or c.version) for c in COMPONENTS]
