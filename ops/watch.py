"""make watch: follow a job until it ends; with --auto-retry N, a run that fails with a retryable failure (a hung
collective, a deadline: make diagnose says which) is retried the GitOps way (make retry --push), never more than
N times; a failure that needs a change (a bad spec, a missing image, ...) stops the watch with its diagnosis."""
from __future__ import annotations

import sys
import time
from pathlib import Path

from . import diagnose as diagnose_mod
from . import jobs as jobs_mod
from . import retry as retry_mod
from . import targets
from .targets import EXIT_NOT_HEALTHY, EXIT_OK, EXIT_TIMEOUT, Clients, Target


def watch(clients: Clients, target: Target, job: str, root: Path, auto_retry: int = 0, timeout: float = 86400,
          poll: float = 10, out=sys.stdout) -> int:
    start = time.monotonic()
    retries = 0
    seen_run, shown = None, None
    while time.monotonic() - start < timeout:
        run = jobs_mod.find(clients, target, job)
        if run.name != seen_run:
            print(f"[{time.monotonic() - start:5.0f} s] {job}: run {run.name}", file=out, flush=True)
            seen_run = run.name
        if run.state != shown:
            print(f"[{time.monotonic() - start:5.0f} s] {job}: {run.state}", file=out, flush=True)
            shown = run.state
        if run.succeeded:
            print(f"{job} succeeded (run {run.name}, {retries} retr{'y' if retries == 1 else 'ies'})", file=out)
            return EXIT_OK
        if run.finished:
            diagnosis = diagnose_mod.diagnose(clients, target, job)
            print(diagnose_mod.render(diagnosis), file=out, flush=True)
            if not diagnosis.retryable:
                print(f"{job} failed and is not retried: "
                      f"{'it needs a change (see fix)' if diagnosis.known else 'the failure is not a known one'}",
                      file=out)
                return EXIT_NOT_HEALTHY
            if retries >= auto_retry:
                print(f"{job} failed; {retries} of {auto_retry} retries used", file=out)
                return EXIT_NOT_HEALTHY
            retries += 1
            reason = ", ".join(f.failure.name for f in diagnosis.findings)
            fresh = targets.reload(root, target)
            retry_mod.retry(root, fresh, job, f"auto-retry {retries}/{auto_retry} after {reason}", push=True,
                            out=out)
            _wait_new_run(clients, target, job, run.name, timeout - (time.monotonic() - start), poll)
            continue
        time.sleep(poll)
    print(f"{job}: still {shown} after {timeout:.0f} s", file=out)
    return EXIT_TIMEOUT


def _wait_new_run(clients: Clients, target: Target, job: str, old: str, timeout: float, poll: float) -> None:
    deadline = time.monotonic() + max(0.0, timeout)
    while time.monotonic() < deadline:
        run = jobs_mod.find_current(clients, target, job)  # None while Argo CD has pruned the old, not made the new
        if run is not None and run.name != old:
            return
        time.sleep(poll)
