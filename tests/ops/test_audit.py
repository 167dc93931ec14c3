"""make audit: the job's commits (git), Argo CD's syncs of them (who, when, which revision) and the runs each sync
made, joined by revision and time; against a real git repository and the Application / run / pod objects as the
API servers return them (the e2e's day-two scenario runs it against the real Argo CD)."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from ops import audit
from ops.targets import OpsError, Target
from tests.ops.support import git


def pod(name, role_labels):
    return SimpleNamespace(metadata=SimpleNamespace(name=name, labels=role_labels, creation_timestamp="t"))


class Custom:
    def __init__(self, app, runs):
        self.app, self.run_objs = app, runs

    def get_namespaced_custom_object(self, group, version, namespace, plural, name):
        if self.app is None or name != self.app["metadata"]["name"]:
            raise _NotFound()
        return self.app

    def list_namespaced_custom_object(self, group, version, namespace, plural):
        return {"items": [o for o in self.run_objs if plural == "rayjobs"]}


class _NotFound(Exception):
    status = 404


class Core:
    events: list = []

    def list_namespaced_event(self, namespace, field_selector):
        assert field_selector == "involvedObject.name=minikube-job-digits-torch"
        return SimpleNamespace(items=self.events)

    def list_namespaced_pod(self, namespace, label_selector):
        if label_selector.startswith("batch.kubernetes.io/job-name="):
            return SimpleNamespace(items=[pod(f"{label_selector.split('=')[1]}-submit", {})])
        return SimpleNamespace(items=[pod("c-head", {"ray.io/node-type": "head"})])


class Clients:
    def __init__(self, app, runs):
        self._custom, self._core = Custom(app, runs), Core()

    def custom(self, context):
        return self._custom

    def core(self, context):
        return self._core


def rayjob(name, created, state="Complete", cluster="c"):
    return {"metadata": {"name": name, "creationTimestamp": created},
            "status": {"jobDeploymentStatus": state, "jobStatus": "SUCCEEDED", "rayClusterName": cluster}}


@pytest.fixture
def history(git_repo):
    """Two changes of minikube's digits-torch job by two people, and one of another job in between."""
    folder = git_repo / "apps" / "minikube" / "job-digits-torch"
    (folder / "note.yaml").write_text("a: 1\n")
    git(git_repo, "add", "-A")
    git(git_repo, "-c", "user.name=Alice", "-c", "user.email=alice@example.org", "commit", "-q", "-m",
        "digits-torch: lr 0.001")
    first = git(git_repo, "rev-parse", "HEAD").strip()
    (git_repo / "apps" / "minikube" / "ray-cluster" / "note.yaml").write_text("b: 1\n")
    git(git_repo, "add", "-A")
    git(git_repo, "-c", "user.name=Carol", "-c", "user.email=carol@example.org", "commit", "-q", "-m",
        "ray-cluster: a note")
    (folder / "note.yaml").write_text("a: 2\n")
    git(git_repo, "add", "-A")
    git(git_repo, "-c", "user.name=Bob", "-c", "user.email=bob@example.org", "commit", "-q", "-m",
        "retry digits-torch (nccl timeout)")
    second = git(git_repo, "rev-parse", "HEAD").strip()
    return git_repo, first, second


def target():
    return Target(env="minikube", context="minikube", namespace="ray-training", argocd_context="minikube",
                  argocd_namespace="argocd", kubeconfig=None, doc={"jobs": {"digits-torch": {}}})


def app(first, second):
    return {"metadata": {"name": "minikube-job-digits-torch"}, "status": {
        "history": [
            {"revision": first, "deployedAt": "2026-11-25T10:00:05Z", "initiatedBy": {"automated": True}, "id": 0},
            {"revision": second, "deployedAt": "2026-11-25T11:00:04Z", "initiatedBy": {"username": "bob"},
             "id": 1}],
        "operationState": {"phase": "Succeeded", "startedAt": "2026-11-25T11:00:01Z",
                           "finishedAt": "2026-11-25T11:00:04Z", "syncResult": {"revision": second},
                           "operation": {"initiatedBy": {"username": "bob"}}}}}


