"""What a build context holds after its ignore file, by Docker's rules (moby/patternmatcher, which buildah shares):
patterns are cleaned paths relative to the context; `*` and `?` stay within one path element, `**` spans any
number of them; `!` re-includes; the last pattern that matches a path (or one of its parent directories) decides.
"""
from __future__ import annotations

import os
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Pattern:
    text: str
    regex: re.Pattern
    exclusion: bool   # a `!` line: re-includes what it matches


def parse(text: str) -> list[Pattern]:
    patterns = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        exclusion = line.startswith("!")
        body = posixpath.normpath(line[1:].strip() if exclusion else line).lstrip("/")
        patterns.append(Pattern(body, re.compile(_regex(body)), exclusion))
    return patterns


def _regex(pattern: str) -> str:
    out, i = "^", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return out + "$"


def excluded(path: str, patterns: list[Pattern]) -> bool:
    """Is `path` (relative, with /) left out of the context?"""
    parents = [path]
    while "/" in parents[-1]:
        parents.append(parents[-1].rsplit("/", 1)[0])
    verdict = False
    for pattern in patterns:
        if any(pattern.regex.match(p) for p in parents):
            verdict = not pattern.exclusion
    return verdict


def files(root: Path, ignorefile: Path) -> list[str]:
    """The files of the context, sorted, as paths relative to root."""
    patterns = parse(ignorefile.read_text())
    reincluded = [p.text for p in patterns if p.exclusion]
    found = []
    for directory, dirs, names in os.walk(root):
        rel_dir = os.path.relpath(directory, root)
        rel_dir = "" if rel_dir == "." else rel_dir + "/"
        # a directory left out with nothing re-included below it is not walked (.venv, .cache, .git)
        dirs[:] = sorted(d for d in dirs if not excluded(rel_dir + d, patterns)
                         or any(r.startswith(rel_dir + d + "/") or r == rel_dir + d for r in reincluded))
        found += [rel_dir + n for n in names if not excluded(rel_dir + n, patterns)]
    return sorted(found)
