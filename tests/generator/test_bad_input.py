"""Every class of bad input: a message that locates the fault, a non-zero exit, apps/ byte-for-byte untouched."""
import re

from tests.support import run_generator, tree_digest


def edit(path, old, new):
    text = path.read_text()
    assert old in text, f"fixture drift: {old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def line_of(path, needle) -> int:
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if needle in line:
            return i
    raise AssertionError(f"{needle!r} not in {path}")


def render_fails(root, *args) -> str:
    before = tree_digest(root / "apps")
    assert before, "the copy should hold the committed apps/"
    proc = run_generator(root, "render", *args)
    assert proc.returncode != 0, proc.stdout
    assert tree_digest(root / "apps") == before, "a failed render must leave apps/ exactly as it was"
    assert not list(root.glob(".render-*")), "no staging directory is left behind"
    return proc.stderr


def test_unknown_environment_lists_the_known_ones(repo_copy):
    err = render_fails(repo_copy, "--env", "staging")
    assert "unknown environment 'staging'" in err
    assert "known environments: eks, minikube" in err


def test_yaml_syntax_error_gives_file_and_line(repo_copy):
    env = repo_copy / "environments" / "eks.yaml"
    edit(env, "  efa:\n    enabled: true\n", "  efa:\n    enabled: [true\n")
    err = render_fails(repo_copy, "--env", "eks")
    assert re.search(r"environments/eks\.yaml:\d+:\d+: YAML syntax error", err), err


def test_wrong_type_gives_file_line_key_and_expectation(repo_copy):
    env = repo_copy / "environments" / "minikube.yaml"
    edit(env, "    workers:\n      replicas: 1\n", "    workers:\n      replicas: two\n")
    line = line_of(env, "replicas: two")
    err = render_fails(repo_copy, "--env", "minikube")
    assert f"environments/minikube.yaml:{line}: cluster.workerGroups.workers.replicas" in err
    assert "expected: integer" in err


def test_wrong_type_in_environment_structure(repo_copy):
    env = repo_copy / "environments" / "minikube.yaml"
    edit(env, "exposeDashboard: true", "exposeDashboard: sometimes")
    line = line_of(env, "exposeDashboard: sometimes")
    err = render_fails(repo_copy)
    assert f"environments/minikube.yaml:{line}: exposeDashboard" in err
    assert "expected: boolean" in err


def test_unknown_key_gives_file_line_and_key_path(repo_copy):
    env = repo_copy / "environments" / "eks.yaml"
    edit(env, "  head:\n    gpus: 1\n", "  head:\n    gpus: 1\n    gpu_count: 1\n")
    line = line_of(env, "gpu_count: 1")
    err = render_fails(repo_copy, "--env", "eks")
    assert f"environments/eks.yaml:{line}: cluster.head.gpu_count: unknown key 'gpu_count'" in err
    assert "known keys here:" in err and "gpus" in err


def test_unknown_top_level_key(repo_copy):
    env = repo_copy / "environments" / "eks.yaml"
    env.write_text(env.read_text() + "\nclsuter: {}\n")
    err = render_fails(repo_copy, "--env", "eks")
    assert "unknown key 'clsuter'" in err and "environments/eks.yaml:" in err


def test_undefined_template_name(repo_copy):
    env = repo_copy / "environments" / "eks.yaml"
    edit(env, 'repository: "{{ vars.registry }}/ray-training"', 'repository: "{{ vars.regsitry }}/ray-training"')
    line = line_of(env, "vars.regsitry")
    err = render_fails(repo_copy, "--env", "eks")
    assert f"environments/eks.yaml:{line}: cluster.image.repository" in err
    assert "has no attribute 'regsitry'" in err or "regsitry" in err


def test_chart_that_does_not_exist(repo_copy):
    env = repo_copy / "environments" / "minikube.yaml"
    env.write_text(env.read_text() + "\njobs:\n  extra:\n    chart: ray-jbo\n")
    err = render_fails(repo_copy, "--env", "minikube")
    assert "chart 'ray-jbo' does not exist under charts/" in err
    assert "known charts:" in err and "ray-job" in err
    assert re.search(r"environments/minikube\.yaml:\d+", err)


def test_helm_failure_shows_helms_message(repo_copy):
    template = repo_copy / "charts" / "ray-job" / "templates" / "rayjob.yaml"
    template.write_text(template.read_text() + '\n{{ fail "the chart refuses these values" }}\n')
    err = render_fails(repo_copy)
    assert "helm failed" in err
    assert "the chart refuses these values" in err
    assert "charts/ray-job" in err


def test_helm_schema_failure_for_a_missing_required_value(repo_copy):
    env = repo_copy / "environments" / "minikube.yaml"
    env.write_text(env.read_text() + "\njobs:\n  extra:\n    cluster:\n      workerGroups:\n        new-group: {gpus: 0}\n")
    err = render_fails(repo_copy, "--env", "minikube")
    assert "replicas" in err


def test_a_failure_in_one_environment_leaves_the_others_untouched(repo_copy):
    env = repo_copy / "environments" / "eks.yaml"
    edit(env, "      minReplicas: 0\n", "      minReplicas: -1\n")
    render_fails(repo_copy)  # all environments: eks fails, so minikube is not swapped either