def test_each_run_is_shown_under_the_sync_and_commit_that_made_it(history):
    root, first, second = history
    runs = [rayjob("digits-torch-aaaaaaaa", "2026-11-25T10:00:03Z"),
            rayjob("digits-torch-bbbbbbbb", "2026-11-25T11:00:02Z", state="Running"),
            rayjob("other-cccccccc", "2026-11-25T11:00:02Z")]
    result = audit.audit(Clients(app(first, second), runs), target(), root, "digits-torch")
    assert [c.author for c in result["commits"]][:2] == ["Bob", "Alice"]  # newest first; Carol's is not the job's
    by_revision = {s.revision: s for s in result["syncs"]}
    assert len(result["syncs"]) == 2, "the finished operation is the history's last entry, not a third sync"
    assert [r.name for r in by_revision[first].runs] == ["digits-torch-aaaaaaaa"]
    assert [r.name for r in by_revision[second].runs] == ["digits-torch-bbbbbbbb"]
    assert by_revision[first].initiator == "automated sync" and by_revision[second].initiator == "bob"
    text = audit.render(result)
    lines = text.splitlines()
    alice = next(i for i, line in enumerate(lines) if "by Alice <alice@example.org>: digits-torch: lr 0.001" in line)
    bob = next(i for i, line in enumerate(lines) if "by Bob <bob@example.org>: retry digits-torch" in line)
    assert alice < bob, text
    assert "synced by automated sync at 2026-11-25T10:00:05Z" in lines[alice + 1]
    assert "run digits-torch-aaaaaaaa (RayJob) created 2026-11-25T10:00:03Z: Complete/SUCCEEDED" in lines[alice + 2]
    assert "synced by bob at 2026-11-25T11:00:04Z" in lines[bob + 1]
    assert "run digits-torch-bbbbbbbb" in lines[bob + 2] and "submitter digits-torch-bbbbbbbb-submit" in lines[bob + 2]
    assert "other-cccccccc" not in text and "Carol" not in text


def test_a_sync_in_progress_is_shown_with_who_started_it(history):
    root, first, second = history
    application = app(first, second)
    application["status"]["history"] = application["status"]["history"][:1]
    application["status"]["operationState"] = {"phase": "Running", "startedAt": "2026-11-25T11:00:01Z",
                                               "operation": {"sync": {"revision": second},
                                                             "initiatedBy": {"username": "bob"}}}
    result = audit.audit(Clients(application, []), target(), root, "digits-torch")
    assert [(s.revision, s.initiator, s.phase) for s in result["syncs"]][-1] == (second, "bob", "Running")


def test_an_unknown_job_names_the_known_ones(history):
    root, *_ = history
    with pytest.raises(OpsError) as err:
        audit.audit(Clients(None, []), target(), root, "nope")
    assert "no Application minikube-job-nope" in str(err.value) and "digits-torch" in str(err.value)


def audit_event(verb, resource, name, user, code, impersonated="", namespace="ray-training", stage="ResponseComplete",
                at="2026-11-25T11:00:03.000000Z"):
    event = {"kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "Metadata", "stage": stage, "verb": verb,
             "user": {"username": user}, "objectRef": {"resource": resource, "namespace": namespace, "name": name},
             "responseStatus": {"code": code}, "requestReceivedTimestamp": at}
    if impersonated:
        event["impersonatedUser"] = {"username": impersonated}
    return json.dumps(event)


