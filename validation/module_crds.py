"""CRDs read from a pinned upstream Go module, in place in Go's module cache: where a kind's schema comes from when
no schema location serves it and its project publishes its CRDs in its module.

Kueue (``kueue.x-k8s.io``) does: the module ``sigs.k8s.io/kueue`` at the version versions.yaml pins (``kueue``) holds
them under ``config/components/crd/bases`` (byte for byte the repository at that tag, which ``make schemas``
downloads). ``go mod download -json sigs.k8s.io/kueue@<pinned>`` names the module's directory: Go's module cache, or
the module proxy the first time (``make e2e-build`` builds Kueue from that module, so CI has it already), with the
module's checksum verified by Go. Validation asks only when a rendered kind of the group has no CRD under the
schema location(s); if Go is absent or the download fails, the kind stays without a schema (skipped, which counts
as a failure) and ``ModuleCrdsUnavailable`` says why and how to get the CRDs.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

from generator import versions

REPO_ROOT = Path(__file__).resolve().parent.parent
DOWNLOAD_TIMEOUT = 300  # seconds: the first download of a module through the proxy


class ModuleCrdsUnavailable(RuntimeError):
    """Go could not name the module's directory (Go absent, the download failed, no CRDs where expected)."""


@dataclass(frozen=True)
class ModuleCrds:
    name: str  # the project, for messages
    group: str  # the API group whose CRDs the module holds
    module: str
    version: str
    directory: str  # the CRDs' folder inside the module

    def describe(self) -> str:
        return f"{self.name}'s CRDs ({self.group}) from the Go module {self.module}@{self.version}"

    def how_to_get(self) -> str:
        return (f"Install Go (https://go.dev/dl/) where it can reach the module proxy once (`go mod download "
                f"{self.module}@{self.version}`; `make e2e-build` does it too), or run `make schemas` (network) to "
                f"download {self.name}'s CRDs into .cache/schemas")


SOURCES: tuple[ModuleCrds, ...] = (
    ModuleCrds("Kueue", "kueue.x-k8s.io", "sigs.k8s.io/kueue", versions.pinned().kueue, "config/components/crd/bases"),
)
_BY_GROUP = {source.group: source for source in SOURCES}
# Per process, successes and failures alike: every environment of a run asks at most once.
_FOUND: dict[ModuleCrds, Path | ModuleCrdsUnavailable] = {}


def source_for(api_version: str) -> ModuleCrds | None:
    """The module that holds the CRD of ``api_version``'s group, if one does."""
    return _BY_GROUP.get(api_version.split("/", 1)[0]) if "/" in api_version else None


def crd_directory(source: ModuleCrds, timeout: float = DOWNLOAD_TIMEOUT) -> Path:
    """The module's CRD folder in Go's module cache (downloaded first if needed); ``ModuleCrdsUnavailable`` else."""
    if source not in _FOUND:
        try:
            _FOUND[source] = _download(source, timeout)
        except ModuleCrdsUnavailable as exc:
            _FOUND[source] = exc
    found = _FOUND[source]
    if isinstance(found, ModuleCrdsUnavailable):
        raise found
    return found


def forget() -> None:
    """Ask Go again next time (tests that change PATH or Go's environment)."""
    _FOUND.clear()


def _download(source: ModuleCrds, timeout: float) -> Path:
    command = ["go", "mod", "download", "-json", f"{source.module}@{source.version}"]
    shown = " ".join(command)
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=REPO_ROOT)
    except FileNotFoundError:
        raise ModuleCrdsUnavailable("Go is not installed (no `go` on PATH)") from None
    except subprocess.TimeoutExpired:
        raise ModuleCrdsUnavailable(f"`{shown}` did not finish in {timeout:.0f} s") from None
    except OSError as exc:
        raise ModuleCrdsUnavailable(f"could not run `{shown}`: {exc}") from None
    try:
        info = json.loads(proc.stdout) if proc.stdout.strip() else {}
    except json.JSONDecodeError:
        info = {}
    if proc.returncode != 0 or not info.get("Dir"):
        error = info.get("Error") or proc.stderr.strip() or f"exit status {proc.returncode}"
        raise ModuleCrdsUnavailable(f"`{shown}` failed: {error}")
    directory = Path(info["Dir"]) / source.directory
    if not directory.is_dir() or not any(directory.glob(f"{source.group}_*.yaml")):
        raise ModuleCrdsUnavailable(f"{directory} holds no {source.group} CRD files (has the module moved them?)")
    return directory
