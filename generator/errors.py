"""Errors meant for people: each says where the fault is and what was expected."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Location:
    """Where a value came from: a file, a 1-based line, and its key path in that file."""

    file: str
    line: int | None = None
    path: tuple = ()
    column: int | None = None

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        if self.line is not None and self.column is not None:
            where += f":{self.column}"
        return f"{where}: {dotted(self.path)}" if self.path else where


def dotted(path) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


@dataclass(frozen=True)
class ValueFault:
    """The parts of a bad value's message, kept apart so that callers need not parse the text: the key path
    (``field``), what is wrong (``problem``), the hint that follows (`` (expected: integer)``), and the apps whose
    values it broke, as (app, chart) pairs (none for an environment's own structure)."""

    field: str
    problem: str
    hint: str = ""
    apps: tuple[tuple[str, str], ...] = ()

    def message(self, what: str) -> str:
        return f"{self.field}: {self.problem} in {what}{self.hint}"


class RenderError(Exception):
    """A fault in the inputs (or a failing tool) that stops the render; str() is the whole message. ``fault`` holds
    a bad value's parts (key path, problem, app, chart) when the error is about one."""

    def __init__(self, message: str, location: Location | None = None, fault: ValueFault | None = None):
        self.location = location
        self.fault = fault
        super().__init__(f"{location}: {message}" if location else message)


class RenderErrors(RenderError):
    """Several faults found in one pass, reported together."""

    def __init__(self, errors: list[RenderError]):
        self.errors = errors
        Exception.__init__(self, "\n".join(str(e) for e in errors))
