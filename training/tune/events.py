"""What happened to each trial of a search, as this package saw it: Tune callbacks and their journal.

Tune's public results (``ResultGrid``) give each trial's config, metrics, checkpoints and error, but not whether a
stopped trial ran to its end, was stopped early by the scheduler, or was cut off by an interruption, nor how often
it was retried. The :class:`Progress` callback records those events (start, complete, recover, error) in
``<experiment>/trial-events.json`` as they happen; the summary reads them back, so a resumed experiment still knows
what its first run saw.

Tune pickles its callbacks into the experiment and brings the pickled ones back on ``Tuner.restore``; so the
callbacks keep only the experiment's name, and look up this run's settings (:class:`SearchState`) when Tune sets
them up: a resumed search never acts on the first run's settings.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
from typing import Any

from training.runtime import storage

JOURNAL_FILE = "trial-events.json"

#: The searches running in this process, by experiment name.
_SEARCHES: dict[str, SearchState] = {}


def say(message: str) -> None:
    print(f"[tune] {message}", file=sys.stderr, flush=True)


def fmt(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def trial_index(trial_id: str) -> int:
    try:
        return int(str(trial_id).rsplit("_", 1)[-1])
    except ValueError:
        return 0


class Journal:
    """The trial events of one experiment, saved whole after each event (local folder or storage URI)."""

    def __init__(self, experiment_path: str):
        self.path = storage.join(experiment_path, JOURNAL_FILE)
        self.events: list[dict[str, Any]] = []
        if storage.exists(self.path):
            try:
                self.events = list(json.loads(storage.read_bytes(self.path)))
            except (OSError, ValueError):
                say(f"warning: {self.path} is unreadable; trial statuses start afresh")

    def add(self, event: str, trial, **fields) -> None:
        self.events.append({"event": event, "trialId": trial.trial_id, "trial": trial_index(trial.trial_id),
                            **fields})
        storage.write_bytes(self.path, json.dumps(self.events, indent=0).encode())

    def of(self, index: int) -> list[dict[str, Any]]:
        return [e for e in self.events if e["trial"] == index]


@dataclasses.dataclass
class SearchState:
    """This run's settings and findings for one experiment (read by the callbacks, written by them)."""

    name: str
    metric: str
    epochs: int
    scheduler: str
    journal: Journal
    interrupt_after: int | None = None
    finished: int = 0
    interrupted: bool = False
    abort: str | None = None


def begin(state: SearchState) -> SearchState:
    _SEARCHES[state.name] = state
    return state


def end(name: str) -> SearchState | None:
    return _SEARCHES.pop(name, None)


class MetricNotReported(ValueError):
    """The trainer's report lacks ``tuneConfig.metric`` (a user trainer: checked at its first report). Every trial of
    that trainer would fail the same way: the search stops at the first."""


def _raised(trial, kind: type[BaseException]) -> bool:
    """Whether the trial's last error is (or was caused by) a ``kind``: by type, from the error Tune pickled."""
    try:
        err = trial.get_pickled_error()
    except Exception:  # noqa: BLE001 - an error that cannot be read back is not one of ours
        return False
    seen = set()
    while isinstance(err, BaseException) and id(err) not in seen:
        if isinstance(err, kind):  # a RayTaskError is also an instance of the cause's class
            return True
        seen.add(id(err))
        err = getattr(err, "cause", None) or err.__cause__
    return False


def _first_error_line(trial) -> str:
    path = getattr(trial, "error_file", None)
    text = ""
    try:
        if path and os.path.exists(path):
            with open(path, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
    except OSError:
        pass
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    for ln in reversed(lines):
        if "Error" in ln.split(":")[0] or "Exception" in ln.split(":")[0]:
            return ln[:500]
    return (lines[-1] if lines else "trial failed")[:500]


try:
    from ray.tune import Callback as _Callback
    from ray.tune.stopper import Stopper as _Stopper
except Exception:  # base classes only; the module imports without Ray
    _Callback = _Stopper = object


class Progress(_Callback):
    """Trial start / end / failure on stderr and in the journal (the trainers print each epoch themselves)."""

    def __init__(self, name: str):
        self.name = name

    def _state(self) -> SearchState | None:
        return _SEARCHES.get(self.name)

    def on_trial_start(self, iteration, trials, trial, **info):
        state = self._state()
        if state is not None:
            say(f"trial {trial.trial_id} started: {', '.join(f'{k}={fmt(v)}' for k, v in trial.config.items())}")
            state.journal.add("start", trial)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        # Each trial's own metric history: Tune's per-trial result.json can be empty after PBT paused and restarted
        # every trial (seen with synch PBT in Ray 2.60), and a trial that exploited another carries that one's
        # last result.
        state = self._state()
        value = result.get(state.metric) if state is not None else None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            epoch = int(result.get("epoch", result.get("training_iteration", 0)) or 0)
            state.journal.add("result", trial, epoch=epoch, value=float(value))

    def on_trial_complete(self, iteration, trials, trial, **info):
        state = self._state()
        if state is None:
            return
        last = trial.last_result or {}
        done = int(last.get("epoch", last.get("training_iteration", 0)) or 0)
        how = "finished" if done >= state.epochs else f"stopped early by {state.scheduler}"
        say(f"trial {trial.trial_id} {how} after epoch {done}: {state.metric}={fmt(last.get(state.metric))}")
        state.journal.add("complete", trial, epoch=done)
        state.finished += 1
        if state.interrupt_after is not None and state.finished >= state.interrupt_after and not state.interrupted:
            say(f"test hook: interrupting the experiment after {state.finished} finished trial(s)")
            state.interrupted = True
            os.kill(os.getpid(), signal.SIGUSR1)  # Tune's own "interrupted" path, as on Ctrl+C

    def on_trial_recover(self, iteration, trials, trial, **info):
        self._failed(trial, "recover", lambda msg: f"failed ({msg[:200]}); retrying from its latest checkpoint")

    def on_trial_error(self, iteration, trials, trial, **info):
        self._failed(trial, "error", lambda msg: f"failed for good: {msg}")

    def _failed(self, trial, event: str, says) -> None:
        """A trial failure on stderr and in the journal; one every trial would repeat stops the search."""
        state = self._state()
        if state is None:
            return
        msg = _first_error_line(trial)
        say(f"trial {trial.trial_id} {says(msg)}")
        state.journal.add(event, trial, message=msg)
        if state.abort is None and _raised(trial, MetricNotReported):
            # Every trial of this trainer would fail the same way: stop the search rather than retry.
            state.abort = msg


class Abort(_Stopper):
    """Stops the whole search when :class:`Progress` found a failure every trial would repeat."""

    def __init__(self, name: str):
        self.name = name

    def __call__(self, trial_id, result):
        return False

    def stop_all(self):
        state = _SEARCHES.get(self.name)
        return bool(state and state.abort)