def test_a_bad_value_error_carries_its_parts(repo_copy):
    """Callers read a bad value's key path, problem and apps from the error, not from its text; one value that
    breaks several apps is one error naming them all."""
    import pytest

    from generator import apps, environments
    from generator.errors import RenderErrors

    env = repo_copy / "environments" / "minikube.yaml"
    edit(env, "    workers:\n      replicas: 1\n", "    workers:\n      replicas: two\n")
    edit(env, "    sizeLimit: 1Gi", "    sizeLimit: [1]")
    with pytest.raises(RenderErrors) as info:
        apps.compose(repo_copy, environments.load(repo_copy, "minikube"))
    by_field = {e.fault.field: e for e in info.value.errors}
    assert set(by_field) == {"cluster.workerGroups.workers.replicas", "cluster.shm.sizeLimit"}
    replicas = by_field["cluster.workerGroups.workers.replicas"]
    assert replicas.location.file.endswith("environments/minikube.yaml")
    assert replicas.location.line == line_of(env, "replicas: two")
    assert replicas.fault.problem == "'two' is not of type 'integer'" and replicas.fault.hint == " (expected: integer)"
    assert replicas.fault.apps == (("ray-cluster", "ray-cluster"),)  # the jobs set their own replicas
    assert str(replicas) == (f"environments/minikube.yaml:{replicas.location.line}: cluster.workerGroups.workers."
                             "replicas: 'two' is not of type 'integer' in the values of app ray-cluster (ray-cluster) "
                             "(expected: integer)")
    shm = by_field["cluster.shm.sizeLimit"]  # the environment's cluster layer: the standing cluster and every job
    assert ("ray-cluster", "ray-cluster") in shm.fault.apps and len(shm.fault.apps) > 1
    assert all(f"{app} ({chart})" in str(shm) for app, chart in shm.fault.apps)


def test_a_ray_job_name_kuberay_would_refuse_is_located(repo_copy):
    """KubeRay v1.7.0 refuses RayJob names over 47 characters or not DNS-1035; a run is <job>-<8 hex>."""
    env = repo_copy / "environments" / "minikube.yaml"
    long_name = "digits-torch-with-a-name-much-too-long-x"  # 40 characters
    edit(env, "exposeDashboard: true\n", f"exposeDashboard: true\njobs:\n  {long_name}:\n    job: {{}}\n"
         "  1digits:\n    job: {}\n")
    err = render_fails(repo_copy, "--env", "minikube")
    assert f"environments/minikube.yaml:{line_of(env, long_name)}: jobs.{long_name}: " in err, err
    assert "has 40 characters" in err and "at most 38 characters" in err
    assert f"environments/minikube.yaml:{line_of(env, '1digits:')}: jobs.1digits: " in err, err
    assert "starting with a letter" in err


def test_an_operator_namespace_kuberay_is_not_installed_in_is_located(repo_copy):
    """The Ray clusters' NetworkPolicy admits the KubeRay operator's namespace to the dashboard; another namespace
    than the one the Argo CD layer installs KubeRay into would fail every RayJob after 300 s (KubeRay 1.7.0)."""
    env = repo_copy / "environments" / "minikube.yaml"
    edit(env, "  shm:\n    sizeLimit: 1Gi\n", "  shm:\n    sizeLimit: 1Gi\n  networkPolicy:\n"
         "    operatorNamespace: ray-system\n")
    err = render_fails(repo_copy, "--env", "minikube")
    line = line_of(env, "operatorNamespace: ray-system")
    assert f"environments/minikube.yaml:{line}: cluster.networkPolicy.operatorNamespace: 'ray-system' is not the " \
           "namespace" in err, err
    assert "'kuberay-system'" in err and err.count("is not the namespace") == 1, err


CLUSTER_ADMIN_BINDING = """
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ .Release.Name }}-admin
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
subjects: [{kind: ServiceAccount, name: default, namespace: {{ .Release.Namespace }}}]
"""


def test_a_workload_chart_rendering_rbac_is_refused_naming_app_and_chart(repo_copy):
    """Git write on a job's folder is not cluster-admin: the render refuses RBAC (and anything cluster-scoped) in
    any app but platform, before Argo CD's workload project would refuse it at sync."""
    template = repo_copy / "charts" / "ray-job" / "templates" / "take-over.yaml"
    template.write_text(CLUSTER_ADMIN_BINDING)
    err = render_fails(repo_copy, "--env", "minikube")
    assert re.search(r"app minikube/job-digits-torch \(charts/ray-job\) renders ClusterRoleBinding "
                     r"\S+-admin: rbac.authorization.k8s.io:ClusterRoleBinding is RBAC", err), err
    assert "charts/platform" in err and "Traceback" not in err


def test_the_platform_chart_may_render_cluster_scoped_kinds(repo_copy):
    template = repo_copy / "charts" / "platform" / "templates" / "priorityclass-test.yaml"
    template.write_text("apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata:\n  name: ray-gitops-test\n"
                        "value: 1000\n")
    proc = run_generator(repo_copy, "render", "--env", "minikube")
    assert proc.returncode == 0, proc.stderr
    assert (repo_copy / "apps" / "minikube" / "platform" / "priorityclass-ray-gitops-test.yaml").is_file()
