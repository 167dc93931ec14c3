"""People's access as generated (generator/access.py): who may do what in Argo CD, decided by Argo CD's own RBAC
code (`argocd admin settings rbac can`, v3.5.1 built from its module) on the committed argocd-rbac-cm; the single
sign-on in argocd-cm; CODEOWNERS; the namespace's RoleBindings."""
from __future__ import annotations

import subprocess

import pytest

from tests.support import REPO, load_yaml, run_generator

MANAGED = REPO / "argocd" / "managed"
RBAC_CM = MANAGED / "configmap-argocd-rbac-cm.yaml"
ARGOCD_CM = MANAGED / "configmap-argocd-cm.yaml"

ML_EKS, ML, VIEWER, PLATFORM = "ml-engineers-eks", "ml-engineers", "ml-viewers", "platform-team"
STRANGER = "someone-else"

# (subject: a value of the token's groups claim, action, resource, object) -> allowed
TABLE = [
    # an environment's ML engineers: their workload apps
    (ML_EKS, "get", "applications", "eks/eks-job-cifar10-torch", True),
    (ML_EKS, "sync", "applications", "eks/eks-job-cifar10-torch", True),
    (ML_EKS, "get", "logs", "eks/eks-job-cifar10-torch", True),
    (ML_EKS, "delete/ray.io/RayJob/ray-training/cifar10-torch-1a2b3c4d", "applications", "eks/eks-job-cifar10-torch",
     True),
    (ML_EKS, "delete/kubeflow.org/PyTorchJob/ray-training/fsdp-llama-1a2b3c4d", "applications",
     "eks/eks-job-fsdp-llama", True),
    (ML_EKS, "delete//Pod/ray-training/cifar10-torch-1a2b3c4d-head-x", "applications", "eks/eks-job-cifar10-torch",
     True),
    (ML_EKS, "get", "applications", "eks-platform/eks-kuberay-operator", True),
    # ... and not more
    (ML_EKS, "delete", "applications", "eks/eks-job-cifar10-torch", False),
    (ML_EKS, "override", "applications", "eks/eks-job-cifar10-torch", False),  # another revision, local manifests
    (ML_EKS, "update", "applications", "eks/eks-job-cifar10-torch", False),
    (ML_EKS, "delete/ray.io/RayCluster/ray-training/eks-ray", "applications", "eks/eks-ray-cluster", False),
    (ML_EKS, "delete//Secret/ray-training/x", "applications", "eks/eks-ray-cluster", False),
    (ML_EKS, "delete//Pod/kuberay-system/kuberay-operator-x", "applications", "eks-platform/eks-kuberay-operator",
     False),
    (ML_EKS, "sync", "applications", "eks-platform/eks-platform", False),
    (ML_EKS, "sync", "applications", "eks-platform/eks-kuberay-operator", False),
    (ML_EKS, "create", "exec", "eks/eks-ray-cluster", False),
    (ML_EKS, "sync", "applications", "minikube/minikube-job-digits-torch", False),  # another environment's
    (ML_EKS, "update", "projects", "eks", False),
    (ML, "sync", "applications", "minikube/minikube-job-digits-torch", True),
    (ML, "sync", "applications", "eks/eks-job-cifar10-torch", False),
    (ML, "sync", "applications", "minikube-platform/minikube-platform", False),
    # viewers read, everywhere, and change nothing
    (VIEWER, "get", "applications", "eks-platform/eks-platform", True),
    (VIEWER, "get", "applications", "minikube/minikube-ray-cluster", True),
    (VIEWER, "sync", "applications", "minikube/minikube-ray-cluster", False),
    (VIEWER, "delete//Pod/ray-training/x", "applications", "minikube/minikube-ray-cluster", False),
    # the platform team does everything
    (PLATFORM, "sync", "applications", "eks-platform/eks-kuberay-operator", True),
    (PLATFORM, "override", "applications", "eks/eks-job-cifar10-torch", True),
    (PLATFORM, "delete", "applications", "minikube/minikube-job-digits-torch", True),
    (PLATFORM, "update", "projects", "eks-platform", True),
    # nobody else: there is no default role
    (STRANGER, "get", "applications", "minikube/minikube-ray-cluster", False),
]

