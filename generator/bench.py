"""make bench-render: where rendering time goes, and how it grows with the number of jobs.

1. The repository's own environments, rendered serially (one helm call at a time) so that the time inside
   helm and the generator's own time add up to the wall time: overhead = wall - helm, as a ratio of helm.
   Then the same render with parallel helm calls (the default).
2. A generated repository: 4 environments x N jobs (N = 50, 100, 200), the real charts, rendered in parallel:
   wall time per N and per job, to see that time grows linearly with jobs.
Each figure is the median of several runs. Writes results/bench-render.json and a PNG plot.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import yaml

from . import render

ROOT = Path(__file__).resolve().parent.parent


def _timed_render(root: Path, workers: int, out_parent: Path):
    out = Path(tempfile.mkdtemp(dir=out_parent))
    try:
        stats = render.render(root, None, out, workers)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return stats


def measure(root: Path, workers: int, repeats: int, tmp: Path) -> dict:
    runs = [_timed_render(root, workers, tmp) for _ in range(repeats)]
    wall = statistics.median(r.wall_seconds for r in runs)
    helm_s = statistics.median(r.helm_seconds for r in runs)
    return {"workers": workers, "apps": runs[0].apps, "files": runs[0].files, "wall_s": round(wall, 3),
            "helm_s": round(helm_s, 3), "runs": repeats}


def synthetic_repo(dest: Path, jobs: int, envs: int = 4) -> Path:
    """The real charts and base layer, `envs` environments of `jobs` jobs each (alternating CPU/GPU shapes)."""
    dest.mkdir(parents=True)
    shutil.copytree(ROOT / "charts", dest / "charts", symlinks=True)
    (dest / "environments").mkdir()
    shutil.copy(ROOT / "environments" / "base.yaml", dest / "environments" / "base.yaml")
    for e in range(envs):
        template = "eks.yaml" if e % 2 else "minikube.yaml"
        doc = yaml.safe_load((ROOT / "environments" / template).read_text())
        doc["jobs"] = {f"job-{j:04d}": {"job": {"spec": {"name": f"job-{j:04d}", "mode": "train",
                                                         "trainConfig": {"framework": "pytorch"}}}}
                       for j in range(jobs)}
        (dest / "environments" / f"env{e}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return dest


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m generator.bench", description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--jobs", type=int, nargs="+", default=[50, 100, 200], help="jobs per environment")
    parser.add_argument("--out", default=str(ROOT / "results"))
    args = parser.parse_args(argv)
    workers = max(2, os.cpu_count() or 2)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    result = {"cpus": os.cpu_count(), "workers": workers}

    with tempfile.TemporaryDirectory(prefix="bench-render-") as tmp_s:
        tmp = Path(tmp_s)
        print(f"[1/2] this repository's environments, {args.repeats} runs each", flush=True)
        serial = measure(ROOT, 1, args.repeats, tmp)
        parallel = measure(ROOT, workers, args.repeats, tmp)
        overhead = serial["wall_s"] - serial["helm_s"]
        result["repository"] = {"serial": serial, "parallel": parallel, "overhead_s": round(overhead, 3),
                                "overhead_ratio": round(overhead / serial["helm_s"], 3)}
        print(f"  {serial['apps']} apps, {serial['files']} files")
        print(f"  serial:   wall {serial['wall_s']:.3f} s, inside helm {serial['helm_s']:.3f} s, "
              f"generator overhead {overhead:.3f} s = {overhead / serial['helm_s']:.1%} of helm's time")
        print(f"  parallel ({workers} helm calls at once): wall {parallel['wall_s']:.3f} s")

        print(f"[2/2] generated repository: 4 environments x {args.jobs} jobs", flush=True)
        scale = []
        for n in args.jobs:
            repo = synthetic_repo(tmp / f"synthetic-{n}", n)
            reps = max(1, args.repeats // 2)
            par = measure(repo, workers, reps, tmp)
            ser = measure(repo, 1, 1, tmp)
            row = {"jobs_per_env": n, "apps": par["apps"], "wall_s": par["wall_s"], "helm_s_serial": ser["helm_s"],
                   "wall_s_serial": ser["wall_s"],
                   "overhead_ratio": round((ser["wall_s"] - ser["helm_s"]) / ser["helm_s"], 3),
                   "ms_per_app": round(1000 * par["wall_s"] / par["apps"], 2)}
            scale.append(row)
            print(f"  {n:>4} jobs x 4 envs = {row['apps']:>4} apps: wall {row['wall_s']:7.2f} s "
                  f"({row['ms_per_app']:.1f} ms/app), serial overhead {row['overhead_ratio']:.1%} of helm", flush=True)
            shutil.rmtree(repo)
        result["scale"] = scale
    if len(scale) >= 2:
        first, last = scale[0], scale[-1]
        growth = (last["wall_s"] / first["wall_s"]) / (last["apps"] / first["apps"])
        result["linearity"] = round(growth, 3)
        print(f"  time grew {last['wall_s'] / first['wall_s']:.2f}x for {last['apps'] / first['apps']:.2f}x apps "
              f"(1.00 = linear; measured {growth:.2f})")

    (out_dir / "bench-render.json").write_text(json.dumps(result, indent=2) + "\n")
    plot = _plot(result, out_dir / "bench-render.png")
    print(f"wrote {out_dir / 'bench-render.json'}" + (f" and {plot}" if plot else ""))
    return 0


def _plot(result: dict, path: Path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib not installed: no plot)", file=sys.stderr)
        return None
    scale = result["scale"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    apps = [r["apps"] for r in scale]
    ax1.plot(apps, [r["wall_s"] for r in scale], "o-", label=f"parallel ({result['workers']} helm calls)")
    ax1.plot(apps, [r["wall_s_serial"] for r in scale], "s--", label="serial")
    ax1.plot(apps, [r["helm_s_serial"] for r in scale], "^:", label="inside helm (serial)")
    ax1.set_xlabel("apps rendered (4 environments)")
    ax1.set_ylabel("seconds")
    ax1.set_title("render time vs number of jobs")
    ax1.legend()
    ax1.grid(alpha=0.3)
    repo = result["repository"]
    ax2.bar(["helm", "generator"], [repo["serial"]["helm_s"], repo["overhead_s"]], color=["tab:blue", "tab:orange"])
    ax2.set_title(f"this repository, serial: overhead {repo['overhead_ratio']:.0%} of helm")
    ax2.set_ylabel("seconds")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path


if __name__ == "__main__":
    raise SystemExit(main())
