"""The warm Ray of bench-train: one local Ray started once, in a process of its own, that every warm run joins (as a
RayJob's entrypoint joins its cluster)."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from pathlib import Path

from training.bench.plan import child_env

WARM_PREFIX = "WARM_RAY_ADDRESS "


def warm_host() -> int:
    """The warm Ray's own process: start a local Ray, print its address, keep it until stdin closes."""
    from training.runtime.env import apply_quiet_defaults

    apply_quiet_defaults()
    import ray

    from training.runtime.cluster import export_import_path

    export_import_path()
    ray.init(address="local", include_dashboard=True, logging_level="WARNING")
    # A local Ray turns token authentication on (RAY_AUTH_MODE=token in this process, the token in ~/.ray): a driver
    # joining by address needs the same mode, so the runs get it with the address.
    joining_env = {k: os.environ[k] for k in ("RAY_AUTH_MODE",) if k in os.environ}
    print(WARM_PREFIX + json.dumps({"address": ray.get_runtime_context().gcs_address, "env": joining_env}), flush=True)
    sys.stdin.read()
    ray.shutdown()
    return 0


class WarmRay:
    """One local Ray, started once in a process of its own, that every warm run joins (as a RayJob's entrypoint joins
    its cluster); stopped when the benchmark ends, also when it fails. ``address`` given: join that one instead."""

    def __init__(self, log_path: Path, address: str | None = None, timeout: float = 180):
        self.log_path, self.address, self.timeout = log_path, address, timeout
        self.env: dict[str, str] = {}  # what a driver joining it needs in its environment
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> WarmRay:
        if self.address:
            return self
        log = open(self.log_path, "w", encoding="utf-8")  # noqa: SIM115 -- the child writes to it until __exit__
        self.proc = subprocess.Popen([sys.executable, "-m", "training.bench.train", "--warm-host"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
                                     env=child_env())
        log.close()
        ready, _, _ = select.select([self.proc.stdout], [], [], self.timeout)
        line = self.proc.stdout.readline() if ready else ""
        if not line.startswith(WARM_PREFIX):
            self.__exit__(None, None, None)
            tail = self.log_path.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"the warm Ray did not start; log {self.log_path}:\n{tail}")
        joined = json.loads(line[len(WARM_PREFIX):])
        self.address, self.env = joined["address"], joined["env"]
        return self

    def __exit__(self, *exc) -> None:
        if self.proc is None:
            return
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None
