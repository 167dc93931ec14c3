"""What `make bootstrap` / `make status` say a RayCluster's dashboard takes (ops/status.dashboard_auth)."""
from ops.status import dashboard_auth


def _cluster(options: dict | None, account: str = "") -> dict:
    pod = {"serviceAccountName": account} if account else {}
    return {"metadata": {"name": "minikube-ray"},
            "spec": {**({"authOptions": options} if options is not None else {}),
                     "headGroupSpec": {"template": {"spec": pod}}}}


def test_kubernetes_tokens_name_the_verb_and_the_clusters_account():
    said = dashboard_auth(_cluster({"mode": "token", "enableK8sTokenAuth": True}, "minikube-ray"), "ray-training")
    assert "ray:write on rayclusters/minikube-ray" in said
    assert "kubectl -n ray-training create token minikube-ray" in said


def test_a_shared_token_names_its_secret_and_key():
    said = dashboard_auth(_cluster({"mode": "token", "secretName": "ray-auth-token"}), "ray-training")
    assert said == "the token in Secret ray-training/ray-auth-token (key auth_token)"
    # KubeRay's default Secret is named like the cluster
    assert "Secret ray-training/minikube-ray " in dashboard_auth(_cluster({"mode": "token"}), "ray-training")


def test_no_auth_says_nothing():
    assert dashboard_auth(_cluster({"mode": "disabled"}), "ray-training") == ""
    assert dashboard_auth(_cluster(None), "ray-training") == ""
