"""The training image's build context: every COPY of training/Dockerfile finds its source in the context that
training/Dockerfile.dockerignore leaves (the bug that kept the image from ever building: schema_messages/ was
copied but ignored), and the ignore rules behave as Docker's (moby/patternmatcher) do."""
from __future__ import annotations

import re

import pytest

from images import context
from tests.support import REPO

DOCKERFILE = REPO / "training" / "Dockerfile"
IGNOREFILE = REPO / "training" / "Dockerfile.dockerignore"


def copy_sources(text: str) -> list[str]:
    """The context paths COPY reads (not COPY --from=<stage>), continuation lines joined."""
    text = re.sub(r"\\\n", " ", text)
    sources = []
    for line in text.splitlines():
        words = line.split()
        if not words or words[0].upper() not in ("COPY", "ADD"):
            continue
        args = [w for w in words[1:] if not w.startswith("--")]
        if any(w.startswith("--from") for w in words[1:]):
            continue
        sources += args[:-1]
    return sources


def test_every_copy_source_is_in_the_context():
    files = context.files(REPO, IGNOREFILE)
    sources = copy_sources(DOCKERFILE.read_text())
    assert sources, "no COPY lines found"
    missing = [s for s in sources if not any(f == s.rstrip("/") or f.startswith(s.rstrip("/") + "/") for f in files)]
    assert not missing, f"training/Dockerfile copies {missing}, which training/Dockerfile.dockerignore leaves out"


def test_the_context_holds_only_what_the_image_needs():
    files = context.files(REPO, IGNOREFILE)
    tops = {f.split("/", 1)[0] for f in files}
    assert tops == {"pyproject.toml", "README.md", "training", "schema_messages"}, tops
    assert not any("__pycache__" in f or f.endswith(".pyc") for f in files)


@pytest.mark.parametrize("rules, path, left_out", [
    ("*\n!training/\n", "training/job.py", False),
    ("*\n!training/\n", "generator/cli.py", True),
    ("*\n!training/\ntraining/**/__pycache__\n", "training/a/b/__pycache__/x.pyc", True),
    ("*\n!training/\ntraining/**/*.pyc\n", "training/x.pyc", True),
    ("docs\n", "docs/e2e.md", True),          # a directory pattern leaves its content out
    ("*.md\n", "docs/e2e.md", False),         # `*` does not cross a /
    ("**/*.md\n", "docs/e2e.md", True),
    ("/README.md\n", "README.md", True),      # a leading / is the context's root
    ("# a comment\n\n", "README.md", False),
])
def test_ignore_rules_follow_dockers(rules, path, left_out):
    assert context.excluded(path, context.parse(rules)) is left_out


def test_a_context_without_schema_messages_is_what_broke_the_build(tmp_path):
    """The old ignore file, for the record: COPY schema_messages had nothing to copy."""
    old = tmp_path / "old.dockerignore"
    old.write_text("*\n!pyproject.toml\n!README.md\n!training/\n")
    files = context.files(REPO, old)
    assert not any(f.startswith("schema_messages/") for f in files)
    assert "schema_messages" in copy_sources(DOCKERFILE.read_text())
