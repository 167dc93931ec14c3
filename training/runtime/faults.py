"""The test hooks, all in one place: faults injected into workers, an epoch ledger, an interrupted search.

They are read from the driver's environment once (:func:`from_environ`) and travel to the workers as a
:class:`TestHooks` value next to the job; nothing here runs unless one of these variables is set.

* ``TRAINING_FAULT_INJECTION=rank=1,epoch=3[,phase=mid|start][,delay=3][,trial=N]`` -- that rank's process exits
  (``os._exit``) at that epoch, once per run (a marker file records that it fired); in ``mode: tune`` only trial N
  (every trial without ``trial=``).
* ``TRAINING_EPOCH_LEDGER=path`` -- every rank appends its epoch events (start, end, killed) as JSON lines.
* ``TRAINING_TUNE_INTERRUPT=after_trials=N`` -- interrupt the search, as Ctrl+C does, once N trials finished.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from collections.abc import Mapping

FAULT_ENV = "TRAINING_FAULT_INJECTION"
LEDGER_ENV = "TRAINING_EPOCH_LEDGER"
INTERRUPT_ENV = "TRAINING_TUNE_INTERRUPT"
FAULT_MARKER = ".fault-injected"


@dataclasses.dataclass(frozen=True)
class FaultPlan:
    rank: int
    epoch: int
    phase: str = "mid"
    delay: float = 3.0
    trial: int | None = None
    marker: str = ""


@dataclasses.dataclass(frozen=True)
class TestHooks:
    __test__ = False  # not a pytest test class

    fault: FaultPlan | None = None
    ledger: str | None = None
    interrupt_after_trials: int | None = None

    def for_trial(self, index: int, trial_dir: str) -> TestHooks:
        """The hooks of one Tune trial: the fault only in the trial it names, with the marker in the trial's folder."""
        fault = self.fault
        if fault is not None:
            fault = (dataclasses.replace(fault, marker=os.path.join(trial_dir, FAULT_MARKER))
                     if fault.trial is None or fault.trial == index else None)
        return dataclasses.replace(self, fault=fault)


NO_HOOKS = TestHooks()


def _pairs(text: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in text.split(",") if "=" in part)


def from_environ(environ: Mapping[str, str], marker_dir: str) -> TestHooks:
    """The hooks the driver's environment asks for (``marker_dir``: where a fault records that it fired)."""
    fault = None
    if environ.get(FAULT_ENV):
        parts = _pairs(environ[FAULT_ENV])
        rank, epoch = int(parts.get("rank", 1)), int(parts.get("epoch", 2))
        fault = FaultPlan(rank=rank, epoch=epoch, phase=parts.get("phase", "mid"),
                          delay=float(parts.get("delay", 3.0)),
                          trial=int(parts["trial"]) if "trial" in parts else None,
                          marker=os.path.join(marker_dir, f".fault-injected-rank{rank}-epoch{epoch}"))
        print(f"[training] test hook {FAULT_ENV}: rank {rank} will exit at epoch {epoch} (once)",
              file=sys.stderr, flush=True)
    ledger = os.path.abspath(environ[LEDGER_ENV]) if environ.get(LEDGER_ENV) else None
    interrupt = environ.get(INTERRUPT_ENV, "")
    after = int(interrupt.split("=", 1)[1]) if interrupt.startswith("after_trials=") else None
    return TestHooks(fault=fault, ledger=ledger, interrupt_after_trials=after)


def record(hooks: TestHooks, rank: int, event: str, epoch: int, start_epoch: int) -> None:
    """Append one epoch event to the ledger, if there is one."""
    if not hooks.ledger:
        return
    line = json.dumps({"rank": rank, "pid": os.getpid(), "epoch": epoch, "event": event, "startEpoch": start_epoch,
                       "t": time.time()})
    with open(hooks.ledger, "a", encoding="utf-8") as fh:
        fh.write(line + "\n")


def maybe_fail(hooks: TestHooks, rank: int, epoch: int, phase: str, start_epoch: int, who: str) -> None:
    """Exit this process if the fault plan names this rank, epoch and phase and has not fired yet."""
    fault = hooks.fault
    if fault is None or (fault.rank, fault.epoch, fault.phase) != (rank, epoch, phase):
        return
    if os.path.exists(fault.marker):
        return
    os.makedirs(os.path.dirname(fault.marker), exist_ok=True)
    with open(fault.marker, "w", encoding="utf-8") as fh:
        fh.write(json.dumps({"pid": os.getpid(), "epoch": epoch, "rank": rank, "t": time.time()}))
    # Give Ray Train's controller time to register the previous checkpoint (its poll interval is well under this),
    # so that a test measures resume-from-latest rather than a race.
    time.sleep(fault.delay)
    record(hooks, rank, "killed", epoch, start_epoch)
    print(f"[train {who}] fault injection: rank {rank} exits at epoch {epoch}", file=sys.stderr, flush=True)
    os._exit(17)
