"""gitops.notifications renders Argo CD's notifications (argocd-notifications-cm): a service per environment that
turns them on, default subscriptions by the environment label, credentials only as `$key` references into
argocd-notifications-secret; bad settings are refused naming the file, line and key."""
from __future__ import annotations

from tests.generator.test_bad_input import edit, line_of
from tests.support import load_yaml, run_generator, tree_digest

CM = "argocd/managed/configmap-argocd-notifications-cm.yaml"


def rendered(root) -> dict:
    return load_yaml((root / CM).read_text())["data"]


def test_the_committed_layer_notifies_eks_by_webhook_with_a_token_reference(repo_root):
    data = rendered(repo_root)
    service = load_yaml(data["service.webhook.ray-gitops-eks"])
    assert service["url"] == "https://hooks.example.com/ray-gitops/eks"
    assert service["headers"] == [{"name": "Authorization", "value": "Bearer $eks-webhook-token"}]
    assert not any(k.endswith("ray-gitops-minikube") for k in data)  # minikube leaves them off
    subscriptions = load_yaml(data["subscriptions"])
    assert subscriptions == [{"recipients": ["ray-gitops-eks"], "selector": "ray-gitops/environment=eks",
                              "triggers": ["on-job-succeeded", "on-job-degraded", "on-out-of-sync"]}]
    for trigger in ("on-job-succeeded", "on-job-degraded", "on-out-of-sync"):
        (condition,) = load_yaml(data[f"trigger.{trigger}"])
        # once per sync operation: app.status.sync.revision moves with every push to main, and each push would
        # announce every finished job again
        assert condition["oncePer"] == "app.status.operationState?.syncResult?.revision"
        template = load_yaml(data[f"template.{condition['send'][0]}"])
        assert template["webhook"]["ray-gitops-eks"]["method"] == "POST"


def _enable(root, block: str) -> None:
    edit(root / "environments" / "minikube.yaml", "exposeDashboard: true\n", "exposeDashboard: true\n" + block)


def test_slack_and_sqs_services(repo_copy):
    _enable(repo_copy, "gitops:\n  notifications:\n    enabled: true\n    service: slack\n"
                       "    slack: {channel: ml-training, apiURL: 'https://chat.example.com/api'}\n"
                       "    triggers: [on-job-degraded]\n")
    assert run_generator(repo_copy, "render").returncode == 0
    data = rendered(repo_copy)
    assert load_yaml(data["service.slack.ray-gitops-minikube"]) == {
        "token": "$slack-token", "apiURL": "https://chat.example.com/api"}
    minikube = next(s for s in load_yaml(data["subscriptions"]) if s["selector"].endswith("=minikube"))
    assert minikube == {"recipients": ["ray-gitops-minikube:ml-training"], "triggers": ["on-job-degraded"],
                        "selector": "ray-gitops/environment=minikube"}
    edit(repo_copy / "environments" / "minikube.yaml", "    service: slack\n",
         "    service: awssqs\n    awssqs: {queue: ray-gitops-events, region: us-west-2}\n")
    assert run_generator(repo_copy, "render").returncode == 0
    assert load_yaml(rendered(repo_copy)["service.awssqs.ray-gitops-minikube"]) == {
        "queue": "ray-gitops-events", "region": "us-west-2"}  # no keys: the controller's own AWS identity


def _refused(root, needle: str) -> str:
    before = tree_digest(root / "argocd")
    proc = run_generator(root, "render")
    assert proc.returncode != 0, proc.stdout
    assert tree_digest(root / "argocd") == before
    return proc.stderr


def test_a_webhook_without_a_url_is_refused(repo_copy):
    _enable(repo_copy, "gitops:\n  notifications:\n    enabled: true\n")
    err = _refused(repo_copy, "enabled: true")
    assert "environments/minikube.yaml" in err and "gitops.notifications" in err and "webhook" in err, err


def test_a_token_value_where_a_key_belongs_is_refused(repo_copy):
    _enable(repo_copy, "gitops:\n  notifications:\n    enabled: true\n    webhook:\n"
                       "      url: https://hooks.example.com/x\n      tokenKey: 'xoxb-1234 secret value'\n")
    line = line_of(repo_copy / "environments" / "minikube.yaml", "tokenKey:")
    err = _refused(repo_copy, "tokenKey")
    assert f"environments/minikube.yaml:{line}: gitops.notifications.webhook.tokenKey" in err, err


def test_an_unknown_service_is_refused(repo_copy):
    _enable(repo_copy, "gitops:\n  notifications:\n    enabled: true\n    service: sns\n")
    line = line_of(repo_copy / "environments" / "minikube.yaml", "service: sns")
    err = _refused(repo_copy, "service: sns")
    assert f"environments/minikube.yaml:{line}: gitops.notifications.service" in err, err
