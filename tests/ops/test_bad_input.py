"""Bad input to the day-two commands: an unknown environment, job or context, no kubeconfig, a cluster that does
not answer, a job name that matches two kinds. Each is a message for a person and a documented exit code (2 bad
input, 3 unreachable), never a stack trace."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest
import yaml

from ops import jobs
from ops.targets import OpsError, target
from tests.support import REPO


def ops(*args, kubeconfig=None, env=None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "ops", *(["--kubeconfig", str(kubeconfig)] if kubeconfig else []), *args]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=60, env=dict(os.environ, **(env or {})))


def kubeconfig(path, contexts: dict[str, str]):
    """A kubeconfig with these {context: server} (a token user; nothing listens unless a test says so)."""
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": next(iter(contexts)),
        "clusters": [{"name": c, "cluster": {"server": s, "insecure-skip-tls-verify": True}} for c, s in contexts.items()],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": c, "context": {"cluster": c, "user": "u"}} for c in contexts]}))
    return path


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def assert_for_a_person(proc):
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("error: "), proc.stderr


@pytest.mark.parametrize("command", [["status"], ["logs", "--job", "x"], ["diagnose", "--job", "x"],
                                     ["retry", "--job", "x"], ["watch", "--job", "x"], ["bootstrap"]])
def test_an_unknown_environment_lists_the_known_ones(command):
    proc = ops(command[0], "--env", "nowhere", *command[1:])
    assert proc.returncode == 2, proc.stderr
    assert_for_a_person(proc)
    assert "unknown environment 'nowhere'; known environments: eks, minikube" in proc.stderr


def test_a_command_for_one_environment_asks_which():
    proc = ops("logs", "--job", "digits-torch")
    assert proc.returncode == 2
    assert "name the environment: ENV= one of eks, minikube" in proc.stderr


def test_an_unknown_context_lists_the_known_ones(tmp_path):
    config = kubeconfig(tmp_path / "config", {"staging": f"https://127.0.0.1:{closed_port()}"})
    proc = ops("status", "--env", "eks", kubeconfig=config)
    assert proc.returncode == 2, proc.stderr
    assert_for_a_person(proc)
    assert "unknown kubectl context 'eks-training'" in proc.stderr and "known contexts: staging" in proc.stderr


def test_no_kubeconfig_says_so(tmp_path):
    proc = ops("status", "--env", "eks", kubeconfig=tmp_path / "absent")
    assert proc.returncode == 2, proc.stderr
    assert_for_a_person(proc)
    assert "no usable kubeconfig" in proc.stderr and str(tmp_path / "absent") in proc.stderr


def test_a_refused_connection_names_the_context_and_server(tmp_path):
    port = closed_port()
    config = kubeconfig(tmp_path / "config", {"minikube": f"https://127.0.0.1:{port}"})
    proc = ops("status", "--env", "minikube", kubeconfig=config)
    assert proc.returncode == 3, proc.stderr
    assert_for_a_person(proc)
    assert f"cannot reach the cluster of context 'minikube' (https://127.0.0.1:{port})" in proc.stderr


def test_a_server_that_never_answers_is_given_up_on_within_the_reach_timeout(tmp_path):
    """A listener that accepts and never speaks TLS: the client's connect/read timeout ends the wait. It is
    REACH_TIMEOUT_SECONDS (5 s, well under the 10 s the issue allows) unless RAY_GITOPS_REACH_TIMEOUT says otherwise;
    here it says 1 s, so a wait that ignored it (5 s, or urllib3's retries) could not finish inside 4.5 s."""
    from ops.targets import REACH_TIMEOUT_SECONDS
    assert REACH_TIMEOUT_SECONDS == 5
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    try:
        config = kubeconfig(tmp_path / "config", {"minikube": f"https://127.0.0.1:{silent.getsockname()[1]}"})
        started = time.monotonic()
        proc = ops("status", "--env", "minikube", kubeconfig=config, env={"RAY_GITOPS_REACH_TIMEOUT": "1"})
        elapsed = time.monotonic() - started
    finally:
        silent.close()
    print(f"unreachable cluster reported after {elapsed:.1f} s (reach timeout 1 s)")
    assert proc.returncode == 3, proc.stderr
    assert_for_a_person(proc)
    assert "cannot reach the cluster of context 'minikube'" in proc.stderr
    assert elapsed < 4.5, f"{elapsed:.1f} s"


@pytest.mark.parametrize("value", ["0", "-1", "soon", "601"])
def test_a_reach_timeout_that_is_not_a_number_of_seconds_is_refused(monkeypatch, value):
    from ops.targets import reach_timeout
    monkeypatch.setenv("RAY_GITOPS_REACH_TIMEOUT", value)
    with pytest.raises(OpsError) as refused:
        reach_timeout()
    assert refused.value.exit_code == 2
    assert f"RAY_GITOPS_REACH_TIMEOUT={value!r}: expected a number of seconds above 0 and at most 600" in str(
        refused.value)


class _Custom:
    """The two list calls jobs.find makes, answering with fixed objects."""

    def __init__(self, items: dict[str, list]):
        self.items = items

    def list_namespaced_custom_object(self, group, version, namespace, plural):
        return {"items": self.items.get(plural, [])}


class _Clients:
    def __init__(self, items):
        self._custom = _Custom(items)

    def custom(self, context):
        return self._custom

    def core(self, context):
        raise AssertionError("not reached")


def _obj(name):
    return {"metadata": {"name": name, "creationTimestamp": "2026-11-20T10:00:00Z"}}


def test_a_job_name_that_matches_two_kinds_is_refused():
    clients = _Clients({"rayjobs": [_obj("train-0a1b2c3d")], "pytorchjobs": [_obj("train-99887766")]})
    with pytest.raises(OpsError) as exc:
        jobs.find(clients, target(REPO, "eks"), "train")
    assert exc.value.exit_code == 2
    assert "job 'train' of eks matches two kinds (PyTorchJob, RayJob)" in str(exc.value)


def test_an_unknown_job_lists_the_environments_jobs():
    clients = _Clients({"rayjobs": [_obj("digits-torch-0a1b2c3d")]})
    with pytest.raises(OpsError) as exc:
        jobs.find(clients, target(REPO, "eks"), "nope")
    assert exc.value.exit_code == 2
    assert "known jobs: cifar10-torch, digits-torch, fsdp-llama" in str(exc.value)


@pytest.mark.parametrize("target_name", ["logs", "diagnose", "retry", "watch"])
def test_make_targets_that_need_a_job_say_how_to_call_them(target_name):
    proc = subprocess.run(["make", "-s", target_name], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 2
    assert f"usage: make {target_name} JOB=<job>" in proc.stdout + proc.stderr
