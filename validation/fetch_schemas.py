"""``make schemas``: download the pinned upstream CRDs into a local schema cache (default ``.cache/schemas``).

Pinned releases (versions.yaml): KubeRay, Argo CD, the Kubeflow training-operator (kubeflow/trainer) and Kueue
(kubernetes-sigs/kueue), fetched from raw.githubusercontent.com at those tags with urllib. Each file is checked against
its SHA-256 (taken from the offline copy in ``../shared/crds``, which is byte-for-byte upstream; Kueue's from its Go
module ``sigs.k8s.io/kueue`` at the tag, whose ``config/components/crd/bases`` is byte-for-byte the repository's), and
nothing is written unless every file downloaded and matched, so a failed run never leaves a half-filled cache. The
layout mirrors ``../shared/crds``: ``<dest>/kuberay-v1.7.0/ray.io_rayclusters.yaml``,
``<dest>/kueue-v0.17.0/kueue.x-k8s.io_clusterqueues.yaml`` etc. (Without it, validation reads Kueue's CRDs from Go's
module cache: ``module_crds``.)
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from generator import versions

from .schema_location import DEFAULT_SCHEMA_LOCATION, SCHEMA_LOCATION_ENV

RAW_BASE_URL = "https://raw.githubusercontent.com"


@dataclass(frozen=True)
class PinnedFile:
    repo: str  # owner/name on GitHub
    tag: str
    path: str  # path inside the repository
    folder: str  # folder under the destination
    sha256: str

    def url(self, base_url: str = RAW_BASE_URL) -> str:
        return f"{base_url.rstrip('/')}/{self.repo}/{self.tag}/{self.path}"

    @property
    def relative_dest(self) -> str:
        return f"{self.folder}/{self.path.rsplit('/', 1)[-1]}"


_V = versions.pinned()
_KUBERAY = ("ray-project/kuberay", f"v{_V.kuberay}", "ray-operator/config/crd/bases", f"kuberay-v{_V.kuberay}")
_ARGO_CD = ("argoproj/argo-cd", _V.argocd, "manifests/crds", f"argo-cd-{_V.argocd}")
# the v1 training-operator's repository was renamed kubeflow/trainer (its v1.9.x tags are there)
_TRAINING = ("kubeflow/trainer", _V.training_operator, "manifests/base/crds",
             f"training-operator-{_V.training_operator}")
_KUEUE = ("kubernetes-sigs/kueue", _V.kueue, "config/components/crd/bases", f"kueue-{_V.kueue}")
_KUEUE_KINDS = ("resourceflavors", "clusterqueues", "localqueues", "admissionchecks", "multikueueconfigs",
                "multikueueclusters", "workloads", "cohorts", "topologies", "workloadpriorityclasses",
                "provisioningrequestconfigs")
# The SHA-256 of each file at its pinned release (the offline copy in ../shared/crds is byte-for-byte upstream;
# Kueue's are `sha256sum <go mod download -json sigs.k8s.io/kueue@<tag>: Dir>/config/components/crd/bases/*.yaml`).
# Changing a version in versions.yaml needs its checksums here: `make schemas` refuses a file it has none for.
_SHA256 = {
    ("kuberay-v1.7.0", "ray.io_rayclusters.yaml"): "c44704442eef0c6721ad40c1d66782c8bd3fdab9d3344306a5820910a679baa1",
    ("kuberay-v1.7.0", "ray.io_rayjobs.yaml"): "01a5cf3b17c1769fda44af7e82debcd98722f0c27b9ab84d084681c6649121f5",
    ("kuberay-v1.7.0", "ray.io_rayservices.yaml"): "0a8fc325e6e22b9231c1f282b309555e2ecf94227ca20a03df3d1d9a403907ab",
    ("kuberay-v1.7.0", "ray.io_raycronjobs.yaml"): "31c2c753bba01f7e8e89cb8e8c504131b58ee42090ca536d87f5ac27605a568e",
    ("argo-cd-v3.5.1", "application-crd.yaml"): "5dde0e229249b6b707beb98674c1deae3949d5c319a6c45b9f5a80c99618e40c",
    ("argo-cd-v3.5.1", "applicationset-crd.yaml"): "7d282054f41ca2b71a22bab04a8caf0000e07e53a62432e6ea292dae5ab4f07d",
    ("argo-cd-v3.5.1", "appproject-crd.yaml"): "ab225266944322750136f1198d93786e4a79a0e43c8d149abfba44da30a3eac8",
    ("training-operator-v1.9.4", "kubeflow.org_pytorchjobs.yaml"):
        "8b8a8a719cc94173169290251e817f7ac2bb425c20b6c2fa813397bcf4e932ed",
    ("kueue-v0.17.0", "kueue.x-k8s.io_resourceflavors.yaml"):
        "19e339c47e9ca3fa2c9eeddd27715a512f765c4794ed859733408a9715720173",
    ("kueue-v0.17.0", "kueue.x-k8s.io_clusterqueues.yaml"):
        "666f5466bf85ace8c494a9a790ba87c4c18ddf3ab3eb9f18c878927d396869f3",
    ("kueue-v0.17.0", "kueue.x-k8s.io_localqueues.yaml"):
        "5c5768caeb499bb869bb8f90e4f5293170b183a4a74b618f1f182264d9ce4437",
    ("kueue-v0.17.0", "kueue.x-k8s.io_admissionchecks.yaml"):
        "312793990d5108ce9a4de194c493708516cb59f6f7cf0a558d51890911059dbb",
    ("kueue-v0.17.0", "kueue.x-k8s.io_multikueueconfigs.yaml"):
        "af4c24fe9418749448001179df67e273f3256f08aa6aabb07215b7c3c5a8bd98",
    ("kueue-v0.17.0", "kueue.x-k8s.io_multikueueclusters.yaml"):
        "45d7b81f34f383c214d3395cf771b49bf1ba0964734e69d7b8d02f992d60ebf8",
    ("kueue-v0.17.0", "kueue.x-k8s.io_workloads.yaml"):
        "d4f5c22bff5074b8801412011d6d2fd68050e2868ce4dd0bba2ad523431af36d",
    ("kueue-v0.17.0", "kueue.x-k8s.io_cohorts.yaml"):
        "25fce81a539c3c22a031a501c3c9382f763221016f624c7e227eb47d3abb6f59",
    ("kueue-v0.17.0", "kueue.x-k8s.io_topologies.yaml"):
        "0debce5049a3931db15c99d8acddb0cc509c24fedc98f0bb0235095f7092fc11",
    ("kueue-v0.17.0", "kueue.x-k8s.io_workloadpriorityclasses.yaml"):
        "b6c089d45938adf9afd21da05a6c613f29408989aa66afc09db189eb724db5a3",
    ("kueue-v0.17.0", "kueue.x-k8s.io_provisioningrequestconfigs.yaml"):
        "9bcf3081565fd449708a1df3aa0fcaee803e4a1eeadb7c3fe082b97545d6d988",
}


def _pin(source: tuple[str, str, str, str], name: str) -> PinnedFile:
    repo, tag, directory, folder = source
    return PinnedFile(repo, tag, f"{directory}/{name}", folder, _SHA256.get((folder, name), ""))


PINNED_FILES: tuple[PinnedFile, ...] = (
    *(_pin(_KUBERAY, name) for name in ("ray.io_rayclusters.yaml", "ray.io_rayjobs.yaml", "ray.io_rayservices.yaml",
                                        "ray.io_raycronjobs.yaml")),
    *(_pin(_ARGO_CD, name) for name in ("application-crd.yaml", "applicationset-crd.yaml", "appproject-crd.yaml")),
    _pin(_TRAINING, "kubeflow.org_pytorchjobs.yaml"),
    *(_pin(_KUEUE, f"kueue.x-k8s.io_{kinds}.yaml") for kinds in _KUEUE_KINDS),
)
# The release folders of the pinned versions: where a schema location holds several releases of one source
# (../shared/crds has training-operator-v1.9.0 and -v1.9.4), validation reads these first.
PINNED_FOLDERS = tuple(sorted({p.folder for p in PINNED_FILES}))

Opener = Callable[..., object]  # urllib.request.urlopen-like: opener(url, timeout=...) -> response with .read()


class FetchError(RuntimeError):
    pass


def _offline_hint() -> str:
    return (f"`make schemas` needs network access to raw.githubusercontent.com. Offline, point "
            f"{SCHEMA_LOCATION_ENV} (or --schema-location) at a directory of CRD YAML files instead, "
            f"e.g. {SCHEMA_LOCATION_ENV}=../shared/crds (several: DIR1{os.pathsep}DIR2); Kueue's CRDs are read from "
            f"Go's module cache when Go is installed")


def _download(url: str, opener: Opener, timeout: float) -> bytes:
    try:
        response = opener(url, timeout=timeout)
        try:
            return response.read()  # type: ignore[attr-defined]
        finally:
            close = getattr(response, "close", None)
            if close:
                close()
    except urllib.error.HTTPError as exc:
        raise FetchError(f"could not download {url}: HTTP {exc.code} {exc.reason}\n{_offline_hint()}") from exc
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise FetchError(f"could not download {url}: {reason}\n{_offline_hint()}") from exc


def fetch_schemas(dest: str | os.PathLike[str] = DEFAULT_SCHEMA_LOCATION, *, base_url: str = RAW_BASE_URL,
                  opener: Opener | None = None, timeout: float = 60, verify: bool = True,
                  files: Sequence[PinnedFile] = PINNED_FILES,
                  log: Callable[[str], None] = lambda _msg: None) -> list[Path]:
    """Download ``files`` into ``dest`` (all or nothing); returns the paths written."""
    dest = Path(dest)
    opener = opener or urllib.request.urlopen
    contents: list[tuple[PinnedFile, bytes]] = []
    unpinned = [p.relative_dest for p in files if verify and not p.sha256]
    if unpinned:
        raise FetchError(f"no SHA-256 for {', '.join(unpinned)} (versions.yaml names a release validation/"
                         f"fetch_schemas.py has no checksums for: add them to _SHA256)")
    for pinned in files:
        url = pinned.url(base_url)
        log(f"fetching {url}")
        body = _download(url, opener, timeout)
        digest = hashlib.sha256(body).hexdigest()
        if verify and digest != pinned.sha256:
            raise FetchError(f"{url}: SHA-256 {digest} does not match the pinned {pinned.sha256}; refusing to "
                             f"use it (is the tag or the base URL right?)")
        contents.append((pinned, body))
    written = []
    for pinned, body in contents:
        target = dest / pinned.relative_dest
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=target.parent, prefix=".partial-", delete=False) as handle:
            handle.write(body)
        os.replace(handle.name, target)
        written.append(target)
    return written
