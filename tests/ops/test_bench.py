"""make bench-cluster without a cluster: the two benchmark jobs as the environment file gets them and as the
generator renders them (the real helm), their removal (apps/ as before, byte for byte), reading a run's result
from its output, and the report made from two real results (tests/ops/fixtures/bench: `python -m
training.bench.train --only ... --tiny` on this machine). The submission, waiting and collection against a real API
server, KubeRay and Argo CD are in tests/e2e/test_07_bench_cluster.py."""
from __future__ import annotations

import io
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ops import bench, change
from ops.targets import OpsError, target
from tests.ops.support import git
from tests.support import REPO, app_dir, load_yaml, tree_digest

FIXTURES = Path(__file__).parent / "fixtures" / "bench"


def _raw(job: str) -> dict:
    name = "pytorch_plain-1t" if job == bench.BASELINE else "pytorch_ray-2w"
    return json.loads((FIXTURES / f"{name}.json").read_text())


def _rendered(root: Path, env: str, job: str) -> dict:
    files = sorted(app_dir(root, env, f"job-{job}").glob("*.yaml"))
    assert files, f"no apps/{env}/job-{job}"
    return next(d for d in map(yaml.safe_load, (p.read_text() for p in files)) if d["kind"] == "RayJob")


def test_the_pair_renders_as_rayjobs_running_the_bench_code_and_goes_away_without_a_trace(git_repo):
    tgt = target(git_repo, "minikube")
    before_file = (git_repo / "environments/minikube.yaml").read_text()
    before_apps = tree_digest(git_repo / "apps" / "minikube")
    settings = bench.Settings(tiny=True)
    groups = bench.worker_groups(tgt)
    assert groups == ["workers"]
    entries = {job: bench.job_entry(settings, job, 1, groups) for job in (bench.BASELINE, bench.RAY)}
    change.commit_change(git_repo, tgt, bench._edit(entries, ()), "bench pair", out=io.StringIO())
    baseline, ray = (_rendered(git_repo, "minikube", job) for job in (bench.BASELINE, bench.RAY))
    assert baseline["spec"]["entrypoint"].startswith("python -m training.bench.train --only pytorch/plain-1t ")
    assert ray["spec"]["entrypoint"].startswith("python -m training.bench.train --only pytorch/ray-2w ")
    for run in (baseline, ray):
        assert run["spec"]["ttlSecondsAfterFinished"] == 0 and run["spec"]["shutdownAfterJobFinishes"] is True
        assert run["metadata"]["annotations"]["ray-gitops/run"] == "1"
    groups_of = {name: run["spec"]["rayClusterSpec"]["workerGroupSpecs"] for name, run in
                 (("baseline", baseline), ("ray", ray))}
    assert [(g["replicas"], g["minReplicas"], g["maxReplicas"]) for g in groups_of["baseline"]] == [(0, 0, 0)]
    assert [(g["replicas"], g["minReplicas"], g["maxReplicas"]) for g in groups_of["ray"]] == [(2, 2, 2)]
    runtime = load_yaml(baseline["spec"]["runtimeEnvYAML"])
    assert runtime["env_vars"] == {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    # removing both: the file and apps/ exactly as before
    change.commit_change(git_repo, target(git_repo, "minikube"), bench._edit({}, (bench.BASELINE, bench.RAY)),
                         "bench pair removed", out=io.StringIO())
    assert (git_repo / "environments/minikube.yaml").read_text() == before_file
    assert tree_digest(git_repo / "apps" / "minikube") == before_apps
    assert git(git_repo, "log", "--format=%s").splitlines() == ["bench pair removed", "bench pair", "start"]


def test_the_entrypoint_is_what_training_bench_train_accepts_and_settings_travel_with_the_result():
    """The entrypoint's flags parse (the real parser) into the settings the runs report."""
    from training.bench import train
    assert bench.RESULT_PREFIX == train.RESULT_PREFIX
    settings = bench.Settings(tiny=True)
    for job in (bench.BASELINE, bench.RAY):
        argv = shlex.split(settings.entrypoint(job))[3:]
        assert argv[:2] == ["--only", settings.key(job)]
        proc = subprocess.run([sys.executable, "-m", "training.bench.train", *argv, "--help"], cwd=REPO,
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
    assert _raw(bench.BASELINE)["settings"] == _raw(bench.RAY)["settings"]
    assert _raw(bench.RAY)["settings"]["workers"] == [2] and _raw(bench.RAY)["settings"]["threads"] == [1]


@pytest.mark.parametrize("key", ["pytorch/plain-0t", "torch/ray-2w", "pytorch/ray-w", "pytorch"])
def test_a_bad_configuration_key_is_refused(key):
    proc = subprocess.run([sys.executable, "-m", "training.bench.train", "--only", key], cwd=REPO,
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "expected <framework>/plain-<threads>t" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_result_is_the_last_bench_result_line_of_the_output():
    raw = _raw(bench.RAY)
    text = "\n".join(["[bench-ray-1234abcd-x7k2p] 2026-11-24 10:00:01 INFO -- Job submitted",
                      f"[bench-ray-1234abcd-x7k2p] BENCH_RESULT {json.dumps({'stale': True})}",
                      f"[bench-ray-1234abcd-x7k2p] BENCH_RESULT {json.dumps(raw)}",
                      "[bench-ray-1234abcd-x7k2p] Job 'raysubmit_1' succeeded"])
    assert bench.result_from_logs(text, bench.RAY, "minikube") == raw


@pytest.mark.parametrize("text,expected", [
    ("[p] Traceback (most recent call last):\n[p] ModuleNotFoundError: No module named 'training.bench'",
     "printed no BENCH_RESULT line; the last lines of its output:\n[p] Traceback"),
    ("[p] BENCH_RESULT {not json", "is not JSON"),
    ('[p] BENCH_RESULT {"config": {}}', "lacks config/workers/driver/settings"),
])
def test_output_without_a_result_is_reported_with_its_last_lines(text, expected):
    with pytest.raises(OpsError) as exc:
        bench.result_from_logs(text, bench.RAY, "minikube")
    assert expected in str(exc.value) and exc.value.exit_code == 1


class _Run:
    def __init__(self, name):
        self.name, self.state, self.started, self.ended, self.duration_seconds = name, "Complete/SUCCEEDED", \
            "2026-11-24 10:00:00+00:00", "2026-11-24 10:01:00+00:00", 60.0


def test_the_report_is_bench_trains_comparison_of_the_two_runs(tmp_path, repo_copy):
    from training.bench.measure import measure
    from training.bench.report import write_train_report
    raws = {job: _raw(job) for job in (bench.BASELINE, bench.RAY)}
    runs = {bench.BASELINE: _Run("bench-baseline-0a1b2c3d"), bench.RAY: _Run("bench-ray-4e5f6a7b")}
    data = bench.report(raws, runs, target(repo_copy, "minikube"), ["abc1234", "def5678", "0123abc"])
    settings = raws[bench.BASELINE]["settings"]
    base, ray = (measure(raws[job], settings) for job in (bench.BASELINE, bench.RAY))
    block = data["comparison"]["pytorch"]["ray_2_workers"]
    assert block["speedup"] == round(base["wall_s"] / ray["wall_s"], 3)
    assert block["efficiency"] == round(block["speedup"] / 2, 3)
    assert block["accuracy_difference"] == round(ray["val_accuracy"] - base["val_accuracy"], 4)
    assert data["jobs"][bench.RAY]["run"] == "bench-ray-4e5f6a7b" and data["environment"] == "minikube"
    paths = write_train_report(data, tmp_path, name="bench-cluster")
    assert [p.name for p in paths] == ["bench-cluster.json", "bench-cluster.md", "bench-cluster.png"]
    assert json.loads(paths[0].read_text())["comparison"] == data["comparison"]
    md = paths[1].read_text()
    assert md.startswith("# bench-cluster (minikube): plain vs Ray Train") and "Ray Train, 2 workers" in md
    assert paths[2].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    out = io.StringIO()
    bench._summary(data, out)
    assert f"speedup {block['speedup']}x" in out.getvalue()


def test_runs_with_different_settings_are_not_compared(repo_copy):
    raws = {job: _raw(job) for job in (bench.BASELINE, bench.RAY)}
    raws[bench.RAY] = {**raws[bench.RAY], "settings": {**raws[bench.RAY]["settings"], "epochs": 3}}
    with pytest.raises(OpsError) as exc:
        bench.report(raws, {}, target(repo_copy, "minikube"), [])
    assert "different settings" in str(exc.value)