OFFLINE_KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: none, user: {token: none}}]
contexts: [{name: none, context: {cluster: none, user: none}}]
current-context: none
"""


@pytest.fixture(scope="module")
def kubeconfig(tmp_path_factory):
    """`rbac can` builds a Kubernetes client before it reads --policy-file; it never calls it."""
    path = tmp_path_factory.mktemp("kube") / "config"
    path.write_text(OFFLINE_KUBECONFIG)
    return path


def can(argocd, kubeconfig, subject, action, resource, obj) -> bool:
    proc = subprocess.run([str(argocd), "admin", "settings", "rbac", "can", subject, action, resource, obj,
                           "--policy-file", str(RBAC_CM), "--kubeconfig", str(kubeconfig)],
                          capture_output=True, text=True, timeout=60)
    answer = proc.stdout.strip().splitlines()[-1:] if proc.stdout.strip() else []
    assert answer in (["Yes"], ["No"]), f"argocd rbac can: {proc.returncode}\n{proc.stdout}\n{proc.stderr[-2000:]}"
    return answer == ["Yes"]


@pytest.mark.parametrize("subject,action,resource,obj,allowed", TABLE,
                         ids=[f"{s}-{a}-{r}-{o}" for s, a, r, o, _ in TABLE])
def test_argocd_decides_as_the_table_says(argocd_cli, kubeconfig, subject, action, resource, obj, allowed):
    assert can(argocd_cli, kubeconfig, subject, action, resource, obj) is allowed


def test_argocd_validates_the_generated_policy(argocd_cli, kubeconfig):
    proc = subprocess.run([str(argocd_cli), "admin", "settings", "rbac", "validate", "--policy-file", str(RBAC_CM),
                           "--kubeconfig", str(kubeconfig)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_no_default_role_and_groups_from_the_token():
    data = load_yaml(RBAC_CM.read_text())["data"]
    assert data["policy.default"] == "" and data["scopes"] == "[groups]"


def test_single_sign_on_in_argocd_cm_carries_no_secret():
    data = load_yaml(ARGOCD_CM.read_text())["data"]
    oidc = load_yaml(data["oidc.config"])
    assert oidc["issuer"] == "https://sso.example.org" and oidc["clientID"] == "argocd"
    assert oidc["clientSecret"] == "$oidc.clientSecret"  # a key of argocd-secret, set out of git
    assert "groups" in oidc["requestedScopes"]
    assert data["application.sync.requireOverridePrivilegeForRevisionSync"] == "true"
    assert data["url"] == "https://argocd.example.org" and data["admin.enabled"] == "false"


def test_codeowners_routes_the_platform_to_the_platform_team_and_jobs_to_their_engineers():
    """GitHub: the last matching pattern wins."""
    rules = [line.split() for line in (REPO / ".github" / "CODEOWNERS").read_text().splitlines()
             if line and not line.startswith("#")]

    def owners(path):
        import fnmatch
        found = []
        for pattern, *who in rules:
            anchored = pattern.lstrip("/")
            if pattern == "*" or fnmatch.fnmatch(path, anchored + "*" if anchored.endswith("/") else anchored):
                found = who
        return found
    assert owners("argocd/managed/appproject-eks.yaml") == ["@example-org/platform"]
    assert owners("apps/eks/platform/resourcequota-platform.yaml") == ["@example-org/platform"]
    assert owners("apps/eks/clusters/west-b/platform/storageclass-fsx-sc.yaml") == ["@example-org/platform"]
    assert owners("apps/eks/clusters/west-b/job-cifar10-torch/rayjob-x.yaml") == ["@example-org/ml-eks"]
    assert owners("charts/ray-job/values.yaml") == ["@example-org/platform"]
    assert owners("apps/eks/job-cifar10-torch/rayjob-x.yaml") == ["@example-org/ml-eks"]
    assert owners("apps/minikube/job-digits-torch/rayjob-x.yaml") == ["@example-org/ml-engineers"]
    assert owners("environments/eks.yaml") == ["@example-org/platform", "@example-org/ml-eks"]
    assert owners("environments/base.yaml") == ["@example-org/platform"]


def test_the_namespace_gives_the_groups_read_and_nothing_more():
    for env, ml, folder in [(env, ml, folder) for env, ml in (("eks", ML_EKS), ("minikube", ML))
                            for folder in [REPO / "apps" / env / "platform",
                                           *sorted((REPO / "apps" / env).glob("clusters/*/platform"))]
                            if folder.is_dir()]:
        role = load_yaml((folder / "role-ray-gitops-training-reader.yaml").read_text())
        assert {verb for rule in role["rules"] for verb in rule["verbs"]} == {"get", "list", "watch"}
        for name, ref in (("rolebinding-ray-gitops-view.yaml", ("ClusterRole", "view")),
                          ("rolebinding-ray-gitops-training-reader.yaml", ("Role", "ray-gitops-training-reader"))):
            binding = load_yaml((folder / name).read_text())
            assert (binding["roleRef"]["kind"], binding["roleRef"]["name"]) == ref
            assert {s["name"] for s in binding["subjects"]} == {ml, VIEWER}


def test_a_second_single_sign_on_is_refused_where_it_is_set(repo_copy):
    env = repo_copy / "environments" / "eks.yaml"
    text = env.read_text()
    assert "\naccess:\n" in text
    env.write_text(text.replace("\naccess:\n", "\naccess:\n  sso:\n    issuer: https://other.example.org\n"
                                "    clientID: argocd\n", 1))
    proc = run_generator(repo_copy, "render")
    assert proc.returncode != 0
    assert "environments/eks.yaml" in proc.stderr and "one single sign-on" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_ray_write_on_the_standing_cluster_goes_to_its_ml_engineers_and_the_platform():
    """minikube's standing RayCluster takes Kubernetes tokens (auth.kubernetesTokens): its Ray pods run as its own
    ServiceAccount, which may ask TokenReviews and SubjectAccessReviews (system:auth-delegator) and ray:write its
    own cluster; the environment's ML engineers and the platform team may ray:write that cluster, nobody else."""
    platform = REPO / "apps" / "minikube" / "platform"
    cluster = load_yaml((REPO / "apps" / "minikube" / "ray-cluster" / "raycluster-minikube-ray.yaml").read_text())
    assert cluster["spec"]["authOptions"] == {"mode": "token", "enableK8sTokenAuth": True}
    for group in [cluster["spec"]["headGroupSpec"], *cluster["spec"]["workerGroupSpecs"]]:
        pod = group["template"]["spec"]
        assert pod["serviceAccountName"] == "minikube-ray" and pod["automountServiceAccountToken"] is True
    role = load_yaml((platform / "role-minikube-ray-ray-write.yaml").read_text())
    assert role["rules"] == [{"apiGroups": ["ray.io"], "resources": ["rayclusters"], "resourceNames": ["minikube-ray"],
                              "verbs": ["ray:write"]}]
    binding = load_yaml((platform / "rolebinding-minikube-ray-ray-write.yaml").read_text())
    assert {(s["kind"], s["name"]) for s in binding["subjects"]} == {
        ("ServiceAccount", "minikube-ray"), ("Group", ML), ("Group", PLATFORM)}
    review = load_yaml((platform / "clusterrolebinding-ray-training-minikube-ray-token-review.yaml").read_text())
    assert review["roleRef"]["name"] == "system:auth-delegator"
    assert review["subjects"] == [{"kind": "ServiceAccount", "name": "minikube-ray", "namespace": "ray-training"}]
    # eks keeps the shared token of a Secret: nothing of this is rendered there
    assert not list((REPO / "apps" / "eks").rglob("*ray-write*"))
