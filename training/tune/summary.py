"""The result of a search: one row per trial (Tune's results plus the journal of :mod:`training.tune.events`), the
per-trial CSV, the best trial and the run's status."""

from __future__ import annotations

import csv
import io
import math
import os
from typing import Any

from training.job.parts import Job, Tune, thaw
from training.runtime import storage
from training.tune.events import Journal, SearchState, fmt, say

TRIALS_CSV = "trials.csv"


def expected_trials(tcfg: Tune) -> int:
    n = tcfg.num_samples
    for param in tcfg.search_space:
        if param.type == "grid":
            n *= len(param.values)
    return n


def _status(events: list[dict[str, Any]], epoch: int, epochs: int) -> str:
    """completed / early_stopped / errored from the trial's last final event; running (cut off by an interruption)
    or pending (never started) without one."""
    final = [e for e in events if e["event"] in ("complete", "error")]
    if final:
        if final[-1]["event"] == "error":
            return "errored"
        return "completed" if epoch >= epochs else "early_stopped"
    return "running" if any(e["event"] == "start" for e in events) else "pending"


def _best_checkpoint(result, metric: str, mode: str) -> tuple[str | None, float | None, int | None]:
    best = (None, None, None)
    for ckpt, metrics in (result.best_checkpoints or []):
        v = (metrics or {}).get(metric)
        if isinstance(v, (int, float)) and (best[1] is None or (v > best[1] if mode == "max" else v < best[1])):
            best = (ckpt.path, v, (metrics or {}).get("epoch"))
    return best


def _best_value(result, metric: str, mode: str, events: list[dict[str, Any]]) -> float | None:
    """The trial's best value of the metric: from the journal's per-result record, else Tune's dataframe."""
    mine = [e["value"] for e in events if e["event"] == "result" and math.isfinite(e["value"])]
    if mine:
        return float(max(mine) if mode == "max" else min(mine))
    frame = result.metrics_dataframe
    if frame is None or metric not in frame or frame[metric].dropna().empty:
        return None
    column = frame[metric].dropna()
    return float(column.max() if mode == "max" else column.min())


def trial_rows(job: Job, grid, journal: Journal) -> list[dict[str, Any]]:
    """One row per trial of the experiment, by trial index."""
    metric, mode, epochs = job.tune.metric, job.tune.mode, job.training.epochs
    rows = []
    for result in grid:
        index = int(os.path.basename(str(result.path).rstrip("/")).rsplit("-", 1)[-1])
        events = journal.of(index)
        last = result.metrics or {}
        epoch = int(last.get("epoch", last.get("training_iteration", 0)) or 0)
        status = _status(events, epoch, epochs)
        best_ckpt, best_ckpt_value, best_epoch = _best_checkpoint(result, metric, mode)
        errors = [e for e in events if e["event"] == "error"]
        rows.append({
            "trialId": next((e["trialId"] for e in events), "") or last.get("trial_id") or "",
            "trial": index,
            "status": status,
            "config": dict(result.config or {}),
            "epochs": epoch,
            "iterations": int(last.get("training_iteration", 0) or 0),
            "lastMetric": last.get(metric),
            "bestMetric": _best_value(result, metric, mode, events),
            "bestEpoch": best_epoch,
            "bestCheckpointMetric": best_ckpt_value,
            "failures": sum(1 for e in events if e["event"] in ("recover", "error")),
            "timeTotalS": round(float(last.get("time_total_s", 0.0) or 0.0), 3),
            "checkpointPath": best_ckpt,
            "path": result.path,
            "error": (errors[-1].get("message") or "trial failed") if status == "errored" else "",
        })
    return sorted(rows, key=lambda r: r["trial"])


def _pbt_exploits(exp_path: str) -> int:
    """PBT logs one line per exploit (a trial continuing from another's checkpoint) to pbt_global.txt."""
    path = storage.join(exp_path, "pbt_global.txt")
    try:
        return sum(1 for ln in storage.read_bytes(path).decode().splitlines() if ln.strip()) if storage.exists(path) else 0
    except OSError:
        return 0


def write_csv(rows: list[dict[str, Any]], path: str, keys: list[str]) -> str:
    buf = io.StringIO()
    fields = ["trial", "trialId", "status"] + [f"config.{k}" for k in keys] + [
        "epochs", "iterations", "lastMetric", "bestMetric", "bestEpoch", "failures", "timeTotalS", "checkpointPath",
        "error"]
    w = csv.DictWriter(buf, fieldnames=fields, extrasaction="ignore")
    w.writeheader()
    for r in rows:
        flat = {**r, **{f"config.{k}": _csv_value(r["config"].get(k)) for k in keys}}
        w.writerow({k: ("" if flat.get(k) is None else flat.get(k)) for k in fields})
    storage.write_bytes(path, buf.getvalue().encode())
    return path


