"""Results of schema validation, and how they are printed (one summary line per environment)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

VALID, INVALID, SKIPPED = "valid", "invalid", "skipped"


def display_path(path: Path | str) -> str:
    """A path relative to the current directory when it is below it, as given otherwise."""
    path = Path(path)
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


@dataclass(frozen=True)
class SchemaIssue:
    path: str  # where in the document, e.g. spec.headGroupSpec.template.spec.containers[0].image
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


@dataclass
class ResourceResult:
    file: str
    api_version: str
    kind: str
    name: str
    status: str  # VALID | INVALID | SKIPPED
    issues: list[SchemaIssue] = field(default_factory=list)
    allowed_skip_reason: str | None = None  # set when a skipped kind is in the reviewed allow-list

    @property
    def failed(self) -> bool:
        return self.status == INVALID or (self.status == SKIPPED and self.allowed_skip_reason is None)


@dataclass
class Report:
    env: str
    backend: str  # "in-process" or "kubeconform"
    kubernetes_version: str  # as declared by the environment
    builtin_schema_version: str  # the kubernetes-validate minor version used for built-in kinds
    schema_location: str
    results: list[ResourceResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def count(self, status: str) -> int:
        return sum(1 for r in self.results if r.status == status)

    @property
    def checked(self) -> int:
        return len(self.results)

    @property
    def valid(self) -> int:
        return self.count(VALID)

    @property
    def invalid(self) -> int:
        return self.count(INVALID)

    @property
    def skipped(self) -> int:
        return self.count(SKIPPED)

    @property
    def ok(self) -> bool:
        return not any(r.failed for r in self.results)

    def summary_line(self) -> str:
        return (f"{self.env}: {self.checked} resources checked, {self.valid} valid, {self.invalid} invalid, "
                f"{self.skipped} skipped")

    def detail_lines(self) -> list[str]:
        lines: list[str] = []
        for r in self.results:
            if r.status == INVALID:
                for issue in r.issues or [SchemaIssue("(document)", "invalid")]:
                    lines.append(f"  invalid: {r.file}: {issue}")
            elif r.status == SKIPPED:
                what = f"{r.api_version} {r.kind}".strip()
                if r.allowed_skip_reason is not None:
                    lines.append(f"  skipped (allow-listed: {r.allowed_skip_reason}): {r.file}: {what}")
                else:
                    for issue in r.issues:
                        lines.append(f"  skipped (counts as a failure): {r.file}: {issue}")
        lines += [f"  note: {note}" for note in self.notes]
        return lines

    def render(self) -> str:
        return "\n".join([self.summary_line(), *self.detail_lines()])
