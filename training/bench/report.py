"""JSON, markdown table and PNG plot of the benchmarks (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


def _f(v: Any, digits: int = 2, suffix: str = "") -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (int, float)):
        return f"{v:.{digits}f}{suffix}"
    return str(v)


def _write_json(data: dict[str, Any], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


# ---------------------------------------------------------------- bench-train

def _order(settings: dict[str, Any]) -> list[str]:
    warm = [f"ray-{w}w-warm" for w in settings["workers"]] if settings.get("warm") else []
    return ([f"plain-{t}t" for t in settings["threads"]] + [f"ddp-{w}p" for w in settings["workers"] if w > 1]
            + [f"ray-{w}w" for w in settings["workers"]] + warm)


def _train_row(fw: str, a: dict[str, Any], base: dict[str, Any] | None, comp: dict[str, Any]) -> str:
    cpus = a["threads"] if a["kind"] == "plain" else a["workers"]
    if a["kind"] == "ray":
        c = comp.get(fw, {}).get(a.get("comparisonKey", ""), {})
        cells = [_f(c.get("speedup"), 2, "x"), _f(c.get("efficiency"), 2), _f(c.get("steady_speedup"), 2, "x"),
                 _f(c.get("steady_vs_equal_cpu_baseline"), 2, "x"), _f(a["val_accuracy"], 3),
                 _f(c.get("accuracy_difference"), 3)]
    else:
        sp = base["wall_s"] / a["wall_s"] if base else None
        ssp = a["steady_samples_per_s"] / base["steady_samples_per_s"] if base else None
        equal = comp.get(fw, {}).get(f"ddp_{a['workers']}_processes", {}) if a["kind"] == "ddp" else {}
        cells = [_f(sp, 2, "x"), _f(sp / cpus if sp else None, 2), _f(ssp, 2, "x"),
                 _f(equal.get("steady_vs_equal_cpu_baseline"), 2, "x") if equal else "—",
                 _f(a["val_accuracy"], 3), _f(a["val_accuracy"] - base["val_accuracy"] if base else None, 3)]
    return (f"| {fw} | {a['label']} | {cpus} | {_f(a['wall_s'], 1)} | {_f(a['startup_s'], 1)} | "
            f"{_f(a.get('train_s'), 1)} | {_f(a.get('fit_tail_s'), 1)} | "
            f"{_f(a['steady_samples_per_s'], 0)} | " + " | ".join(cells) + " |")


def _train_targets(comp: dict[str, Any]) -> list[str]:
    lines = []
    for fw, c in comp.items():
        for key, block in c.items():
            if not key.startswith("ray_"):
                continue
            who = f"{fw}, Ray {block['num_workers']} worker(s){', warm Ray' if block.get('warm_ray') else ''}"
            if "steady_vs_equal_cpu_baseline" in block:
                ok = block["target_steady_ge_0.9x_equal_cpu"]
                lines.append(f"* {who}: steady throughput vs {block['equal_cpu_baseline']} "
                             f"{_f(block['steady_vs_equal_cpu_baseline'], 2)}x -> {'met' if ok else 'NOT met'} (≥ 0.9x)")
            ddp = c.get(f"ddp_{block['num_workers']}_processes", {})
            if "steady_vs_plain_ddp" in block and "steady_vs_equal_cpu_baseline" in ddp:
                lines.append(f"  of which DDP's own: plain DDP on {ddp['num_processes']} processes (no Ray) reaches "
                             f"{_f(ddp['steady_vs_equal_cpu_baseline'], 2)}x of {ddp['equal_cpu_baseline']}; Ray "
                             f"Train runs at {_f(block['steady_vs_plain_ddp'], 2)}x of plain DDP")
            ok = block["target_accuracy_within_2_points"]
            lines.append(f"* {who}: val accuracy {_f(block['accuracy_difference'], 3)} from the baseline's -> "
                         f"{'met' if ok else 'NOT met'} (less than 2 points)")
            if block.get("warm_ray"):
                ok = block["target_first_step_le_10s"]
                lines.append(f"* {who}: first step after {_f(block['time_to_first_step_seconds'], 1)} s -> "
                             f"{'met' if ok else 'NOT met'} (≤ 10 s)")
                ok = block["target_fit_to_first_step_le_10s"]
                lines.append(f"* {who}: first step {_f(block['fit_to_first_step_seconds'], 1)} s after fit() -> "
                             f"{'met' if ok else 'NOT met'} (≤ 10 s)")
    return lines


def train_markdown(report: dict[str, Any]) -> str:
    s = report["settings"]
    m = report["machine"]
    agg = report["configurations"]
    lines = [
        f"# {report.get('title') or 'bench-train: plain vs Ray Train'}",
        "",
        f"{m.get('cpus')} CPUs, {m.get('memoryGiB', '?')} GiB, load average at the end {m.get('loadAverage')}; "
        f"torch {m.get('torch')}, tensorflow {m.get('tensorflow')}, ray {m.get('ray')}. "
        f"Data {s['data']['source']}, CNN filters {s['model']['filters']} dense {s['model']['dense']}, "
        f"{s['epochs']} epoch(s) (the first is warm-up), global batch {s['batchSize']} (split over the workers), "
        f"median of {s['repeats']} run(s) per configuration{' (tiny mode)' if s['tiny'] else ''}.",
        "",
        "| framework | configuration | CPUs | wall s | first step s | steps s | idle tail s | steady samples/s | "
        "speedup (wall) | efficiency | steady speedup | steady vs equal-CPU plain | val acc | Δ acc vs baseline |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    present = [(fw, agg[f"{fw}/{suffix}"]) for fw in s["frameworks"] for suffix in _order(s) if agg.get(f"{fw}/{suffix}")]
    lines += [_train_row(fw, a, agg.get(f"{fw}/plain-1t"), report["comparison"]) for fw, a in present]
    lines += ["", "Baseline = plain, 1 thread. Wall = process start to evaluated model; first step = process start "
              "to the end of the first training step; steps = first to last step; idle tail = after the last step "
              "until the training call returned. Speedup = baseline wall time / wall time; efficiency = speedup / "
              "workers (threads for plain); steady = samples/s after the first epoch; equal-CPU = against the plain "
              "run with as many threads as Ray workers (target ≥ 0.9x). Plain DDP = PyTorch's same loop in as many "
              "processes under DistributedDataParallel over gloo, without Ray: the all-reduce's own cost.", ""]
    lines += ["## Where the start-up goes (seconds to the first step, medians)", ""]
    for fw, a in present:
        parts = ", ".join(f"{k} {_f(v, 1)}" for k, v in a["startup_phases"].items())
        lines.append(f"* {fw}, {a['label']}: **{_f(a['startup_s'], 1)} s** = {parts}")
    lines += ["", "## Targets", "", *_train_targets(report["comparison"])]
    return "\n".join(lines) + "\n"


def train_plot(report: dict[str, Any], path: Path) -> Path:
    plt = _plt()
    s = report["settings"]
    agg = report["configurations"]
    fws = [fw for fw in s["frameworks"] if any(k.startswith(fw + "/") for k in agg)]
    bars_per_row = max((sum(1 for k in agg if k.startswith(fw + "/")) for fw in fws), default=1)
    fig, axes = plt.subplots(len(fws), 2, figsize=(max(12, 2.2 * bars_per_row), 3.8 * len(fws)), squeeze=False)
    greys, blues = plt.get_cmap("Greys"), plt.get_cmap("Blues")
    colors = {}
    for i, k in enumerate(f"plain-{t}t" for t in s["threads"]):
        colors[k] = greys(0.4 + 0.4 * i / max(len(s["threads"]) - 1, 1))
    greens, oranges = plt.get_cmap("Greens"), plt.get_cmap("Oranges")
    for i, w in enumerate(s["workers"]):
        colors[f"ddp-{w}p"] = oranges(0.4 + 0.5 * i / max(len(s["workers"]) - 1, 1))
        colors[f"ray-{w}w"] = blues(0.4 + 0.5 * i / max(len(s["workers"]) - 1, 1))
        colors[f"ray-{w}w-warm"] = greens(0.4 + 0.5 * i / max(len(s["workers"]) - 1, 1))
    for row, fw in enumerate(fws):
        keys = [k for k in _order(s) if f"{fw}/{k}" in agg]
        items = [agg[f"{fw}/{k}"] for k in keys]
        labels = [a["label"].replace(", ", "\n").replace(" (", "\n(") for a in items]
        ax = axes[row][0]
        vals = [a["steady_samples_per_s"] for a in items]
        lo = [a["steady_samples_per_s"] - a.get("steady_samples_per_s_min", a["steady_samples_per_s"]) for a in items]
        hi = [a.get("steady_samples_per_s_max", a["steady_samples_per_s"]) - a["steady_samples_per_s"] for a in items]
        bars = ax.bar(labels, vals, yerr=[lo, hi], capsize=4, color=[colors[k] for k in keys])
        for b, v in zip(bars, vals, strict=True):
            ax.annotate(f"{v:.0f}", (b.get_x() + b.get_width() / 2, v), ha="center", va="bottom", fontsize=8,
                        xytext=(0, 2), textcoords="offset points")
        ax.set_title(f"{fw}: steady throughput (after warm-up epoch)")
        ax.set_ylabel("samples / s (median, min-max)")
        ax = axes[row][1]
        startup = [a["startup_s"] for a in items]
        train = [a.get("train_s", 0.0) for a in items]
        tail = [a.get("fit_tail_s", 0.0) for a in items]
        rest = [max(a["wall_s"] - a["startup_s"] - a.get("train_s", 0.0) - a.get("fit_tail_s", 0.0), 0.0)
                for a in items]
        ax.bar(labels, startup, color="#ffb74d", label="start-up (to first step)")
        ax.bar(labels, train, bottom=startup, color=[colors[k] for k in keys], label="training steps")
        bottom = [a + b for a, b in zip(startup, train, strict=True)]
        if any(x > 0.05 for x in tail):
            ax.bar(labels, tail, bottom=bottom, color="#ef9a9a", hatch="//", label="idle after last step (fit tail)")
            bottom = [a + b for a, b in zip(bottom, tail, strict=True)]
        ax.bar(labels, rest, bottom=bottom, color="#e0e0e0", label="evaluation + teardown")
        for i, a in enumerate(items):
            ax.annotate(f"{a['wall_s']:.1f} s", (i, a["wall_s"]), ha="center", va="bottom", fontsize=8,
                        xytext=(0, 2), textcoords="offset points")
        ax.set_title(f"{fw}: wall time, process start to evaluated model")
        ax.set_ylabel("seconds (median)")
        ax.legend(fontsize=8, loc="upper left")
    fig.suptitle(f"{report.get('benchmark', 'bench-train')}: {s['data']['source']}, {s['epochs']} epoch(s), global batch {s['batchSize']}, "
                 f"median of {s['repeats']}, {report['machine'].get('cpus')} CPUs", fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_train_report(report: dict[str, Any], out: Path, name: str = "bench-train") -> list[Path]:
    """<name>.json, <name>.md and <name>.png in `out` (make bench-train; make bench-cluster with its own name)."""
    out = Path(out)
    paths = [_write_json(report, out / f"{name}.json")]
    md = out / f"{name}.md"
    md.write_text(train_markdown(report))
    paths.append(md)
    paths.append(train_plot(report, out / f"{name}.png"))
    return paths


# ---------------------------------------------------------------- bench-tune

def tune_markdown(report: dict[str, Any]) -> str:
    s = report["settings"]
    r = report["schedulers"]
    c = report["comparison"]
    metric, mode = s["metric"], s["mode"]
    lines = [
        "# bench-tune: ASHA vs FIFO",
        "",
        f"{s['numSamples']} trials each (the same sampled configs: same search seed), up to {s['epochs']} epochs, "
        f"{metric} ({mode}); {s['framework']} CNN {s['model']['filters']}/{s['model']['dense']} on "
        f"{s['data']['source']}, one worker per trial, {s['concurrent']} trial(s) at once on "
        f"{report['machine'].get('cpus')} CPUs{' (tiny mode)' if s['tiny'] else ''}.",
        "",
        f"| scheduler | best {metric} | best trial's val_accuracy | trial-iterations (epochs) | trials stopped early | "
        "wall s (Tuner.fit) |",
        "|---|---|---|---|---|---|",
    ]
    for name in ("fifo", "asha"):
        x = r.get(name)
        if not x:
            continue
        lines.append(f"| {name} | {_f(x['bestMetric'], 4)} | {_f(x.get('bestValAccuracy'), 3)} | "
                     f"{x['totalTrialIterations']} | {x['earlyStoppedTrials']} / {x['numTrials']} | "
                     f"{_f(x['wallSeconds'], 1)} |")
    lines += [
        "",
        f"* ASHA's best {metric} is {_f(c.get('bestMetricRelativeGap'), 4)} relative to FIFO's "
        f"({'worse' if c.get('bestMetricRelativeGap', 0) > 0 else 'not worse'}); target within 1%: "
        f"**{'met' if c.get('targetBestWithin1Percent') else 'NOT met'}**.",
        f"* ASHA spent {_f(c.get('iterationsRatio'), 3)} of FIFO's trial-iterations; target ≤ 0.5: "
        f"**{'met' if c.get('targetIterationsAtMostHalf') else 'NOT met'}**.",
        f"* Wall time ratio ASHA / FIFO: {_f(c.get('wallRatio'), 3)} (each trial also pays a fixed start-up: "
        f"a new process, imports, data, model).",
        f"* Same best config found by both: {_f(c.get('sameBestConfig'))}.",
    ]
    return "\n".join(lines) + "\n"


def tune_plot(report: dict[str, Any], path: Path) -> Path:
    plt = _plt()
    s = report["settings"]
    metric = s["metric"]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    colors = {"fifo": "#616161", "asha": "#1565c0"}
    ax = axes[0]
    for name in ("fifo", "asha"):
        x = report["schedulers"].get(name)
        if not x:
            continue
        xs, ys = zip(*x["bestSoFar"], strict=True) if x["bestSoFar"] else ([], [])
        ax.step(xs, ys, where="post", label=name.upper(), color=colors[name])
    ax.set_xlabel("trial-iterations spent (epochs, in completion order)")
    ax.set_ylabel(f"best {metric} so far" + (" (log scale)" if "loss" in metric else ""))
    ax.xaxis.get_major_locator().set_params(integer=True)
    if "loss" in metric and all(v > 0 for x in report["schedulers"].values() for _, v in x["bestSoFar"]):
        ax.set_yscale("log")
    ax.set_title(f"best {metric} vs compute spent")
    ax.legend()
    for i, name in enumerate(("fifo", "asha")):
        ax = axes[1 + i]
        x = report["schedulers"].get(name)
        if not x:
            continue
        cmap = plt.get_cmap("tab20")
        for curve in x["curves"]:
            ep = [p[0] for p in curve["points"]]
            val = [p[1] for p in curve["points"]]
            style = "-" if curve["status"] == "completed" else ":"
            # The same trial (same config) has the same colour in both panels.
            ax.plot(ep, val, style, marker="o", markersize=3, linewidth=1.2, color=cmap(curve["trial"] % 20))
        ax.set_xlabel("epoch")
        ax.set_ylabel(metric + (" (log scale)" if "loss" in metric else ""))
        ax.set_title(f"{name.upper()}: every trial's {metric} per epoch ({x['totalTrialIterations']} epochs)")
        ax.xaxis.get_major_locator().set_params(integer=True)
        if "loss" in metric and all(p[1] > 0 for c in x["curves"] for p in c["points"]):
            ax.set_yscale("log")
    fig.suptitle(f"bench-tune: ASHA vs FIFO, {s['numSamples']} trials, up to {s['epochs']} epochs "
                 "(dotted: stopped early)", fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_tune_report(report: dict[str, Any], out: Path) -> list[Path]:
    out = Path(out)
    paths = [_write_json(report, out / "bench-tune.json")]
    md = out / "bench-tune.md"
    md.write_text(tune_markdown(report))
    paths.append(md)
    paths.append(tune_plot(report, out / "bench-tune.png"))
    return paths
