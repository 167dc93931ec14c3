"""The day-two scenarios (test_06): a platform engineer's loop with `make retry / logs / diagnose / watch`
(python -m ops) on the e2e cluster, the pods' output written as kwok serves it (e2e.pod_logs) and their ends made
as a kubelet reports them (e2e.kwok_stages).

- RETRIED (eks cifar10-torch, a RayJob): `make retry --push` starts a new run; its driver prints and `make logs
  --follow` follows it until the run ends; the driver then prints PyTorch's NCCL watchdog timeout and fails on every
  attempt. `make watch --auto-retry 1` diagnoses the failed run (retryable), retries through git, and ends 0 when
  the new run succeeds; `make logs` then shows the new run's driver.
- STOPPED (eks digits-torch, a RayJob): a new run whose worker is held in ErrImagePull is diagnosed as an
  image pull failure while stuck; then its submitter is OOMKilled on every attempt, and `make watch --auto-retry 2`
  stops (exit 1) without a retry: that needs a change. A retry "after the fix" then runs to success.

The two run at once (threads); the only git writes while they do are RETRIED's watch (one commit), so the commits
of the two never race.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from tests.e2e.harness import RAY, wait_for

RETRIED = ("eks", "cifar10-torch")
# kwok's pods (a scenario ends them); the real node's own failures are tests/e2e/test_09_real_node.py's
STOPPED = ("eks", "digits-torch")

# What a Ray Train driver prints when a worker's NCCL watchdog fires (PyTorch's ProcessGroupNCCL message, raised
# on the worker and re-raised by the driver), before the job fails.
DRIVER_START = ["Training started: cifar10-torch, 3 workers (gpu-g5)", "(RayTrainWorker pid=231) epoch 1/30 loss 1.92"]
NCCL_TIMEOUT = [
    "(RayTrainWorker pid=231, ip=10.0.4.17) [rank1]:[E ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective "
    "operation timeout: WorkNCCL(SeqNum=1041, OpType=ALLREDUCE, NumelIn=2359296, NumelOut=2359296, "
    "Timeout(ms)=1800000) ran for 1800085 milliseconds before timing out.",
    "ray.exceptions.RayTaskError(DistBackendError): ray::_RayTrainWorker__execute.get_next() "
    "(pid=231, ip=10.0.4.17)",
]
DRIVER_RESUMED = ["Training resumed from checkpoint epoch_0003", "(RayTrainWorker pid=97) epoch 4/30 loss 1.41",
                  "Training finished: best val_accuracy 0.71"]
# The kubelet's message for an image it cannot pull (pkg/kubelet/images/image_manager.go)
PULL_MESSAGE = ('Back-off pulling image "localhost/ray-training:0.1.1-cpu": ErrImagePull: failed to pull and '
                'unpack image "localhost/ray-training:0.1.1-cpu": not found')


@dataclass
class Record:
    env: str
    job: str
    runs: list[str] = field(default_factory=list)   # run names, in order
    outputs: dict[str, str] = field(default_factory=dict)
    codes: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    error: str = ""
    commits_before: list[str] = field(default_factory=list)
    commits_after: list[str] = field(default_factory=list)


def current_runs(e2e, env: str, job: str) -> list[dict]:
    return [o for o in e2e.objects(env, RAY, "rayjobs") if o["metadata"]["name"].rsplit("-", 1)[0] == job]


def run_named(e2e, env: str, name: str) -> dict | None:
    return next((o for o in e2e.objects(env, RAY, "rayjobs") if o["metadata"]["name"] == name), None)


def submitters(e2e, env: str, run: str) -> list:
    return [p for p in e2e.pods(env, f"batch.kubernetes.io/job-name={run}") if not p.metadata.deletion_timestamp]


def cluster_pods(e2e, env: str, run: str, node_type: str) -> list:
    obj = run_named(e2e, env, run) or {}
    cluster = (obj.get("status") or {}).get("rayClusterName")
    if not cluster:
        return []
    return [p for p in e2e.pods(env, f"ray.io/cluster={cluster},ray.io/node-type={node_type}")
            if not p.metadata.deletion_timestamp]


def running_submitter(e2e, env: str, run: str, timeout: float = 300):
    def check():
        pods = [p for p in submitters(e2e, env, run) if p.status.phase == "Running"]
        obj = run_named(e2e, env, run) or {}
        return bool(pods), pods[0] if pods else f"{run}: {(obj.get('status') or {}).get('jobDeploymentStatus')}"
    return wait_for(check, timeout, 3, f"{env}/{run}'s submitter pod was not Running")


def new_run(e2e, env: str, job: str, old: set[str], timeout: float = 300) -> str:
    """The run that appears (not one of `old`) once the previous ones are pruned."""
    def check():
        names = [o["metadata"]["name"] for o in current_runs(e2e, env, job)]
        fresh = [n for n in names if n not in old]
        return (len(fresh) == 1 and len(names) == 1), fresh[0] if fresh else f"runs now: {names}"
    return wait_for(check, timeout, 3, f"{env}/{job}: no new run replaced {sorted(old)}")


def fail_until_failed(e2e, env: str, run: str, exit_code: int, reason: str, message: str,
                      timeout: float = 300) -> dict:
    """End every attempt of the run's submitter (the submitter Job retries) as a kubelet would, until KubeRay says
    the RayJob Failed."""
    def check():
        obj = run_named(e2e, env, run)
        status = (obj or {}).get("status") or {}
        if status.get("jobDeploymentStatus") == "Failed":
            return True, obj
        for pod in submitters(e2e, env, run):
            if pod.status.phase == "Running":
                e2e.finish_pod(env, pod, exit_code, reason=reason, message=message)
        return False, f"{run}: {status.get('jobDeploymentStatus')}/{status.get('jobStatus')}"
    return wait_for(check, timeout, 3, f"{env}/{run} did not fail")


def succeed(e2e, env: str, run: str, lines: list[str], timeout: float = 300) -> dict:
    pod = running_submitter(e2e, env, run)
    e2e.print_to_log(env, pod, lines)

    def check():
        obj = run_named(e2e, env, run)
        status = (obj or {}).get("status") or {}
        if (status.get("jobDeploymentStatus"), status.get("jobStatus")) == ("Complete", "SUCCEEDED"):
            return True, obj
        for p in submitters(e2e, env, run):
            if p.status.phase == "Running":
                e2e.finish_pod(env, p, 0)
        return False, f"{run}: {status.get('jobDeploymentStatus')}/{status.get('jobStatus')}"
    return wait_for(check, timeout, 3, f"{env}/{run} did not succeed")


def succeeded(e2e, env: str, run: str, timeout: float = 600) -> dict:
    """Wait for a run of real pods to end SUCCEEDED (it trains; nothing is done to it); fail when it fails."""
    def check():
        obj = run_named(e2e, env, run)
        status = (obj or {}).get("status") or {}
        state = (status.get("jobDeploymentStatus"), status.get("jobStatus"))
        assert state[0] != "Failed", f"{run} failed: {status.get('reason')}: {status.get('message')}"
        done = state == ("Complete", "SUCCEEDED")
        return done, obj if done else f"{run}: {state[0]}/{state[1]}"
    return wait_for(check, timeout, 3, f"{env}/{run} did not succeed")


def git_log(e2e, count: int = 5) -> list[str]:
    from e2e import remotes
    return remotes.git("log", f"-{count}", "--format=%s", cwd=e2e.work).splitlines()


def start_new_run(e2e, record: Record, reason: str) -> str:
    old = {o["metadata"]["name"] for o in current_runs(e2e, record.env, record.job)}
    proc = e2e.ops("retry", "--env", record.env, "--job", record.job, "--reason", reason, "--push")
    record.outputs[f"retry: {reason}"] = proc.stdout + proc.stderr
    record.codes[f"retry: {reason}"] = proc.returncode
    assert proc.returncode == 0, f"make retry failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    name = new_run(e2e, record.env, record.job, old)
    record.runs.append(name)
    return name


def retried_scenario(e2e, record: Record) -> None:
    env, job = record.env, record.job
    first = record.runs[-1]
    pod = running_submitter(e2e, env, first)
    e2e.print_to_log(env, pod, DRIVER_START)
    follow = e2e.ops_background(f"logs-{env}-{job}", "logs", "--env", env, "--job", job, "--follow")
    watch = e2e.ops_background(f"watch-{env}-{job}", "watch", "--env", env, "--job", job, "--auto-retry", "1",
                               "--poll", "3")
    try:
        wait_for(lambda: ("epoch 1/30" in follow.output, follow.output[-500:]), 60, 2,
                 "make logs --follow did not show the driver's output")
        e2e.print_to_log(env, pod, NCCL_TIMEOUT)
        fail_until_failed(e2e, env, first, 1, "Error", "Job entrypoint command failed with exit code 1")
        record.codes["logs --follow"] = follow.wait(120)  # the run ended: so does the follow
        second = new_run(e2e, env, job, {first})
        record.runs.append(second)
        succeed(e2e, env, second, DRIVER_RESUMED)
        record.codes["watch"] = watch.wait(240)
    finally:
        watch.stop()
        follow.stop()
        record.outputs["watch"] = watch.output
        record.outputs["logs --follow"] = follow.output
    proc = e2e.ops("diagnose", "--env", env, "--job", job)
    record.outputs["diagnose after"] = proc.stdout + proc.stderr
    record.codes["diagnose after"] = proc.returncode
    proc = e2e.ops("logs", "--env", env, "--job", job)
    record.outputs["logs after"] = proc.stdout + proc.stderr
    record.codes["logs after"] = proc.returncode


def stopped_scenario(e2e, record: Record) -> None:
    env, job = record.env, record.job
    run = record.runs[-1]
    running_submitter(e2e, env, run)
    workers = wait_for(lambda: (bool(cluster_pods(e2e, env, run, "worker")), cluster_pods(e2e, env, run, "worker")),
                       120, 3, f"{env}/{run} has no worker pods")
    held = workers[0]
    e2e.hold_pod(env, held, "ErrImagePull", PULL_MESSAGE)
    wait_for(lambda: (_waiting(e2e, env, held.metadata.name) == "ErrImagePull", "not held yet"), 60, 2,
             "kwok did not hold the worker in ErrImagePull")
    for flag in ("", "--json"):
        proc = e2e.ops("diagnose", "--env", env, "--job", job, *([flag] if flag else []))
        record.outputs[f"diagnose stuck{' json' if flag else ''}"] = proc.stdout + proc.stderr
        record.codes[f"diagnose stuck{' json' if flag else ''}"] = proc.returncode
    record.notes.append(f"held {held.metadata.name} in ErrImagePull")
    record.commits_before = git_log(e2e)
    watch = e2e.ops_background(f"watch-{env}-{job}", "watch", "--env", env, "--job", job, "--auto-retry", "2",
                               "--poll", "3")
    try:
        fail_until_failed(e2e, env, run, 137, "OOMKilled", "")
        record.codes["watch"] = watch.wait(180)
    finally:
        watch.stop()
        record.outputs["watch"] = watch.output
    record.notes.append("runs after the watch: " + ", ".join(o["metadata"]["name"]
                                                              for o in current_runs(e2e, env, job)))


def _waiting(e2e, env: str, pod_name: str) -> str | None:
    pod = e2e.core(env).read_namespaced_pod(pod_name, e2e.namespace(env))
    for cs in pod.status.container_statuses or []:
        if cs.state and cs.state.waiting:
            return cs.state.waiting.reason
    return None


def run_both(e2e) -> dict[str, Record]:
    """Start a new run of each job (one retry commit each, one after the other), then both scenarios at once;
    then the fix for STOPPED (a retry) run to success."""
    records = {"retried": Record(*RETRIED), "stopped": Record(*STOPPED)}
    for record in records.values():
        record.runs = [o["metadata"]["name"] for o in current_runs(e2e, record.env, record.job)]
    start_new_run(e2e, records["retried"], "e2e: a new run")
    start_new_run(e2e, records["stopped"], "e2e: a new run")

    def guarded(scenario, record):
        try:
            scenario(e2e, record)
        except BaseException as exc:  # noqa: BLE001 - reported by the tests that read the record
            record.error = f"{type(exc).__name__}: {exc}"
    threads = [threading.Thread(target=guarded, args=(retried_scenario, records["retried"])),
               threading.Thread(target=guarded, args=(stopped_scenario, records["stopped"]))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(900)
    stopped = records["stopped"]
    stopped.commits_after = git_log(e2e)
    if not stopped.error:
        try:
            started = time.monotonic()
            fixed = start_new_run(e2e, stopped, "after raising the submitter's memory")
            succeed(e2e, stopped.env, fixed, ["Training finished"])
            stopped.notes.append(f"fixed run {fixed} succeeded after {time.monotonic() - started:.0f} s")
        except BaseException as exc:  # noqa: BLE001
            stopped.error = f"the fix run: {type(exc).__name__}: {exc}"
    return records
