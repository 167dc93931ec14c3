"""make bench-cluster: seed 002 on an environment's cluster, the GitOps way.

The baseline (plain PyTorch or TensorFlow on one thread, no Ray) and the Ray Train benchmark (N workers, 1 CPU
each) run as two jobs of the environment, `bench-baseline` and `bench-ray`: RayJobs whose entrypoint is
`python -m training.bench.train --only <configuration>` (the code of `make bench-train`, in the training image).
Each is a commit of environments/<env>.yaml (a round-trip edit) with its render, pushed; Argo CD creates the run.
They run one after the other, so that the two never share the nodes' CPUs (a laptop's minikube nodes share its
cores): the second commit replaces the baseline job with the Ray one, a third removes it (`--keep` keeps both).
Each run prints its raw figures on a `BENCH_RESULT ` line; that line is read from the run's submitter pod (KubeRay
keeps the submitter Job after the run so that its logs can be read, while ttlSecondsAfterFinished 0 frees the
run's Ray cluster at once). The comparison (speedup, efficiency, accuracy delta) and the JSON, markdown and plot
are made by the same functions as `make bench-train`, into results/bench-cluster.
"""
from __future__ import annotations

import io
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ruamel.yaml.comments import CommentedMap

from training.bench.settings import RESULT_PREFIX  # what a run prints its figures after (no Ray, no framework)

from . import change, targets
from . import jobs as jobs_mod
from . import logs as logs_mod
from .targets import EXIT_NOT_HEALTHY, EXIT_TIMEOUT, Clients, OpsError, Target

BASELINE, RAY = "bench-baseline", "bench-ray"
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
DEFAULT_OUT = "results/bench-cluster"


@dataclass(frozen=True)
class Settings:
    """What `make bench-cluster` asks of the two runs (flags of `python -m training.bench.train`)."""
    framework: str = "pytorch"
    workers: int = 2
    epochs: int | None = None
    data: str = "digits"
    batch_size: int = 64
    tiny: bool = False

    def flags(self) -> list[str]:
        out = ["--frameworks", self.framework, "--workers", str(self.workers), "--threads", "1",
               "--data", self.data, "--batch-size", str(self.batch_size), "--repeats", "1"]
        if self.epochs:
            out += ["--epochs", str(self.epochs)]
        if self.tiny:
            out.append("--tiny")
        return out

    def key(self, job: str) -> str:
        return f"{self.framework}/plain-1t" if job == BASELINE else f"{self.framework}/ray-{self.workers}w"

    def entrypoint(self, job: str) -> str:
        return " ".join(["python", "-m", "training.bench.train", "--only", self.key(job), *self.flags()])


class BenchError(OpsError):
    pass


# ---------------------------------------------------------------- the environment file

def worker_groups(target: Target) -> list[str]:
    """The worker groups a job's Ray cluster has in this environment (the cluster's, with the job defaults')."""
    doc = target.doc
    groups = dict((doc.get("cluster") or {}).get("workerGroups") or {})
    groups.update(((doc.get("jobDefaults") or {}).get("cluster") or {}).get("workerGroups") or {})
    names = [name for name, group in groups.items() if group is not None]
    if not names:
        raise BenchError(f"environment {target.env} gives a job's Ray cluster no worker group: the Ray Train run "
                         f"needs one (cluster.workerGroups)")
    return names


def job_entry(settings: Settings, job: str, run: int, groups: list[str]) -> CommentedMap:
    """jobs.<job> for the environment file: the RayJob's entrypoint, the run counter, a Ray cluster sized for it
    (the baseline: the head alone, where the driver runs; the Ray run: `workers` workers in the first group)."""
    workers = 0 if job == BASELINE else settings.workers
    entry = CommentedMap()
    spec = CommentedMap()
    spec["run"] = run
    spec["entrypoint"] = settings.entrypoint(job)
    # the run's Ray cluster goes as soon as it ends (KubeRay keeps the submitter Job and its logs)
    spec["ttlSecondsAfterFinished"] = 0
    if job == BASELINE:
        spec["runtimeEnv"] = CommentedMap(env_vars=CommentedMap((v, "1") for v in THREAD_VARS))
    entry["job"] = spec
    wg = CommentedMap()
    for i, name in enumerate(groups):
        count = workers if i == 0 else 0
        wg[name] = CommentedMap(replicas=count, minReplicas=count, maxReplicas=count)
    entry["cluster"] = CommentedMap(workerGroups=wg)
    return entry