def _csv_value(v):
    if isinstance(v, float):
        return repr(v)
    return v


def summarize(job: Job, grid, search: SearchState, cluster: dict, fit_s: float) -> tuple[dict, int]:
    """The result of a search from Tune's results and this package's journal; the per-trial CSV is written."""
    from training.tune.trial import trial_job

    tcfg = job.tune
    metric, mode = tcfg.metric, tcfg.mode
    rows = trial_rows(job, grid, search.journal)
    keys = [p.key for p in tcfg.search_space]
    csv_path = write_csv(rows, storage.join(job.run_path, TRIALS_CSV), keys)
    counts = {s: sum(1 for r in rows if r["status"] == s) for s in ("completed", "early_stopped", "errored")}
    unfinished = [r for r in rows if r["status"] not in ("completed", "early_stopped", "errored")]
    never_started = 0 if search.abort else max(expected_trials(tcfg) - len(rows), 0)
    ranked = [r for r in rows if isinstance(r["bestMetric"], (int, float)) and math.isfinite(r["bestMetric"])]
    best = (max if mode == "max" else min)(ranked, key=lambda r: r["bestMetric"]) if ranked else None
    results: dict[str, Any] = {
        "numTrials": len(rows),
        "completedTrials": counts["completed"] + counts["early_stopped"],
        "trialsRanToEnd": counts["completed"],
        "earlyStoppedTrials": counts["early_stopped"],
        "erroredTrials": counts["errored"],
        "unfinishedTrials": len(unfinished) + never_started,
        "retriedTrials": sum(1 for r in rows if r["failures"] and r["status"] != "errored"),
        "trialFailures": sum(r["failures"] for r in rows),
        "totalTrialIterations": sum(r["iterations"] for r in rows),
        "metric": metric,
        "metricMode": mode,
        "scheduler": tcfg.scheduler,
        "schedulerConfig": thaw(tcfg.scheduler_config),
        "trialRunner": tcfg.trial_runner,
        "framework": job.training.framework,
        "numWorkers": job.workers.count if tcfg.trial_runner == "train" else 1,
        "trialsCsv": csv_path,
        **({"pbtExploits": _pbt_exploits(job.run_path)} if tcfg.scheduler == "pbt" else {}),
        "interrupted": bool(unfinished or never_started),
        "trials": [{k: r[k] for k in ("trial", "trialId", "status", "config", "epochs", "bestMetric", "failures")}
                   for r in rows],
    }
    out: dict[str, Any] = {"clusterStatus": cluster, "trainingTime": round(fit_s, 3), "runPath": job.run_path}
    if best is not None:
        results["bestConfig"] = dict(best["config"])
        results["bestMetric"] = float(best["bestMetric"])
        results["bestTrialId"] = best["trialId"]
        results["bestEpoch"] = best["bestEpoch"]
        results["bestTrainConfig"] = trial_job(job, best["config"], best["trialId"]).hyperparameters()
        if best["checkpointPath"]:
            out["checkpointPath"] = best["checkpointPath"]
            results["bestCheckpointMetric"] = best["bestCheckpointMetric"]
    status, code, error = _verdict(search, rows, counts, best, results)
    if error:
        out["error"] = {"type": "training", "message": error}
    out = {"status": status, "results": results, **out}
    say(f"{results['numTrials']} trial(s): {counts['completed']} ran to the end, {counts['early_stopped']} stopped "
        f"early, {counts['errored']} errored, {results['unfinishedTrials']} unfinished; {results['trialFailures']} failure(s) "
        f"retried or final; best {metric}={fmt(results.get('bestMetric'))} "
        f"({results.get('bestConfig')}); per-trial table {csv_path}")
    return out, code


def _verdict(search: SearchState, rows: list[dict], counts: dict[str, int], best, results: dict) -> tuple[str, int, str]:
    """The search's status, exit code and error message: stopped, every trial failed, no metric, partial (some
    trials errored or unfinished: --resume continues) or success."""
    if search.abort:
        return "error", 1, f"the search was stopped: {search.abort}"
    if not rows or counts["errored"] == len(rows):
        first = next((r["error"] for r in rows if r["error"]), "no trial ran")
        return "error", 1, f"all {len(rows)} trial(s) failed; first error: {first}"
    if best is None:
        return "error", 1, f"no trial reported {results['metric']}"
    if results["interrupted"]:
        say(f"experiment interrupted with {results['unfinishedTrials']} trial(s) unfinished: run again with "
            "--resume to continue (finished trials are kept)")
    if results["interrupted"] or counts["errored"]:
        return "partial", 0, ""
    return "success", 0, ""
