"""Reading the committed render (apps/<env>/, argocd/) from ops: through libyaml, PyYAML's C loader, as the generator
writes and validation/ reads them. Status, fleet and bootstrap read every rendered file of an environment each time;
with the pure-Python loader that parse was most of their own time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read(path: Path) -> Any:
    """The one document of a rendered file (yaml.safe_load's result; {} for an empty file)."""
    return yaml.load(path.read_text(), Loader=_LOADER) or {}


def read_all(path: Path) -> list[Any]:
    """Every non-empty document of a file."""
    return [doc for doc in yaml.load_all(path.read_text(), Loader=_LOADER) if doc]
