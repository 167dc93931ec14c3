"""The search space of a ``mode: tune`` spec: what each search-space key sets (:func:`target_of`), and what the schema
cannot check of the search, on the typed job (:func:`check_search`); :func:`training.job.defaults.normalize_tune`
builds the typed search with its defaults. Runs before Ray is imported, so every bad search space, scheduler option
or metric is reported before any trial starts, naming the field.

Search-space keys name trainConfig fields:

* ``lr``, ``batchSize``, ``seed``: trainConfig's own fields (every framework);
* ``model.filters``, ``model.dense``, ``model.convDropout``, ``model.denseDropout``: the built-in CNN
  (pytorch, tensorflow);
* ``xgboost.<param>``: an xgboost.train parameter (xgboost);
* ``params.<name>`` (or a bare ``<name>``) with ``trainConfig.trainerPath``: ``ctx.params[name]`` of a user trainer.

Distributions: ``loguniform`` / ``uniform`` (min, max), ``quniform`` (min, max, q), ``randint`` (min, max, both
inclusive), ``choice`` (values, sampled), ``grid`` (values, every one: the grid is repeated ``numSamples`` times).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from training.errors import SpecError
from training.frameworks import registry
from training.job.parts import Job, Tune

#: Filled in by Tune itself for every report.
TUNE_METRICS = ("training_iteration", "time_total_s", "time_this_iter_s")

# key -> (kind, lower bound, lower inclusive, upper bound); model.* only for a framework with the built-in CNN
_INF = math.inf
TOP_KEYS = {
    "lr": ("float", 0.0, False, _INF),
    "batchSize": ("int", 1, True, _INF),
    "seed": ("int", 0, True, _INF),
}
MODEL_KEYS = {
    "model.filters": ("intlist", 1, True, _INF),
    "model.dense": ("int", 1, True, _INF),
    "model.convDropout": ("float", 0.0, True, 0.95),
    "model.denseDropout": ("float", 0.0, True, 0.95),
}


def _err(msg: str, field: str) -> SpecError:
    return SpecError(f"{field}: {msg}", field=field)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def target_of(key: str, framework: str, user_trainer: bool, field: str) -> tuple[str, tuple]:
    """The job path a search-space key sets, and its (kind, bounds); ``SpecError`` when the trainer has no such knob."""
    fw = registry.get(framework)
    own = {f.params_block for f in registry.FRAMEWORKS.values() if f.params_block}  # xgboost.<param>
    head, _, rest = key.partition(".")
    if key in TOP_KEYS:
        return key, TOP_KEYS[key]
    if key in MODEL_KEYS and not user_trainer:
        if not fw.builtin_model:
            cnn = ", ".join(f.name for f in registry.FRAMEWORKS.values() if f.builtin_model)
            raise _err(f"{key} belongs to the built-in CNN ({cnn}), not to the {framework} trainer", field)
        return key, MODEL_KEYS[key]
    if head in own and rest and not user_trainer:
        if fw.params_block != head:
            raise _err(f"{key} is an {head} parameter but trainConfig.framework is {framework}", field)
        return key, ("any", None, True, None)
    if key.startswith("params.") and len(key) > len("params."):
        if not user_trainer:
            raise _err(f"{key} is read by a user trainer (trainConfig.trainerPath); the built-in {framework} "
                       "trainer has no params", field)
        return key, ("any", None, True, None)
    if user_trainer and "." not in key:
        return "params." + key, ("any", None, True, None)
    allowed = ["lr", "batchSize", "seed"]
    if fw.builtin_model:
        allowed += list(MODEL_KEYS)
    if fw.params_block:
        allowed.append(f"{fw.params_block}.<param>")
    raise _err(f"{key!r} is not a hyperparameter of the built-in {framework} trainer; tune one of "
               f"{', '.join(allowed)} (or use trainConfig.trainerPath and params.<name>)", field)


def _check_value(v: Any, kind: str, lo, lo_incl: bool, hi, field: str, key: str) -> None:
    if kind == "any":
        return
    if kind == "intlist":
        if not isinstance(v, list) or not v or not all(_is_int(x) and x >= 1 for x in v) or len(v) > 6:
            raise _err(f"{key} takes lists of 1-6 positive integers (filters per conv block), got {v!r}", field)
        return
    if kind == "int" and not (_is_int(v) or (isinstance(v, float) and v.is_integer())):
        raise _err(f"{key} takes integers, got {v!r}", field)
    if not _is_num(v):
        raise _err(f"{key} takes numbers, got {v!r}", field)
    if (v < lo) or (v == lo and not lo_incl) or v > hi:
        lo_s = f"{'>=' if lo_incl else '>'} {lo:g}"
        hi_s = f" and <= {hi:g}" if hi != _INF else ""
        raise _err(f"{key} must be {lo_s}{hi_s}, got {v!r}", field)


def check_distribution(key: str, dist: Mapping[str, Any], info: tuple, field: str) -> None:
    """Value checks for one search-space entry (the schema has already checked its shape)."""
    kind, lo, lo_incl, hi = info
    t = dist["type"]
    takes = {"loguniform": ("min", "max"), "uniform": ("min", "max"), "quniform": ("min", "max", "q"),
             "randint": ("min", "max"), "choice": ("values",), "grid": ("values",)}[t]
    stray = sorted(k for k in dist if k not in takes and k not in ("type", "target", "kind"))
    if stray:
        raise _err(f"{t} takes {', '.join(takes)}, not {', '.join(stray)}", f"{field}.{stray[0]}")
    if t in ("choice", "grid"):
        values = dist["values"]
        for i, v in enumerate(values):
            _check_value(v, kind, lo, lo_incl, hi, f"{field}.values[{i}]", key)
        return
    if kind == "intlist":
        raise _err(f"{key} takes lists: use choice or grid, not {t}", f"{field}.type")
    mn, mx = dist["min"], dist["max"]
    if t == "randint":
        if mn > mx:
            raise _err(f"min ({mn}) > max ({mx})", f"{field}.min")
    elif mn >= mx:
        raise _err(f"min ({mn:g}) must be below max ({mx:g})" if mn != mx else
                   f"min and max are both {mn:g}: a constant belongs in trainConfig, not in the search space",
                   f"{field}.min")
    if t == "loguniform" and mn <= 0:
        raise _err(f"loguniform needs min > 0, got {mn:g}", f"{field}.min")
    if t == "quniform":
        q = dist["q"]
        if q > (mx - mn):
            raise _err(f"q ({q:g}) is larger than max - min ({mx - mn:g})", f"{field}.q")
    if kind == "int":
        if t in ("loguniform", "uniform"):
            raise _err(f"{key} takes integers: use randint, quniform with an integer q, choice or grid, not {t}",
                       f"{field}.type")
        if t == "quniform" and not (float(dist["q"]).is_integer() and float(mn).is_integer()):
            raise _err(f"{key} takes integers: quniform needs an integer q and min", f"{field}.q")
    if kind != "any":
        _check_value(mn, "float" if kind == "float" else kind, lo, lo_incl, hi, f"{field}.min", key)
        _check_value(mx, "float" if kind == "float" else kind, lo, lo_incl, hi, f"{field}.max", key)


def check_search(job: Job) -> None:
    """Everything about the search of a ``mode: tune`` job the schema cannot say, on the typed job (normalized:
    what the spec left out is the job's default, written once)."""
    tcfg, training = job.tune, job.training
    if not tcfg.search_space:
        raise _err("is empty or missing: name at least one hyperparameter to tune "
                   "(e.g. lr: {type: loguniform, min: 1.0e-4, max: 1.0e-1})", "tuneConfig.searchSpace")
    targets: dict[str, str] = {}
    for param in tcfg.search_space:
        field = f"tuneConfig.searchSpace.{param.key}"
        if param.target in targets:
            raise _err(f"sets {param.target} again (already set by {targets[param.target]})", field)
        targets[param.target] = param.key
        _, info = target_of(param.key, training.framework, bool(training.trainer_path), field)
        check_distribution(param.key, param.as_spec(), info, field)
    for name in ("metric", "mode"):
        if not getattr(tcfg, name):
            raise _err("is required for mode: tune" + (" (min or max)" if name == "mode" else
                       " (what the trainer reports, e.g. val_loss)"), f"tuneConfig.{name}")
    if not training.trainer_path:
        reported = registry.get(training.framework).reported
        if tcfg.metric not in reported + TUNE_METRICS:
            raise _err(f"the built-in {training.framework} trainer never reports {tcfg.metric!r}; it reports "
                       f"{', '.join(reported)}", "tuneConfig.metric")
    _check_scheduler(tcfg, training.epochs)
    workers = job.workers.count
    if tcfg.trial_runner == "local" and workers > 1:  # auto never resolves to local for more than one worker
        raise _err(f"local runs each trial in one process (one worker) but config.numWorkers is {workers}; "
                   "use trialRunner: train (each trial a Ray Train run) or numWorkers: 1", "tuneConfig.trialRunner")
    if tcfg.trial_runner == "local" and tcfg.trial_cpu <= 0:
        raise _err("a local trial trains in its own process and needs cpu > 0", "tuneConfig.resourcesPerTrial.cpu")


SCHEDULER_OPTIONS = {
    "asha": ("gracePeriod", "reductionFactor", "maxT", "brackets"),
    "median": ("gracePeriod", "minSamplesRequired"),
    "pbt": ("perturbationInterval", "quantileFraction", "resampleProbability", "synch"),
    "fifo": (),
}


def _check_scheduler(tcfg: Tune, epochs: int) -> None:
    """The scheduler's options (its defaults filled in; options of another scheduler kept as written) against the
    epochs a trial trains."""
    scheduler, opts = tcfg.scheduler, tcfg.scheduler_config
    misplaced = sorted(set(opts) - set(SCHEDULER_OPTIONS[scheduler]))
    if misplaced:
        raise _err(f"{', '.join(misplaced)} is not an option of scheduler {scheduler} (its options: "
                   f"{', '.join(SCHEDULER_OPTIONS[scheduler]) or 'none'})", f"tuneConfig.schedulerConfig.{misplaced[0]}")
    max_t = opts.get("maxT", epochs)
    if scheduler in ("asha", "median"):
        grace = opts["gracePeriod"]
        if grace > max_t:
            raise _err(f"gracePeriod ({grace}) exceeds maxT ({max_t}, default trainConfig.epochs)",
                       "tuneConfig.schedulerConfig.gracePeriod")
    if scheduler == "asha" and max_t > epochs:
        raise _err(f"maxT ({max_t}) exceeds trainConfig.epochs ({epochs}): no trial trains that long",
                   "tuneConfig.schedulerConfig.maxT")
    if scheduler == "pbt":
        if all(p.type == "grid" for p in tcfg.search_space):
            raise _err("pbt perturbs hyperparameters between epochs: give it at least one non-grid search-space "
                       "entry", "tuneConfig.searchSpace")
        interval = opts["perturbationInterval"]
        if interval >= epochs:
            raise _err(f"perturbationInterval ({interval}) must be below trainConfig.epochs ({epochs}), or pbt never "
                       "perturbs", "tuneConfig.schedulerConfig.perturbationInterval")
