"""Day two (issue 12) against the real API servers, KubeRay, the training-operator and Argo CD: `make status`,
`make logs`, `make diagnose`, `make retry`, `make watch` and `make bootstrap` again (python -m ops with the
published checkout as the repository and the e2e kubeconfig). The job scenarios are in tests/e2e/day_two.py."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from e2e import nodes
from tests.e2e import day_two
from tests.e2e.harness import KUBEFLOW, RAY
from tests.support import load_yaml

ENVS = nodes.environments()


@pytest.fixture(scope="module")
def settled(e2e, bootstrapped):
    """Every Application Synced and Healthy (test_05 ended every run it started)."""
    for env in ENVS:
        e2e.wait_synced_healthy(env, 420)


def _live_runs(e2e, env):
    return {o["metadata"]["name"]: kind for kind, gv, plural in (("RayJob", RAY, "rayjobs"),
                                                                  ("PyTorchJob", KUBEFLOW, "pytorchjobs"))
            for o in e2e.objects(env, gv, plural)}


@pytest.mark.parametrize("env", ENVS)
def test_status_reports_apps_clusters_jobs_and_the_claim(e2e, settled, env):
    proc = e2e.ops("status", "--env", env, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    status = json.loads(proc.stdout)["environments"][0]
    apps = {a["name"]: a for a in status["applications"]}
    assert set(apps) == e2e.expected_apps(env), sorted(apps)
    assert all((a["sync"], a["health"]) == ("Synced", "Healthy") for a in apps.values()), apps
    doc = e2e.env_doc(env)
    standing = next(c for c in status["rayClusters"] if c["name"] == doc["rayCluster"]["name"])
    head = [p.metadata.name for p in e2e.pods(env, f"ray.io/cluster={standing['name']},ray.io/node-type=head")]
    assert standing["headPod"] in head, (standing, head)
    live_cluster = next(o for o in e2e.objects(env, RAY, "rayclusters") if o["metadata"]["name"] == standing["name"])
    replicas = sum(g.get("replicas") or 0 for g in live_cluster["spec"]["workerGroupSpecs"])  # eks: autoscales from 0
    assert standing["workers"]["ready"] == standing["workers"]["desired"] == replicas, (standing, replicas)
    assert standing["image"] == f"{doc['cluster']['image']['repository']}:{doc['cluster']['image']['tag']}"
    live = _live_runs(e2e, env)
    jobs = {j["run"]: j for j in status["jobs"]}
    assert set(jobs) == set(live), (sorted(jobs), sorted(live))
    for name, record in jobs.items():
        assert record["kind"] == live[name]
        assert record["status"] == "succeeded", record
        assert record["job"] == name.rsplit("-", 1)[0]
        assert record["start"] and record["durationSeconds"] is not None and record["attempts"] >= 1, record
        assert record["monitoring"]["logs"].startswith(f"make logs ENV={env} JOB={record['job']}"), record
        if record["kind"] == "PyTorchJob":
            masters = [p.metadata.name for p in e2e.pods(env, f"training.kubeflow.org/job-name={name},"
                                                              f"training.kubeflow.org/replica-type=master")]
            # cleanPodPolicy Running: a worker still running when the master succeeded was deleted by the operator,
            # so the workers to report are the ones left, which may be none
            workers = sorted(p.metadata.name for p in e2e.pods(env, f"training.kubeflow.org/job-name={name},"
                                                                    f"training.kubeflow.org/replica-type=worker"))
            assert record["headPod"] in masters and sorted(record["workerPods"]) == workers, (record, workers)
    checkpoints = (doc.get("cluster") or {}).get("checkpoints") or {}
    if checkpoints.get("enabled") and checkpoints.get("store", "volume") == "volume":
        assert status["checkpointClaim"] == {"name": checkpoints["claimName"], "phase": "Bound"}
    else:
        assert status["checkpointClaim"] is None
    table = e2e.ops("status", "--env", env)
    assert table.returncode == 0, table.stderr
    for name in list(apps) + list(jobs) + [standing["name"]]:
        assert name in table.stdout, f"{name} missing from the table:\n{table.stdout}"


def test_logs_of_a_pytorchjob_are_its_master_and_workers_prefixed_by_pod(e2e, settled):
    env = next((e for e in ENVS if any(k == "PyTorchJob" for k in _live_runs(e2e, e).values())), None)
    if env is None:
        pytest.fail("no environment runs a PyTorchJob: nothing shows make logs on one")
    name = next(n for n, k in _live_runs(e2e, env).items() if k == "PyTorchJob")
    job = name.rsplit("-", 1)[0]
    pods = e2e.pods(env, f"training.kubeflow.org/job-name={name}")
    assert pods, f"{name} has no pods left to read"
    for rank, pod in enumerate(sorted(pods, key=lambda p: p.metadata.name)):
        e2e.print_to_log(env, pod, [f"[rank{rank}] step 100 loss 2.31", f"[rank{rank}] saved checkpoint step_100"])
    proc = e2e.ops("logs", "--env", env, "--job", job)
    assert proc.returncode == 0, proc.stderr
    for rank, pod in enumerate(sorted(pods, key=lambda p: p.metadata.name)):
        assert f"[{pod.metadata.name}] [rank{rank}] step 100 loss 2.31" in proc.stdout, proc.stdout
    tail = e2e.ops("logs", "--env", env, "--job", job, "--tail", "1")
    assert "step 100" not in tail.stdout and "saved checkpoint" in tail.stdout, tail.stdout


@pytest.fixture(scope="module")
def scenarios(e2e, settled):
    return day_two.run_both(e2e)


def test_retry_is_one_commit_that_starts_a_new_run_resuming_from_the_checkpoints(e2e, scenarios):
    from e2e import remotes
    record = scenarios["retried"]
    assert not record.error or len(record.runs) > 1, record.error
    out = record.outputs["retry: e2e: a new run"]
    env, job = record.env, record.job
    assert f"retry {env}/{job} (run 1): e2e: a new run" in out and "pushed" in out, out
    first_retry = remotes.git("log", "--format=%H %s", cwd=e2e.work).splitlines()
    sha = next(line.split()[0] for line in first_retry if f"retry {env}/{job} (run 1)" in line)
    files = remotes.git("show", "--name-only", "--format=", sha, cwd=e2e.work).splitlines()
    assert f"environments/{env}.yaml" in files
    folder = str(e2e.app_dir(env, f"job-{job}").relative_to(e2e.work))  # its cluster's own, on a fleet
    assert all(f == f"environments/{env}.yaml" or f.startswith(f"{folder}/") for f in files), files
    before = remotes.git("show", f"{sha}~1:environments/{env}.yaml", cwd=e2e.work)
    after = remotes.git("show", f"{sha}:environments/{env}.yaml", cwd=e2e.work)
    comments = [line.strip() for line in before.splitlines() if line.strip().startswith("#")]
    assert comments == [line.strip() for line in after.splitlines() if line.strip().startswith("#")]
    assert load_yaml(after)["jobs"][job]["job"]["run"] == 1
    specs = {}
    for rev in (f"{sha}~1", sha):
        listing = remotes.git("ls-tree", "--name-only", f"{rev}:{folder}", cwd=e2e.work).splitlines()
        spec_file = next(f for f in listing if f.endswith("-spec.yaml"))
        specs[rev] = load_yaml(remotes.git("show", f"{rev}:{folder}/{spec_file}", cwd=e2e.work))
    assert specs[f"{sha}~1"]["data"] == specs[sha]["data"], "the retry changed the training spec: it would not " \
                                                            "resume from the same checkpoints"
    assert len(record.runs) >= 2 and record.runs[0] != record.runs[1], record.runs


def test_logs_follow_a_run_to_its_end_prefixed_by_pod(e2e, scenarios):
    """`make logs FOLLOW=1` streams the driver as it prints and ends with the run (exit 1: it failed); `make logs`
    afterwards shows the run that exists then (the retry's)."""
    record = scenarios["retried"]
    assert "logs --follow" in record.outputs, record.error
    out = record.outputs["logs --follow"]
    assert record.codes["logs --follow"] == 1, out[-2000:]
    first = record.runs[1]
    for line in day_two.DRIVER_START + day_two.NCCL_TIMEOUT:
        assert any(o.startswith(f"[{first}-") and o.endswith(f"] {line}") for o in out.splitlines()), \
            f"{line!r} not followed:\n{out}"
    assert not record.error, record.error
    after = record.outputs["logs after"]
    assert record.codes["logs after"] == 0, after
    for line in day_two.DRIVER_RESUMED:
        assert any(o.startswith(f"[{record.runs[2]}-") and o.endswith(f"] {line}") for o in after.splitlines()), \
            f"{line!r} not in:\n{after}"


def test_watch_auto_retries_a_retryable_failure_through_git_and_stops_on_success(e2e, scenarios):
    record = scenarios["retried"]
    assert not record.error, record.error
    out = record.outputs["watch"]
    assert record.codes["watch"] == 0, out[-3000:]
    assert "NCCL collective timeout [nccl-timeout; retryable]" in out, out
    assert "Watchdog caught collective operation timeout" in out, out
    assert f"retry {record.env}/{record.job} (run 2): auto-retry 1/1 after nccl-timeout" in out, out
    assert f"{record.job} succeeded (run {record.runs[2]}, 1 retry)" in out, out
    assert record.codes["diagnose after"] == 0 and "nothing to diagnose" in record.outputs["diagnose after"]


def test_audit_joins_the_retries_commits_syncs_and_runs(e2e, scenarios):
    """`make audit` on the job `make retry` and `make watch` retried: each retry commit (its author and subject), the
    sync of its revision by Argo CD (who: here the automated sync), and the run that sync made, read from git, the
    real Application's history and the cluster."""
    record = scenarios["retried"]
    proc = e2e.ops("audit", "--env", record.env, "--job", record.job)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    lines = out.splitlines()
    retry = next((i for i, line in enumerate(lines) if f"retry {record.env}/{record.job} (run 2)" in line), None)
    assert retry is not None and " commit " in lines[retry] and " by " in lines[retry], out
    # Argo CD synced that revision, or a later one that carried it (another scenario pushed in between)
    synced = next(i for i, line in enumerate(lines) if i > retry and "synced by automated sync" in line)
    made = next(i for i, line in enumerate(lines) if f"run {record.runs[-1]} " in line)
    assert made == synced + 1 or lines[made - 1].lstrip().startswith("run "), out  # under the sync that made it
    assert any(f"retry {record.env}/{record.job} (run 1)" in line for line in lines), out


def test_diagnose_names_a_stuck_pull_with_its_evidence_and_fix(e2e, scenarios):
    record = scenarios["stopped"]
    assert "diagnose stuck" in record.outputs, record.error
    out = record.outputs["diagnose stuck"]
    assert record.codes["diagnose stuck"] == 0, out
    assert "the image cannot be pulled [image-pull; needs a change]" in out, out
    assert "ErrImagePull" in out and "cluster.image" in out, out
    data = json.loads(record.outputs["diagnose stuck json"])
    assert data["known"] and not data["retryable"], data
    pull = next(f for f in data["findings"] if f["class"] == "image-pull")
    assert "ErrImagePull" in pull["evidence"] and pull["source"].startswith("pod "), pull


def test_watch_does_not_retry_a_failure_that_needs_a_change(e2e, scenarios):
    record = scenarios["stopped"]
    assert "watch" in record.outputs, record.error
    out = record.outputs["watch"]
    assert record.codes["watch"] == 1, out[-3000:]
    assert "a container or Ray worker was killed for memory [oom-killed; needs a change]" in out, out
    assert "is not retried: it needs a change" in out, out
    assert record.commits_after == record.commits_before or not any(
        f"retry {record.env}/{record.job}" in c and "auto-retry" in c for c in record.commits_after), \
        record.commits_after
    assert not record.error, record.error


@pytest.mark.parametrize("env", ENVS)
def test_every_app_ends_synced_and_healthy_after_the_day_two_runs(e2e, scenarios, env):
    e2e.wait_synced_healthy(env, 300)


def test_bootstrap_again_is_a_no_op_that_names_a_missing_secret(e2e, scenarios):
    env = "eks" if "eks" in ENVS else ENVS[0]
    again = e2e.ops("bootstrap", "--env", env, "--timeout", "120")
    assert again.returncode == 0, again.stdout + again.stderr
    from ops.bootstrap import referenced_secrets
    secrets = sorted(referenced_secrets(e2e.work / "apps" / env, e2e.namespace(env)))
    if not secrets:
        pytest.skip(f"{env}'s workloads read no Secret")
    namespace, name = secrets[0]
    saved = e2e.core(env).read_namespaced_secret(name, namespace)
    e2e.core(env).delete_namespaced_secret(name, namespace)
    try:
        missing = e2e.ops("bootstrap", "--env", env, "--timeout", "120")
    finally:
        e2e.core(env).create_namespaced_secret(namespace, {"metadata": {"name": name}, "data": saved.data,
                                                           "type": saved.type})
    assert missing.returncode == 1, missing.stdout + missing.stderr
    assert f"-n {namespace} create secret generic {name} --from-literal=" in missing.stdout, missing.stdout


def test_bootstrap_where_argocd_is_missing_prints_the_pinned_install(e2e, settled, tmp_path):
    """An environment whose Argo CD context has no Argo CD: the pinned install command, exit 3."""
    env = "eks" if "eks" in ENVS else ENVS[0]
    repo = tmp_path / "repo"
    shutil.copytree(e2e.work / "environments", repo / "environments")
    base = repo / "environments" / "base.yaml"
    doc = load_yaml(base.read_text())
    doc["gitops"]["argocd"]["context"] = e2e.context(env)
    base.write_text(yaml.safe_dump(doc))
    cmd, environ = e2e.ops_command("bootstrap", "--env", env)
    cmd[cmd.index("--repo") + 1] = str(repo)
    import subprocess
    proc = subprocess.run(cmd, capture_output=True, text=True, env=environ, timeout=120)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert f"Argo CD is not installed on context {e2e.context(env)}" in proc.stderr, proc.stderr
    assert "argo-cd/v3.5.1/manifests/install.yaml" in proc.stderr, proc.stderr


def test_notifications_reach_the_webhook_with_the_token_from_the_secret(e2e, scenarios):
    """Argo CD's notifications controller (v3.5.1), configured by the rendered argocd-notifications-cm, POSTs to the
    environment's webhook when a job's Application turns Healthy (succeeded) or Degraded (failed), with the bearer
    token it read from argocd-notifications-secret."""
    import base64

    from e2e import webhook
    from tests.e2e.harness import wait_for
    enabled = [env for env in ENVS if ((e2e.env_doc(env).get("gitops") or {}).get("notifications") or {})
               .get("enabled")]
    if not enabled:
        pytest.fail("no environment enables notifications: nothing shows them working")
    record = scenarios["retried"]
    secret = e2e.core(e2e.current["management"]).read_namespaced_secret("argocd-notifications-secret", "argocd")
    for env in enabled:
        service = f"ray-gitops-{env}"
        key = e2e.env_doc(env)["gitops"]["notifications"]["webhook"]["tokenKey"]
        token = base64.b64decode(secret.data[key]).decode()

        def check(env=env, service=service):
            got = [r for r in webhook.received(Path(e2e.current["notifications"])) if r["path"] == f"/{service}"]
            events = {(r["body"].get("event"), r["body"].get("application")) for r in got}
            want = {("job-succeeded", a) for a in e2e.expected_apps(env) if "-job-" in a}
            if env == record.env:  # its first retried run failed
                want.add(("job-degraded", f"{env}-job-{record.job}"))
            return want <= events, got
        got = wait_for(check, 120, 5, f"the {env} notifications did not arrive")
        # exactly one event per run across every later, unrelated push (bump, retries, other jobs' commits): the
        # same application and synced revision never announced twice
        seen = [(r["body"].get("event"), r["body"].get("application"), r["body"].get("syncedRevision")) for r in got]
        repeated = sorted({s for s in seen if seen.count(s) > 1})
        assert not repeated, f"announced more than once: {repeated}"
        assert all(r["authorization_sha256"] == webhook.digest(f"Bearer {token}") for r in got), \
            "a notification came without the token of argocd-notifications-secret"
        assert all(r["body"]["environment"] == env for r in got), got
