"""The run directory of the e2e cluster (.cache/e2e/run, git-ignored) and its state file."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUN_DIR = Path(os.environ.get("E2E_RUN_DIR", ROOT / ".cache" / "e2e" / "run"))
RESULTS = ROOT / ".cache" / "e2e" / "results.json"


def state_file(run_dir: Path = RUN_DIR) -> Path:
    return run_dir / "state.json"


def read(run_dir: Path = RUN_DIR) -> dict:
    try:
        return json.loads(state_file(run_dir).read_text())
    except (OSError, ValueError):
        return {}


def write(run_dir: Path, **fields) -> dict:
    data = read(run_dir)
    data.update(fields, updated=time.time())
    tmp = state_file(run_dir).with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str))
    tmp.replace(state_file(run_dir))
    return data


def supervisor_alive(data: dict) -> bool:
    pid = data.get("pid")
    if not pid:
        return False
    try:
        os.kill(int(pid), 0)
    except (ProcessLookupError, ValueError):
        return False
    except PermissionError:
        return True
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().find(b"e2e") >= 0
    except OSError:
        return False
