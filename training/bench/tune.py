"""``python -m training.bench.tune`` (``make bench-tune``): ASHA vs FIFO on the same search.

Both experiments run through ``mode: tune`` (:mod:`training.tune`) with the same spec except the scheduler: the
same search space and search seed (so the same sampled configs, in the same order), the same ``numSamples``,
the same trainer (the built-in CNN, narrower, on the digits; one worker per trial, ``trialRunner: local``) and the
same epoch budget. Reported per scheduler: the best ``val_loss`` reached, the best trial's ``val_accuracy``, total
trial-iterations (epochs trained over all trials), trials stopped early and wall time (``Tuner.fit``). Target:
ASHA within 1% of FIFO's best metric with at most 50% of its trial-iterations.

Output (``--out``, default ``results/bench-tune``): ``bench-tune.json``, ``bench-tune.md``, ``bench-tune.png``,
each experiment's ``<scheduler>-trials.csv`` and ``<scheduler>-result.json``. The experiments' folders (with the
checkpoints) go to a temporary folder, removed at the end unless ``--keep``.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import io
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from training.bench.settings import TuneSettings
from training.job.parts import thaw

DEFAULT_OUT = "results/bench-tune"


def say(message: str) -> None:
    print(f"[bench-tune] {message}", file=sys.stderr, flush=True)


def spec_for(settings: TuneSettings, scheduler: str, storage: str) -> dict[str, Any]:
    tune_cfg: dict[str, Any] = {
        "searchSpace": thaw(settings.search_space),
        "scheduler": scheduler,
        "numSamples": settings.num_samples,
        "metric": settings.metric,
        "mode": settings.mode,
        "seed": settings.search_seed,
        "trialRunner": "local",
        "keepCheckpointsPerTrial": 1,
    }
    if scheduler == "asha":
        tune_cfg["schedulerConfig"] = thaw(settings.asha)
    if settings.concurrent:
        tune_cfg["maxConcurrentTrials"] = int(settings.concurrent)
    return {
        "name": f"bench-tune-{scheduler}",
        "mode": "tune",
        "config": {"numWorkers": 1, "resourcesPerWorker": {"cpu": 1}},
        "trainConfig": {"framework": settings.framework, "epochs": settings.epochs, "model": thaw(settings.model)},
        "data": thaw(settings.data),
        "checkpoint": {"storagePath": storage},
        "tuneConfig": tune_cfg,
    }


def _progress(trial_dir: Path) -> list[dict[str, Any]]:
    path = trial_dir / "progress.csv"
    if not path.exists():
        return []
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _num(v) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def summarize(result: dict[str, Any], settings: TuneSettings) -> dict[str, Any]:
    """What the comparison needs from one experiment's result JSON and its trials' progress.csv."""
    r = result["results"]
    metric, mode = settings.metric, settings.mode
    better = (lambda a, b: a < b) if mode == "min" else (lambda a, b: a > b)
    run = Path(result["runPath"])
    events, curves = [], []
    best_val_acc, best_seen = None, None
    for trial in r["trials"]:
        rows = _progress(run / f"trial-{trial['trial']:03d}")
        points = []
        for row in rows:
            v, ep = _num(row.get(metric)), _num(row.get("epoch"))
            if v is None or ep is None:
                continue
            points.append([int(ep), v])
            events.append(((_num(row.get("timestamp")) or 0.0, _num(row.get("time_total_s")) or 0.0), v))
            if trial["trialId"] == r.get("bestTrialId") and (best_seen is None or better(v, best_seen)):
                best_seen, best_val_acc = v, _num(row.get("val_accuracy"))
        curves.append({"trial": trial["trial"], "status": trial["status"], "config": trial["config"], "points": points})
    events.sort(key=lambda e: e[0])
    best_so_far, best = [], None
    for i, (_, v) in enumerate(events, 1):
        if best is None or better(v, best):
            best = v
        best_so_far.append([i, best])
    return {
        "status": result["status"],
        "bestMetric": r.get("bestMetric"),
        "bestConfig": r.get("bestConfig"),
        "bestTrialId": r.get("bestTrialId"),
        "bestValAccuracy": best_val_acc,
        "numTrials": r["numTrials"],
        "earlyStoppedTrials": r["earlyStoppedTrials"],
        "totalTrialIterations": r["totalTrialIterations"],
        "wallSeconds": result["trainingTime"],
        "rayInitSeconds": (result.get("timings") or {}).get("rayInit"),
        "bestSoFar": best_so_far,
        "curves": curves,
    }


def compare(fifo: dict[str, Any], asha: dict[str, Any], mode: str) -> dict[str, Any]:
    fb, ab = fifo["bestMetric"], asha["bestMetric"]
    out: dict[str, Any] = {}
    if isinstance(fb, (int, float)) and isinstance(ab, (int, float)) and fb != 0:
        # Positive = ASHA is worse than FIFO, relative to FIFO's value.
        gap = (ab - fb) / abs(fb) if mode == "min" else (fb - ab) / abs(fb)
        out["bestMetricRelativeGap"] = round(gap, 5)
        out["targetBestWithin1Percent"] = gap <= 0.01
    out["iterationsRatio"] = round(asha["totalTrialIterations"] / max(fifo["totalTrialIterations"], 1), 4)
    out["targetIterationsAtMostHalf"] = out["iterationsRatio"] <= 0.5
    out["wallRatio"] = round(asha["wallSeconds"] / max(fifo["wallSeconds"], 1e-9), 4)
    out["sameBestConfig"] = fifo.get("bestConfig") == asha.get("bestConfig")
    out["targetsMet"] = bool(out.get("targetBestWithin1Percent")) and out["targetIterationsAtMostHalf"]
    return out


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m training.bench.tune", description=__doc__.split("\n\n")[0])
    p.add_argument("--tiny", action="store_true", help="seconds-long run for tests: 4 trials, 3 epochs, small CNN")
    p.add_argument("--num-samples", type=int, help="trials per scheduler; default 16 (--tiny: 4)")
    p.add_argument("--epochs", type=int, help="epochs per trial (ASHA's max_t); default 9 (--tiny: 3)")
    p.add_argument("--seed", type=int, default=7, help="search seed (the same configs for both schedulers)")
    p.add_argument("--concurrent", type=int, help="trials at once (default: as many as the CPUs hold)")
    p.add_argument("--out", default=DEFAULT_OUT, help=f"output folder; default {DEFAULT_OUT}")
    p.add_argument("--keep", action="store_true", help="keep the experiments' folders (checkpoints) under --out")
    return p


def _run_scheduler(scheduler: str, settings: TuneSettings, work: Path, out: Path) -> tuple[int, dict | None, TuneSettings]:
    """One search with this scheduler: (exit code, its summary or None when it failed, the settings with the
    concurrency the search used)."""
    import yaml

    from training.runner import run

    spec = spec_for(settings, scheduler, str(work / "storage"))
    spec_path = work / f"{scheduler}.yaml"
    spec_path.write_text(yaml.safe_dump(spec, sort_keys=False))
    say(f"{scheduler}: {settings.num_samples} trials x up to {settings.epochs} epochs")
    with contextlib.redirect_stdout(io.StringIO()):  # run() prints the result JSON; it is on disk
        code, result, _ = run(str(spec_path), output=str(out / f"{scheduler}-result.json"))
    if code != 0 or result["status"] not in ("success", "partial"):
        say(f"{scheduler} failed: {result.get('error')}")
        return code or 1, None, settings
    shutil.copyfile(result["results"]["trialsCsv"], out / f"{scheduler}-trials.csv")
    s = summarize(result, settings)
    say(f"{scheduler}: best {settings.metric} {s['bestMetric']:.4f}, {s['totalTrialIterations']} "
        f"trial-iterations, {s['earlyStoppedTrials']} of {s['numTrials']} stopped early, {s['wallSeconds']:.1f} s")
    used = result["results"].get("maxConcurrentTrials", settings.concurrent)
    return 0, s, dataclasses.replace(settings, concurrent=used)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)

    from training.bench.measure import machine_info
    from training.bench.report import write_tune_report
    from training.runtime.cluster import RaySession
    from training.runtime.env import apply_quiet_defaults

    apply_quiet_defaults()
    settings = TuneSettings.from_args(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = out / "experiments" if args.keep else Path(tempfile.mkdtemp(prefix="bench-tune-"))
    if args.keep and work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    summaries: dict[str, dict[str, Any]] = {}
    try:
        with RaySession():
            for scheduler in ("fifo", "asha"):
                code, summary, settings = _run_scheduler(scheduler, settings, work, out)
                if summary is None:
                    return code
                summaries[scheduler] = summary
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    report = {
        "benchmark": "bench-tune",
        "createdAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "durationSeconds": round(time.time() - t0, 1),
        "machine": machine_info(),
        "settings": settings.to_json(),
        "schedulers": summaries,
        "comparison": compare(summaries["fifo"], summaries["asha"], settings.mode),
        "targets": {"bestMetricWithin": 0.01, "iterationsRatioAtMost": 0.5},
    }
    paths = write_tune_report(report, out)
    c = report["comparison"]
    say(f"ASHA vs FIFO: best {settings.metric} gap {c.get('bestMetricRelativeGap')}, iterations ratio "
        f"{c['iterationsRatio']}, wall ratio {c['wallRatio']}; targets {'met' if c['targetsMet'] else 'NOT met'}; "
        + ", ".join(str(p) for p in paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
