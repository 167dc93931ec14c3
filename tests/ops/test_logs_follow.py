"""make logs --follow ends when the run has ended, even when the server keeps a stream open (kwok never ends a
follow; neither does a kubelet for a pod that keeps running after its run, e.g. a cluster kept for debugging).
The e2e caught the follow outliving its run; this pins the fix with a stream that never ends by itself."""
from __future__ import annotations

import io
import threading
import time
from types import SimpleNamespace as NS

from ops import jobs as jobs_mod
from ops import logs


class EndlessResponse:
    """A log stream that yields its lines, then blocks as a follow the server keeps open does. As with urllib3,
    shutdown() wakes the reader; close() from another thread waits for the reader (the e2e hung there)."""

    def __init__(self, lines):
        self.lines, self.release = lines, threading.Event()

    def stream(self, _size):
        yield from (line.encode() + b"\n" for line in self.lines)
        self.release.wait(60)

    def shutdown(self):
        self.release.set()

    def close(self):
        self.release.wait(60)  # blocked behind the reader, like HTTPResponse.close() on a read in progress

    def release_conn(self):
        pass


def pod(name, phase):
    return NS(metadata=NS(name=name, uid=f"uid-{name}", deletion_timestamp=None),
              spec=NS(containers=[NS(name="ray-job-submitter")]),
              status=NS(phase=phase, container_statuses=[NS(name="ray-job-submitter", restart_count=0)]))


def run_with(status, pods):
    r = jobs_mod.Run("e", "job", "RayJob", "job-0123abcd", {"metadata": {"name": "job-0123abcd"}, "status": status})
    r.pods = {"submitter": pods}
    return r


def follower(monkeypatch, runs, response):
    core = NS(read_namespaced_pod_log=lambda *a, **k: response)
    clients = NS(core=lambda context: core)
    target = NS(context="ctx", namespace="ns")
    seq = iter(runs)
    last = {}

    def find(_clients, _target, _job):
        last["run"] = next(seq, last.get("run"))
        return last["run"]
    monkeypatch.setattr(jobs_mod, "find", find)
    out = io.StringIO()
    return logs.Follower(clients, target, "job", out=out, poll=0.05, grace=0.2), out


def test_follow_ends_after_the_run_ends_though_its_pod_still_runs(monkeypatch):
    running = {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"}
    failed = {"jobDeploymentStatus": "Failed", "jobStatus": "FAILED"}
    response = EndlessResponse(["epoch 1/30", "NCCL watchdog timeout"])
    runs = [run_with(running, [pod("sub", "Running")])] * 3 + [run_with(failed, [pod("sub", "Running")])]
    f, out = follower(monkeypatch, runs, response)
    started = time.monotonic()
    run = f.run(timeout=10)
    assert run.finished and time.monotonic() - started < 5
    assert out.getvalue().splitlines() == ["[sub] epoch 1/30", "[sub] NCCL watchdog timeout"]
    response.release.set()


def test_follow_keeps_going_while_the_run_runs(monkeypatch):
    running = {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"}
    response = EndlessResponse(["still training"])
    f, _ = follower(monkeypatch, [run_with(running, [pod("sub", "Running")])], response)
    started = time.monotonic()
    run = f.run(timeout=1.0)  # only the timeout ends it
    assert not run.finished and time.monotonic() - started >= 1.0
    response.release.set()


def test_follow_ends_when_the_run_is_pruned(monkeypatch):
    running = {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"}
    response = EndlessResponse(["epoch 1/30"])
    f, out = follower(monkeypatch, [run_with(running, [pod("sub", "Running")])], response)
    calls = {"n": 0}
    found = jobs_mod.find

    def find(clients, target, job):
        calls["n"] += 1
        if calls["n"] > 2:
            raise jobs_mod.NoRun("no job 'job' in environment e")
        return found(clients, target, job)
    monkeypatch.setattr(jobs_mod, "find", find)
    run = f.run(timeout=10)
    assert run.name == "job-0123abcd" and "(run job-0123abcd is gone)" in out.getvalue()


def test_a_container_without_a_log_is_said_and_the_others_still_print(monkeypatch):
    """A container the kubelet has no log for (waiting to start; kwok's 'no logs found') answers 400: make logs says
    so in the kubelet's words and prints the other pods (the e2e's ML engineer met a stack trace there)."""
    from kubernetes.client.exceptions import ApiException

    def read(name, namespace, **kwargs):
        if name == "quiet":
            error = ApiException(status=400, reason="Bad Request")
            error.body = '{"kind":"Status","message":"container \\"ray-job-submitter\\" is waiting to start"}'
            raise error
        return "epoch 1\nepoch 2\n"
    clients = NS(core=lambda context: NS(read_namespaced_pod_log=read))
    monkeypatch.setattr(jobs_mod, "find", lambda *_: run_with({}, [pod("quiet", "Running"), pod("loud", "Running")]))
    out = io.StringIO()
    assert logs.print_logs(clients, NS(context="ctx", namespace="ns"), "job", out=out) == 2
    assert out.getvalue().splitlines() == [
        '[quiet] (no log: container "ray-job-submitter" is waiting to start)', "[loud] epoch 1", "[loud] epoch 2"]


def test_a_refusal_still_fails_loudly(monkeypatch):
    import pytest
    from kubernetes.client.exceptions import ApiException

    def read(*_a, **_k):
        raise ApiException(status=403, reason="Forbidden")
    clients = NS(core=lambda context: NS(read_namespaced_pod_log=read))
    monkeypatch.setattr(jobs_mod, "find", lambda *_: run_with({}, [pod("p", "Running")]))
    with pytest.raises(ApiException):
        logs.print_logs(clients, NS(context="ctx", namespace="ns"), "job", out=io.StringIO())