def current_run(target: Target, job: str) -> int:
    entry = (target.doc.get("jobs") or {}).get(job) or {}
    return int((entry.get("job") or {}).get("run") or 0)


def _edit(add: dict[str, CommentedMap], remove: tuple[str, ...]):
    def edit(doc):
        if doc.get("jobs") is None:
            doc["jobs"] = CommentedMap()
        jobs = doc["jobs"]
        for name in remove:
            jobs.pop(name, None)
        for name, entry in add.items():
            jobs[name] = entry
        if not jobs:
            del doc["jobs"]
    return edit


# ---------------------------------------------------------------- the cluster

def wait_for_run(clients: Clients, target: Target, job: str, old: str | None, timeout: float, poll: float,
                 out) -> jobs_mod.Run:
    """The job's new run (not `old`), followed until it ends; its state changes printed."""
    start = time.monotonic()
    shown = None
    while time.monotonic() - start < timeout:
        run = jobs_mod.find_current(clients, target, job)
        if run is None or run.name == old:
            line = "waiting for Argo CD to create the run"
        else:
            pods = [p for role in ("head", "worker", "submitter") for p in run.pods.get(role) or []]
            pending = sum(1 for p in pods if (p.status.phase or "Pending") == "Pending")
            line = f"run {run.name}: {run.state}" + (f", {pending} pod(s) pending" if pending else "")
            if run.finished:
                print(f"[{time.monotonic() - start:5.0f} s] {job}: {line}", file=out, flush=True)
                return run
        if line != shown:
            print(f"[{time.monotonic() - start:5.0f} s] {job}: {line}", file=out, flush=True)
            shown = line
        time.sleep(poll)
    raise BenchError(f"{job}: still '{shown}' after {timeout:.0f} s (make status ENV={target.env} JOB={job}; "
                     f"make diagnose ENV={target.env} JOB={job})", EXIT_TIMEOUT)


def result_from_logs(text: str, job: str, env: str) -> dict:
    """The raw figures a run printed (the last BENCH_RESULT line of its output, each line prefixed by its pod)."""
    found = None
    for line in text.splitlines():
        at = line.find(RESULT_PREFIX)
        if at >= 0:
            found = line[at + len(RESULT_PREFIX):]
    if found is None:
        tail = "\n".join(text.splitlines()[-15:]) or "(no output)"
        raise BenchError(f"{job} printed no {RESULT_PREFIX.strip()} line; the last lines of its output:\n{tail}",
                         EXIT_NOT_HEALTHY)
    try:
        raw = json.loads(found)
    except ValueError as exc:
        raise BenchError(f"{job}: its {RESULT_PREFIX.strip()} line is not JSON ({exc})", EXIT_NOT_HEALTHY) from None
    if not isinstance(raw, dict) or not {"config", "workers", "driver", "settings"} <= set(raw):
        raise BenchError(f"{job}: its {RESULT_PREFIX.strip()} line lacks config/workers/driver/settings "
                         f"(an older training image? make bench-train in {env}'s image prints them)",
                         EXIT_NOT_HEALTHY)
    return raw


def collect(clients: Clients, target: Target, run: jobs_mod.Run) -> dict:
    if not run.succeeded:
        raise BenchError(f"{run.job} ended {run.state} (run {run.name}): make diagnose ENV={target.env} "
                         f"JOB={run.job}", EXIT_NOT_HEALTHY)
    buf = io.StringIO()
    logs_mod.print_logs(clients, target, run.job, out=buf)
    return result_from_logs(buf.getvalue(), run.job, target.env)


# ---------------------------------------------------------------- the report