def test_the_api_servers_audit_log_adds_who_made_each_object_and_what_the_syncing_people_tried(history, tmp_path):
    """--audit-log: the writes to the job's runs and what they own (a deleted run's too), by whom and as whom, and
    the other writes of the people who synced it (refusals marked); other jobs' and other people's are left out."""
    root, first, second = history
    sa = "system:serviceaccount:ray-training:argocd-workload-sync"
    log = tmp_path / "audit.log"
    log.write_text("\n".join([
        audit_event("patch", "rayjobs", "digits-torch-aaaaaaaa", "argocd-manager", 201, impersonated=sa,
                    at="2026-11-25T10:00:03Z"),
        audit_event("create", "rayjobs", "digits-torch-aaaaaaaa", "argocd-manager", 201, stage="RequestReceived"),
        audit_event("delete", "rayjobs", "digits-torch-aaaaaaaa", "argocd-manager", 200, at="2026-11-25T10:30:00Z"),
        audit_event("create", "pods", "digits-torch-bbbbbbbb-head-x", "kuberay-operator", 201),
        audit_event("update", "rayjobs/status", "digits-torch-bbbbbbbb", "kuberay-operator", 200),
        audit_event("patch", "rayjobs", "digits-torch-bbbbbbbb", "kueue", 409),
        audit_event("create", "rayjobs", "other-cccccccc", "argocd-manager", 201),
        audit_event("create", "clusterrolebindings", "", "bob", 403, namespace=""),
        audit_event("create", "selfsubjectaccessreviews", "", "bob", 201, namespace=""),
        audit_event("create", "clusterrolebindings", "someone-elses", "mallory", 403, namespace=""),
        ""]))
    runs = [rayjob("digits-torch-bbbbbbbb", "2026-11-25T11:00:02Z", state="Running")]
    result = audit.audit(Clients(app(first, second), runs), target(), root, "digits-torch", [log])
    text = audit.render(result)
    objects = [e.name for e in result["api"]["objects"]]
    assert objects == ["digits-torch-aaaaaaaa", "digits-torch-aaaaaaaa", "digits-torch-bbbbbbbb-head-x",
                       "digits-torch-bbbbbbbb"], objects  # no status write; the deleted run's too
    assert "failed: patch rayjobs digits-torch-bbbbbbbb in ray-training by kueue (409)" in text
    assert f"patch rayjobs digits-torch-aaaaaaaa in ray-training by argocd-manager as {sa} (201)" in text
    assert "refused: create clusterrolebindings by bob (403)" in text and "selfsubjectaccessreviews" not in text
    assert "other-cccccccc" not in text and "mallory" not in text


def test_peoples_actions_through_argocd_are_argocd_servers_events_on_the_application(history, monkeypatch):
    """A delete through Argo CD's API reaches the cluster as Argo CD's account: argocd-server's Events on the
    Application are where the person is named (the controller's are left out)."""
    import datetime
    root, first, second = history
    at = datetime.datetime(2026, 11, 25, 11, 0, 9, tzinfo=datetime.UTC)

    def event(component, message):
        return SimpleNamespace(source=SimpleNamespace(component=component), message=message, last_timestamp=at,
                               event_time=None, first_timestamp=None)
    monkeypatch.setattr(Core, "events", [
        event("argocd-application-controller", "Initiated automated sync to 'abc'"),
        event("argocd-server", "bob deleted resource ray.io/RayJob 'digits-torch-bbbbbbbb'")])
    text = audit.render(audit.audit(Clients(app(first, second), []), target(), root, "digits-torch"))
    assert "2026-11-25T11:00:09Z  bob deleted resource ray.io/RayJob 'digits-torch-bbbbbbbb'" in text
    assert "Initiated automated sync" not in text


def test_an_audit_log_that_is_not_one_names_its_line(history, tmp_path):
    root, first, second = history
    log = tmp_path / "audit.log"
    log.write_text(audit_event("create", "rayjobs", "x", "u", 201) + "\nnot json\n")
    with pytest.raises(OpsError) as err:
        audit.audit(Clients(app(first, second), []), target(), root, "digits-torch", [log])
    assert f"{log}:2: not an audit event" in str(err.value)
    with pytest.raises(OpsError, match="cannot read the audit log"):
        audit.audit(Clients(app(first, second), []), target(), root, "digits-torch", [tmp_path / "missing.log"])


def test_events_that_cannot_be_read_are_said_and_the_rest_of_the_audit_stands(history, monkeypatch):
    root, first, second = history

    class Forbidden(Exception):
        reason = "Forbidden"

    def refuse(self, namespace, field_selector):
        raise Forbidden()
    monkeypatch.setattr(Core, "list_namespaced_event", refuse)
    text = audit.render(audit.audit(Clients(app(first, second), []), target(), root, "digits-torch"))
    assert "Argo CD's events on minikube-job-digits-torch could not be read (Forbidden)" in text
    assert "synced by bob" in text
