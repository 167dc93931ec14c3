"""Running kubeconform (when it is on PATH) with the same schemas as the in-process validator.

The schemas are written to a temporary directory in kubeconform's file layout,
``{{ .ResourceKind }}{{ .KindSuffix }}.json`` (e.g. ``raycluster-ray-v1.json``, ``service-v1.json``):

* CRD kinds: the CRD's ``openAPIV3Schema`` converted the same way as in-process (see ``crd_schemas``);
* built-in kinds: kubernetes-validate's strict schema for the selected version, made standalone (its definitions
  inlined under ``$defs``), so built-in kinds validate offline and identically on both paths.

Command::

    kubeconform -strict -summary -output json -kubernetes-version 1.34.0 \\
      -schema-location '<tmp>/{{ .ResourceKind }}{{ .KindSuffix }}.json' -schema-location default FILE...

The local location comes FIRST: kubeconform tries locations in order and stops at the first one that fails with
anything but "not found", so with ``default`` (an HTTPS registry) first, an offline run would fail every resource.
``default`` stays as the fallback for a kind that has no local schema.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .crd_schemas import kubeconform_filename
from .report import SchemaIssue
from .schema_errors import pointer_to_path

KUBECONFORM_BINARY = "kubeconform"
SCHEMA_FILE_TEMPLATE = "{{ .ResourceKind }}{{ .KindSuffix }}.json"


class KubeconformError(RuntimeError):
    """kubeconform could not be run or printed something that is not its JSON output."""


# Where `python -m e2e build` (make e2e-build) puts the kubeconform it builds from its Go module:
# .cache/e2e/bin/tools-<hash>/kubeconform under the repository root.
BUILT_GLOB = ".cache/e2e/bin/tools-*/kubeconform"


def find_kubeconform(path: str | None = None, root: Path | None = None) -> str | None:
    """The kubeconform executable on PATH (or on ``path``, a PATH-like string), else the one the e2e build made
    under ``root`` (the newest), if any."""
    found = shutil.which(KUBECONFORM_BINARY, path=path)
    if found or path is not None:
        return found
    root = root or Path(__file__).resolve().parent.parent
    built = sorted(root.glob(BUILT_GLOB), key=lambda p: p.stat().st_mtime)
    return str(built[-1]) if built and os.access(built[-1], os.X_OK) else None


def normalize_kube_version(version: str) -> str:
    """kubeconform wants ``X.Y.Z``: ``v1.34`` -> ``1.34.0``."""
    version = version.strip().lstrip("v")
    if re.fullmatch(r"\d+\.\d+", version):
        version += ".0"
    return version


def build_command(binary: str, kube_version: str, schema_dir: Path, files: Sequence[str]) -> list[str]:
    return [
        binary, "-strict", "-summary", "-output", "json",
        "-kubernetes-version", normalize_kube_version(kube_version),
        "-schema-location", f"{schema_dir}/{SCHEMA_FILE_TEMPLATE}",
        "-schema-location", "default",
        *files,
    ]


def write_schemas(schema_dir: Path, schemas: Iterable[tuple[str, str, dict]]) -> list[Path]:
    """Write ``(kind, apiVersion, schema)`` triples as kubeconform schema files; returns the files written."""
    written = []
    schema_dir.mkdir(parents=True, exist_ok=True)
    for kind, api_version, schema in schemas:
        target = schema_dir / kubeconform_filename(kind, api_version)
        target.write_text(json.dumps(schema, indent=1, sort_keys=True), encoding="utf-8")
        written.append(target)
    return written


@dataclass
class KubeconformResult:
    filename: str
    kind: str
    name: str
    version: str
    status: str  # statusValid | statusInvalid | statusError | statusSkipped (old versions: VALID, INVALID, ...)
    issues: list[SchemaIssue] = field(default_factory=list)

    @property
    def outcome(self) -> str:
        status = self.status.lower().removeprefix("status")
        return {"valid": "valid", "invalid": "invalid", "error": "error", "skipped": "skipped",
                "empty": "empty"}.get(status, "error")


@dataclass
class KubeconformOutput:
    results: list[KubeconformResult]
    summary: dict[str, int]


def parse_output(stdout: str) -> KubeconformOutput:
    """Parse ``-output json -summary``: ``{"resources": [...], "summary": {"valid": N, ...}}``.

    Newer kubeconform versions add ``validationErrors: [{"path": "/spec/x", "msg": "..."}]`` to each invalid
    resource; older ones only give ``msg``.
    """
    try:
        data = json.loads(stdout)
    except json.JSONDecodeError as exc:
        raise KubeconformError(f"kubeconform printed something that is not JSON: {stdout[:500]!r}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("resources", []), list):
        raise KubeconformError(f"unexpected kubeconform output: {stdout[:500]!r}")
    results = []
    for item in data.get("resources") or []:
        issues = [SchemaIssue(pointer_to_path(str(e.get("path", ""))), str(e.get("msg", "")).strip())
                  for e in item.get("validationErrors") or [] if isinstance(e, dict)]
        msg = str(item.get("msg") or "").strip()
        if not issues and msg:
            issues = [SchemaIssue("(document)", msg)]
        results.append(KubeconformResult(filename=str(item.get("filename", "")), kind=str(item.get("kind", "")),
                                         name=str(item.get("name", "")), version=str(item.get("version", "")),
                                         status=str(item.get("status", "")), issues=issues))
    summary = {k: int(v) for k, v in (data.get("summary") or {}).items() if isinstance(v, int)}
    return KubeconformOutput(results=results, summary=summary)


def run_kubeconform(binary: str, kube_version: str, schema_dir: Path, files: Sequence[str],
                    env: Mapping[str, str] | None = None, timeout: float = 600) -> KubeconformOutput:
    command = build_command(binary, kube_version, schema_dir, files)
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              env=dict(os.environ if env is None else env))
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise KubeconformError(f"could not run {' '.join(command[:2])} ...: {exc}") from exc
    # Exit status 1 just means "some resource is invalid"; anything unparseable is a real failure.
    if not proc.stdout.strip():
        raise KubeconformError(f"kubeconform exited {proc.returncode} without output: {proc.stderr.strip()[:500]}")
    return parse_output(proc.stdout)


def result_for(results: Sequence[KubeconformResult], path: Path) -> KubeconformResult | None:
    wanted = str(path)
    for result in results:
        if result.filename == wanted or _same_file(result.filename, path):
            return result
    return None


def _same_file(name: str, path: Path) -> bool:
    try:
        return Path(name).resolve() == path.resolve()
    except OSError:
        return False


def describe(result: KubeconformResult) -> list[SchemaIssue]:
    if result.issues:
        return result.issues
    return [SchemaIssue("(document)", f"kubeconform status {result.status}")]