def report(raws: dict[str, dict], runs: dict[str, jobs_mod.Run], target: Target, commits: list[str]) -> dict:
    """The bench-train report of the two runs (same configurations, comparison and definitions), plus where they
    ran: the environment, the runs, their commits."""
    from training.bench.measure import DEFINITIONS, aggregate, compare, measure
    settings = raws[BASELINE]["settings"]
    if raws[RAY]["settings"] != settings:
        raise BenchError("the two runs report different settings (the environment changed between them?): "
                         f"{json.dumps(raws[BASELINE]['settings'])} vs {json.dumps(raws[RAY]['settings'])}",
                         EXIT_NOT_HEALTHY)
    measured = []
    for job in (BASELINE, RAY):
        m = measure(raws[job], settings)
        m["repeat"] = 1
        measured.append(m)
    configs = [raws[job]["config"] for job in (BASELINE, RAY)]
    agg = aggregate(measured, configs)
    return {
        "benchmark": "bench-cluster",
        "title": f"bench-cluster ({target.env}): plain vs Ray Train, as jobs of the environment",
        "createdAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "environment": target.env,
        "context": target.context,
        "machine": raws[RAY].get("machine") or {},
        "machines": {job: raws[job].get("machine") or {} for job in (BASELINE, RAY)},
        "settings": settings,
        "jobs": {job: {"run": run.name, "state": run.state, "start": str(run.started), "end": str(run.ended),
                       "durationSeconds": run.duration_seconds} for job, run in runs.items()},
        "commits": commits,
        "definitions": DEFINITIONS,
        "configurations": agg,
        "comparison": compare(agg, settings),
        "runs": measured,
        "raw": [{k: v for k, v in raws[job].items() if k not in ("settings", "machine")} for job in (BASELINE, RAY)],
    }


# ---------------------------------------------------------------- the command

def bench_cluster(clients: Clients, target: Target, root: Path, settings: Settings, out_dir: Path,
                  keep: bool = False, timeout: float = 3600, poll: float = 5, out=sys.stdout) -> int:
    from training.bench.report import write_train_report
    clients.custom(target.context)  # an unreachable cluster is refused before anything is committed
    groups = worker_groups(target)
    started = time.monotonic()
    raws, runs, commits = {}, {}, []
    previous = None
    for job in (BASELINE, RAY):
        old = jobs_mod.find_current(clients, target, job)
        run_number = current_run(target, job) + 1
        remove = (previous,) if previous and not keep else ()
        message = (f"bench-cluster {target.env}: {job} runs {settings.key(job)} (run {run_number})"
                   + (f"; {previous} removed (its result is collected)" if remove else ""))
        commits.append(change.commit_change(root, target, _edit({job: job_entry(settings, job, run_number, groups)},
                                                                remove), message, push=True, out=out,
                                            pushed_note="Argo CD creates the run"))
        runs[job] = wait_for_run(clients, target, job, old.name if old else None,
                                 timeout - (time.monotonic() - started), poll, out)
        raws[job] = collect(clients, target, runs[job])
        print(f"{job}: collected the result of {runs[job].name}", file=out, flush=True)
        target = targets.reload(root, target)
        previous = job
    if not keep:
        commits.append(change.commit_change(root, target, _edit({}, (RAY,)),
                                            f"bench-cluster {target.env}: {RAY} removed (its result is collected)",
                                            push=True, out=out, pushed_note="Argo CD prunes the benchmark job"))
    data = report(raws, runs, target, commits)
    paths = write_train_report(data, out_dir, name="bench-cluster")
    _summary(data, out)
    print(f"bench-cluster done in {time.monotonic() - started:.0f} s: " + ", ".join(str(p) for p in paths),
          file=out)
    return 0


def _summary(data: dict, out) -> None:
    for fw, entry in data["comparison"].items():
        base = entry.get("baseline") or {}
        for key, block in entry.items():
            if key.startswith("ray_"):
                print(f"{fw}: baseline {base.get('training_time_seconds')} s, Ray Train {block['num_workers']} "
                      f"worker(s) {block['training_time_seconds']} s: speedup {block['speedup']}x, efficiency "
                      f"{block['efficiency']}, accuracy delta {block['accuracy_difference']:+.4f}", file=out)
