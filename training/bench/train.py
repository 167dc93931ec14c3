"""``python -m training.bench.train`` (``make bench-train``): what Ray Train buys on this machine.

The same model (the built-in CNN of :mod:`training.frameworks.pytorch` / :mod:`training.frameworks.tensorflow`), the same data
(:mod:`training.runtime.data`, digits by default, or synthetic CIFAR-shaped tensors) and the same epochs, trained

* plain, single process, with 1 thread and with 2 threads (PyTorch: ``torch.set_num_threads``; TensorFlow:
  intra/inter-op threads) -- no Ray anywhere in the process;
* with Ray Train on 1 worker and on 2 workers (TorchTrainer with DDP over gloo; TensorflowTrainer with
  MultiWorkerMirroredStrategy), 1 CPU per worker: Ray pins each worker to one thread (``OMP_NUM_THREADS=1``);
  *cold*: each run starts its own local Ray, as a first ``make train`` does; *warm*: every run joins one Ray the
  benchmark started once, as a RayJob's entrypoint joins its cluster (``ray-Nw-warm``; ``--no-warm`` leaves them
  out, ``--warm-address`` joins a Ray that is already running).

The global batch is the same everywhere (``--batch-size``, the training spec's ``batchSize``): N workers train
batch / N each on 1/N of the data, so every configuration runs the same number of optimizer steps on the same
gradient (DDP and MWMS average over workers) -- a per-worker batch would give N workers N times fewer steps per
epoch and a lower accuracy after the same epochs. Each configuration runs in a fresh process, ``--repeats`` times
(interleaved, so that machine noise spreads over all of them), and the medians are reported:

* ``wall_s``: process start -> trained model evaluated (everything a user waits for, cold start included);
* ``startup_s`` (time to first step): process start -> end of the first training step, and where its seconds go
  (imports, ``ray.init``, worker group start and process group / TF_CONFIG, data, model, the first step itself);
* ``steady_samples_per_s``: training samples per second after the first epoch (warm-up) to the last step, all
  workers together -- the throughput that start-up does not blur;
* final validation accuracy, and the difference from the 1-thread baseline.

Speedup and efficiency (speedup / workers) are against the 1-thread baseline (the benchmark brief's definition); the
equal-CPU ratio compares Ray on N workers with the plain baseline on N threads -- the honest comparison, since
N workers hold N CPUs.

The library: ``settings`` (what is asked, typed, as JSON), ``plan`` (the configurations, each run in a fresh process),
``loops`` (the timed loops; one configuration in this process), ``measure`` (figures, medians, the comparison),
``warm`` (the warm Ray), ``report`` (JSON, markdown, plot). This module is its command line.

Output (``--out``, default ``results/bench-train``): ``bench-train.json``, ``bench-train.md``, ``bench-train.png``
and the runs' logs. With ``RAY_ADDRESS`` set, the Ray runs join that cluster (the plain ones run here).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from training.bench.loops import CHILD_START, now, process_start_time, run_one
from training.bench.measure import DEFINITIONS, aggregate, compare, machine_info, measure
from training.bench.plan import config_for, plan, run_plan, say
from training.bench.report import write_train_report
from training.bench.settings import FRAMEWORKS, RESULT_PREFIX, Config, TrainSettings
from training.bench.warm import WarmRay, warm_host

DEFAULT_OUT = "results/bench-train"
#: What ops and the tests take from here (the library's modules have them): the one place a caller need know.
__all__ = ["DEFINITIONS", "RESULT_PREFIX", "TrainSettings", "aggregate", "compare", "machine_info", "main", "measure"]


def _int_list(text: str) -> list[int]:
    values = sorted({int(x) for x in text.split(",") if x.strip()})
    if not values or values[0] < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: positive integers, comma-separated")
    return values


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m training.bench.train", description=__doc__.split("\n\n")[0])
    p.add_argument("--tiny", action="store_true", help="seconds-long run for tests: 256 samples, small CNN, 1 epoch, 1 repeat")
    p.add_argument("--repeats", type=int, help="runs per configuration (median reported); default 3 (--tiny: 1)")
    p.add_argument("--epochs", type=int, help="epochs per run (the first is warm-up); default 5 (--tiny: 1)")
    p.add_argument("--batch-size", type=int, default=64,
                   help="global batch of one step (N workers train batch/N each), as the spec's batchSize; default 64")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--data", choices=["digits", "synthetic"], default="digits",
                   help="digits (1,437 train / 360 val, 8x8x1) or synthetic CIFAR-shaped tensors (32x32x3)")
    p.add_argument("--num-samples", type=int, default=4096, help="synthetic: training samples")
    p.add_argument("--frameworks", type=lambda s: [x for x in s.split(",") if x], default=list(FRAMEWORKS),
                   help="comma-separated: pytorch,tensorflow")
    p.add_argument("--workers", type=_int_list, default=[1, 2],
                   help="Ray Train worker counts (1 CPU each), comma-separated; default 1,2")
    p.add_argument("--threads", type=_int_list, default=[1, 2],
                   help="plain baseline thread counts, comma-separated (1 is the baseline); default 1,2")
    p.add_argument("--out", default=DEFAULT_OUT, help=f"output folder; default {DEFAULT_OUT}")
    p.add_argument("--ray-address", default=os.environ.get("RAY_ADDRESS"),
                   help="join this Ray cluster for the Ray runs (default: $RAY_ADDRESS, else a local Ray per run)")
    p.add_argument("--no-warm", dest="warm", action="store_false",
                   help="leave out the warm runs (Ray Train joining one Ray started once by the benchmark)")
    p.add_argument("--warm-address", metavar="ADDRESS",
                   help="the warm runs join this Ray instead of one the benchmark starts")
    p.add_argument("--timeout", type=float, default=1800, help="seconds per run before giving up")
    p.add_argument("--only", metavar="KEY",
                   help="run this one configuration in this process (pytorch/plain-1t, pytorch/ray-2w, ...) and "
                        "print its raw result on a line starting with 'BENCH_RESULT ' (a cluster job of "
                        "make bench-cluster; the Ray runs join $RAY_ADDRESS, which a Ray job sets)")
    p.add_argument("--one", help=argparse.SUPPRESS)
    p.add_argument("--warm-host", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--spawn", type=float, help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)

    if args.warm_host:
        return warm_host()
    if args.one:  # a run's own process (plan.run_child starts it)
        payload = json.loads(args.one)
        raw = run_one(Config.of(payload["config"]), TrainSettings.of(payload["settings"]), args.spawn or CHILD_START,
                      payload.get("rayAddress"))
        print(RESULT_PREFIX + json.dumps(raw), flush=True)
        return 0

    if args.only:
        return run_only(args, p)
    bad = [f for f in args.frameworks if f not in FRAMEWORKS]
    if bad:
        p.error(f"unknown framework(s) {bad}; choose from {', '.join(FRAMEWORKS)}")
    if 1 not in args.threads:
        p.error("--threads must include 1: the 1-thread plain run is the baseline")
    settings = TrainSettings.from_args(args)
    configs = plan(settings)
    out = Path(args.out)
    (out / "logs").mkdir(parents=True, exist_ok=True)
    say(f"{len(configs)} configuration(s) x {settings.repeats} repeat(s), {settings.epochs} epoch(s), "
        f"data {settings.data['source']}, global batch {settings.batch_size}; cold Ray runs "
        + (f"join {args.ray_address}" if args.ray_address else "start a local Ray each")
        + ("; warm runs join " + (args.warm_address or "one Ray started once") if settings.warm else ""))
    t0 = now()
    # The cold runs first, with no other Ray on the machine; then the warm Ray is started once for the warm runs.
    runs, raws = run_plan([c for c in configs if not c.warm], settings, args.ray_address, out / "logs", args.timeout)
    warm_configs = [c for c in configs if c.warm]
    if warm_configs:
        with WarmRay(out / "logs" / "warm-ray.log", args.warm_address) as warm:
            more = run_plan(warm_configs, settings, warm.address, out / "logs", args.timeout, warm.env)
        runs, raws = runs + more[0], raws + more[1]
    agg = aggregate(runs, configs)
    report = {
        "benchmark": "bench-train",
        "createdAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "durationSeconds": round(now() - t0, 1),
        "machine": machine_info(),
        "rayAddress": args.ray_address or "local (one per Ray run)",
        "warmRayAddress": (args.warm_address or "local (one for every warm run)") if warm_configs else None,
        "settings": settings.to_json(),
        "definitions": DEFINITIONS,
        "configurations": agg,
        "comparison": compare(agg, settings),
        "runs": runs,
        "raw": raws,
    }
    paths = write_train_report(report, out)
    say(f"done in {report['durationSeconds']:.0f} s: " + ", ".join(str(p) for p in paths))
    return 0


def run_only(args, p: argparse.ArgumentParser) -> int:
    """``--only KEY``: one configuration in this process, its raw result printed (a job of make bench-cluster)."""
    try:
        cfg = config_for(args.only)
    except ValueError as exc:
        p.error(str(exc))
    settings = TrainSettings.from_args(args).one_run()  # one configuration: no warm runs
    say(f"{cfg.key}: {settings.epochs} epoch(s), data {settings.data['source']}, global batch "
        f"{settings.batch_size}" + (f"; Ray at {args.ray_address}" if cfg.kind == "ray" and args.ray_address else ""))
    raw = run_one(cfg, settings, process_start_time() or CHILD_START, args.ray_address if cfg.kind == "ray" else None)
    raw["settings"], raw["machine"] = settings.to_json(), machine_info()
    print(RESULT_PREFIX + json.dumps(raw), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
