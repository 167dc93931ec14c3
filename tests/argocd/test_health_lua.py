"""Argo CD custom health checks for Ray and PyTorch kinds, executed with a real Lua 5.1 runtime (lupa).

Every health-checks/<group>/<Kind>/health_test.yaml case is run through its health.lua in a sandbox
that mirrors Argo CD's (see argocd_health_lua.py) and must give exactly the expected status and message.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
from pathlib import Path

import pytest
import yaml

from generator import versions
from tests.argocd import argocd_health_lua as hl
from tests.support import go_module_dir, load_yaml

# The kinds this repository must ship a health check for, and the health states each must be tested in.
# All four kinds can be suspended (RayCluster/RayJob/RayService spec.suspend, PyTorchJob spec.runPolicy.suspend).
REQUIRED_STATES = {
    "argoproj.io/Application": {"Healthy", "Progressing", "Degraded", "Suspended"},
    "ray.io/RayCluster": {"Healthy", "Progressing", "Degraded", "Suspended"},
    "ray.io/RayJob": {"Healthy", "Progressing", "Degraded", "Suspended"},
    "ray.io/RayService": {"Healthy", "Progressing", "Degraded", "Suspended"},
    "kubeflow.org/PyTorchJob": {"Healthy", "Progressing", "Degraded", "Suspended"},
    # Kueue's objects (none has a health check upstream): active or not, and not reconciled yet
    "kueue.x-k8s.io/ClusterQueue": {"Healthy", "Progressing", "Degraded"},
    "kueue.x-k8s.io/LocalQueue": {"Healthy", "Progressing", "Degraded"},
    "kueue.x-k8s.io/AdmissionCheck": {"Healthy", "Progressing", "Degraded"},
    "kueue.x-k8s.io/MultiKueueCluster": {"Healthy", "Progressing", "Degraded"},
}

CHECKS = hl.discover_health_checks()
CASES = [case for check in CHECKS for case in hl.load_cases(check)]


def _check(name: str) -> hl.HealthCheck:
    for check in CHECKS:
        if check.name == name:
            return check
    raise AssertionError(f"no health check for {name} under {hl.CUSTOMIZATIONS_ROOT}")


def _case(check_name: str, input_path: str) -> hl.HealthCase:
    for case in hl.load_cases(_check(check_name)):
        if case.input_path == input_path:
            return case
    raise AssertionError(f"{check_name} has no case {input_path}")


# --------------------------------------------------------------------------------------------- the runtime


def test_runtime_is_lua_5_1_without_open_libraries():
    runtime = hl.new_lua_runtime()
    assert hl.lua_version(runtime) == "Lua 5.1"
    assert runtime.eval("type(string)") == "nil"
    assert runtime.eval("type(math)") == "nil"
    assert runtime.eval("type(io)") == "nil"
    assert runtime.eval("type(python)") == "nil"
    assert runtime.eval("type(table.sort)") == "function"
    assert runtime.eval("type(os.time)") == "function"
    assert runtime.eval("type(os.execute)") == "nil"


def test_objects_are_converted_like_argo_cd():
    resource = {"metadata": {"generation": 2}, "status": {"conditions": [{"type": "A"}, {"type": "B"}], "ok": True,
                                                          "gone": None}}
    script = """
      local c = obj.status.conditions
      return { status = "Healthy",
               message = #c .. " " .. c[1].type .. c[2].type .. " " .. obj.metadata.generation .. " " ..
                         tostring(obj.status.ok) .. " " .. tostring(obj.status.gone) }
    """
    assert hl.run_health_lua(script, resource) == {"status": "Healthy", "message": "2 AB 2 true nil"}


# --------------------------------------------------------------------------------------------- discovery and coverage


def test_a_health_check_exists_for_every_required_kind():
    assert CHECKS, f"no */*/health_test.yaml found under {hl.CUSTOMIZATIONS_ROOT}"
    assert {check.name for check in CHECKS} == set(REQUIRED_STATES)
    for check in CHECKS:
        assert check.script_path.is_file(), f"{check.name}: health.lua missing next to health_test.yaml"


@pytest.mark.parametrize("name", sorted(REQUIRED_STATES))
def test_every_required_state_has_a_fixture(name):
    cases = hl.load_cases(_check(name))
    assert cases, f"{name}: health_test.yaml has no tests"
    covered = {case.status for case in cases}
    missing = REQUIRED_STATES[name] - covered
    assert not missing, f"{name}: no fixture for {sorted(missing)} (covered: {sorted(covered)})"


@pytest.mark.parametrize("check", CHECKS, ids=lambda check: check.name)
def test_health_test_yaml_is_in_argo_cd_format_and_matches_testdata(check):
    document = load_yaml(check.test_path.read_text(encoding="utf-8"))
    assert set(document) == {"tests"}
    input_paths = []
    for entry in document["tests"]:
        assert set(entry) == {"healthStatus", "inputPath"}, entry
        assert set(entry["healthStatus"]) == {"status", "message"}, entry
        status, message = entry["healthStatus"]["status"], entry["healthStatus"]["message"]
        assert status in hl.HEALTH_STATUSES, entry
        assert isinstance(message, str) and message.strip(), f"{entry['inputPath']}: every state needs a message"
        input_path = entry["inputPath"]
        assert input_path.startswith("testdata/") and input_path.endswith(".yaml"), input_path
        assert (check.directory / input_path).is_file(), f"{check.name}: {input_path} does not exist"
        # Fixture names start with the state they demonstrate (healthy_, progressing_, degraded_, ...).
        assert Path(input_path).stem.split("_", 1)[0] == status.lower(), f"{input_path} is expected to be {status}"
        input_paths.append(input_path)
    assert len(input_paths) == len(set(input_paths)), "a fixture is listed twice"
    on_disk = {f"testdata/{path.name}" for path in (check.directory / "testdata").glob("*.yaml")}
    assert on_disk == set(input_paths), f"fixtures not covered by health_test.yaml: {sorted(on_disk - set(input_paths))}"


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
def test_fixture_is_the_right_kind(case):
    resource = hl.load_resource(case.fixture_path)
    group = resource["apiVersion"].split("/")[0]
    assert (group, resource["kind"]) == (case.check.group, case.check.kind)


# --------------------------------------------------------------------------------------------- the health checks


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
def test_health_lua(case):
    actual = hl.evaluate_case(case)
    assert actual == {"status": case.status, "message": case.message}


def test_issue_examples():
    """The examples the issue names: RayJob Complete+SUCCEEDED is Healthy, Failed is Degraded with the message,
    a suspended job is Suspended."""
    succeeded = hl.load_resource(_case("ray.io/RayJob", "testdata/healthy_succeeded.yaml").fixture_path)
    assert (succeeded["status"]["jobDeploymentStatus"], succeeded["status"]["jobStatus"]) == ("Complete", "SUCCEEDED")
    assert hl.run_health_lua(_check("ray.io/RayJob").script, succeeded)["status"] == "Healthy"

    failed = hl.load_resource(_case("ray.io/RayJob", "testdata/degraded_failed.yaml").fixture_path)
    assert failed["status"]["jobDeploymentStatus"] == "Failed"
    health = hl.run_health_lua(_check("ray.io/RayJob").script, failed)
    assert health["status"] == "Degraded"
    assert failed["status"]["message"] in health["message"]

    suspended = hl.load_resource(_case("ray.io/RayJob", "testdata/suspended.yaml").fixture_path)
    assert suspended["spec"]["suspend"] is True
    assert hl.run_health_lua(_check("ray.io/RayJob").script, suspended)["status"] == "Suspended"


@pytest.mark.parametrize("check", CHECKS, ids=lambda check: check.name)
def test_missing_or_empty_status_is_progressing(check):
    fixture = sorted((check.directory / "testdata").glob("*.yaml"))[0]
    resource = hl.load_resource(fixture)
    resource.pop("status", None)
    assert hl.run_health_lua(check.script, resource)["status"] == "Progressing"
    resource["status"] = {}
    assert hl.run_health_lua(check.script, resource)["status"] == "Progressing"


@pytest.mark.parametrize("check", CHECKS, ids=lambda check: check.name)
def test_every_mapped_state_is_pinned_by_a_fixture(check):
    """Each `return result("<status>", ...)` in a health.lua is a mapped state. Changing any one of them to another
    status must make some fixture fail, i.e. no mapping is left without a fixture."""
    script = check.script
    cases = hl.load_cases(check)
    returns = list(re.finditer(r'result\("(\w+)"', script))
    assert returns, f"{check.name}: no result(...) calls found"
    # a mapping in a prelude helper (activeHealth) is this check's to pin only if the check calls that helper
    own = check.script_path.read_text(encoding="utf-8")
    prelude_end = len(script) - len(own)

    def in_unused_helper(match) -> bool:
        if match.start() >= prelude_end:
            return False
        helpers = re.findall(r"local function (\w+)\(", script[:match.start()])
        return bool(helpers) and f"{helpers[-1]}(" not in own
    unpinned = []
    for match in returns:
        if in_unused_helper(match):
            continue
        other = "Missing" if match.group(1) != "Missing" else "Unknown"
        mutated = script[:match.start(1)] + other + script[match.end(1):]
        if not hl.failing_cases(cases, mutated):
            unpinned.append(f"line {script[:match.start()].count(chr(10)) + 1}: {match.group(0)}")
    assert not unpinned, f"{check.name}: states with no fixture: {unpinned}"


# --------------------------------------------------------------------------------------------- the runner catches mistakes


def test_runner_fails_a_script_that_returns_the_wrong_status():
    always_healthy = 'return { status = "Healthy", message = "RayJob failed (AppFailed): whatever" }'
    case = _case("ray.io/RayJob", "testdata/degraded_failed.yaml")
    with pytest.raises(AssertionError, match="expected .*'Degraded'.* got .*'Healthy'"):
        hl.assert_case(case, always_healthy)


def test_runner_fails_a_wrong_expectation():
    case = _case("ray.io/RayJob", "testdata/degraded_failed.yaml")
    hl.assert_case(case)  # the real expectation holds
    wrong_status = hl.HealthCase(case.check, case.input_path, "Healthy", case.message)
    with pytest.raises(AssertionError):
        hl.assert_case(wrong_status)
    wrong_message = hl.HealthCase(case.check, case.input_path, case.status, case.message + " (edited)")
    with pytest.raises(AssertionError):
        hl.assert_case(wrong_message)


def test_runner_reports_a_broken_check_directory(tmp_path):
    """A copy of the RayJob check whose Lua treats every finished job as Healthy: the same runner that the
    parametrized test uses must report the Degraded fixtures as failures."""
    broken = tmp_path / "ray.io" / "RayJob"
    shutil.copytree(_check("ray.io/RayJob").directory, broken)
    shutil.copy(hl.CUSTOMIZATIONS_ROOT / "prelude.lua", tmp_path / "prelude.lua")
    broken_script = (broken / "health.lua").read_text(encoding="utf-8").replace(
        'if deployment == "Failed" then\n  return result("Degraded"',
        'if deployment == "Failed" then\n  return result("Healthy"')
    assert broken_script != (broken / "health.lua").read_text(encoding="utf-8")
    (broken / "health.lua").write_text(broken_script, encoding="utf-8")

    [check] = hl.discover_health_checks(tmp_path)
    failures = hl.failing_cases(hl.load_cases(check))
    assert failures, "the runner accepted a health.lua that calls failed RayJobs Healthy"
    assert all("'Degraded'" in failure and "'Healthy'" in failure for failure in failures)
    assert any("degraded_failed.yaml" in failure for failure in failures)


def test_invalid_status_becomes_unknown_like_argo_cd():
    result = hl.run_health_lua('return { status = "Fine", message = "x" }', {"kind": "RayJob"})
    assert result == {"status": "Unknown", "message": hl.INVALID_HEALTH_STATUS_MESSAGE}


def test_non_table_result_and_lua_errors_are_reported():
    with pytest.raises(hl.HealthScriptError, match="expect table output"):
        hl.run_health_lua('return "Healthy"', {})
    with pytest.raises(hl.HealthScriptError, match="Lua error"):
        hl.run_health_lua("return obj.status.missing.field", {})


def test_string_library_is_not_available_as_in_argo_cd():
    """Scripts in argocd-cm run without Lua's string library unless useOpenLibs is set; ours must not need it."""
    with pytest.raises(hl.HealthScriptError):
        hl.run_health_lua('return { status = string.upper("healthy"), message = "" }', {})
    with pytest.raises(hl.HealthScriptError):
        hl.run_health_lua('local s = "a,b"; return { status = "Healthy", message = s:sub(1, 1) }', {})


# --------------------------------------------------------------------------------------------- delivery into argocd-cm


def test_argocd_cm_keys_map_to_the_files():
    data = hl.argocd_cm_health_data()
    assert set(data) == {
        "resource.customizations.health.argoproj.io_Application",
        "resource.customizations.health.ray.io_RayCluster",
        "resource.customizations.health.ray.io_RayJob",
        "resource.customizations.health.ray.io_RayService",
        "resource.customizations.health.kubeflow.org_PyTorchJob",
        "resource.customizations.health.kueue.x-k8s.io_ClusterQueue",
        "resource.customizations.health.kueue.x-k8s.io_LocalQueue",
        "resource.customizations.health.kueue.x-k8s.io_AdmissionCheck",
        "resource.customizations.health.kueue.x-k8s.io_MultiKueueCluster",
    }
    for check in CHECKS:
        prelude = (check.directory.parent.parent / "prelude.lua").read_text(encoding="utf-8")
        assert data[check.config_map_key] == prelude + "\n" + check.script_path.read_text(encoding="utf-8")
    assert hl.config_map_key("", "Service") == "resource.customizations.health.Service"


def test_checks_share_one_prelude():
    """Each helper is defined once, in the prelude; no check defines its own copy."""
    helpers = ("result", "nonempty", "describe", "conditionsByType", "anyTrue", "generationBehind")
    prelude = (hl.CUSTOMIZATIONS_ROOT / "prelude.lua").read_text(encoding="utf-8")
    for name in helpers:
        assert f"local function {name}(" in prelude
    for check in CHECKS:
        own = check.script_path.read_text(encoding="utf-8")
        assert "local hs" not in own and not [n for n in helpers if f"local function {n}(" in own], check.name


def test_lua_taken_from_a_rendered_argocd_cm_behaves_the_same():
    config_map = {"apiVersion": "v1", "kind": "ConfigMap",
                  "metadata": {"name": "argocd-cm", "namespace": "argocd",
                               "labels": {"app.kubernetes.io/name": "argocd-cm",
                                          "app.kubernetes.io/part-of": "argocd"}},
                  "data": hl.argocd_cm_health_data()}
    rendered = load_yaml(yaml.safe_dump(config_map, sort_keys=True))
    for case in CASES:
        script = rendered["data"][case.check.config_map_key]
        hl.assert_case(case, script)


def test_generator_renders_the_same_argocd_cm_entries():
    """The generator's argocd-cm (generator.argocd.health_configmap) carries exactly these scripts under these keys
    (beside its other settings: single sign-on, impersonation)."""
    from generator import argocd
    data = argocd.health_configmap(hl.REPO_ROOT)["data"]
    assert {k: v for k, v in data.items() if k.startswith("resource.customizations.health.")} == \
        hl.argocd_cm_health_data()


# --------------------------------------------------------------------------------------------- fixtures vs pinned CRDs


def _crd_dir() -> Path:
    """$RAY_GITOPS_SCHEMA_LOCATION (the repository's schema location variable), else ../shared/crds, else the
    .cache/schemas that `make schemas` fills. CRDs are read in place."""
    configured = os.environ.get("RAY_GITOPS_SCHEMA_LOCATION", "").strip()
    if configured:
        return Path(configured).expanduser()
    shared = hl.REPO_ROOT.parent / "shared" / "crds"
    return shared if shared.is_dir() else hl.REPO_ROOT / ".cache" / "schemas"


def _python_patterns(node):
    """Go's RE2 takes a flag after the anchor (Kueue's `^(?i)[a-z]...`), Python's re only at the start: the same
    expression with the flag first."""
    if isinstance(node, dict):
        return {key: (value.replace("^(?i)", "(?i)^") if key == "pattern" and isinstance(value, str)
                      else _python_patterns(value)) for key, value in node.items()}
    if isinstance(node, list):
        return [_python_patterns(item) for item in node]
    return node


@functools.cache
def _crd_schemas(directory: Path) -> dict[tuple[str, str, str], dict]:
    """{(group, version, kind): openAPIV3Schema} of every CRD under directory (parsed once per session)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    schemas = {}
    for path in sorted(directory.rglob("*.yaml")):
        for document in yaml.load_all(path.read_text(encoding="utf-8"), Loader=loader):
            if not isinstance(document, dict) or document.get("kind") != "CustomResourceDefinition":
                continue
            spec = document["spec"]
            for version in spec.get("versions", []):
                schema = (version.get("schema") or {}).get("openAPIV3Schema")
                if schema:
                    schemas[(spec["group"], version["name"], spec["names"]["kind"])] = _python_patterns(schema)
    return schemas


def _undeclared_fields(value, schema, path="") -> list[str]:
    """Fields the schema does not declare (what kubeconform -strict rejects and the API server prunes)."""
    problems = []
    if isinstance(value, dict) and isinstance(schema, dict):
        if schema.get("x-kubernetes-preserve-unknown-fields"):
            return problems
        properties = schema.get("properties")
        additional = schema.get("additionalProperties")
        for key, item in value.items():
            if properties is not None and key in properties:
                problems += _undeclared_fields(item, properties[key], f"{path}.{key}")
            elif isinstance(additional, dict):
                problems += _undeclared_fields(item, additional, f"{path}.{key}")
            elif properties is not None or additional is False:
                problems.append(f"{path}.{key}")
    elif isinstance(value, list) and isinstance(schema, dict) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            problems += _undeclared_fields(item, schema["items"], f"{path}[{index}]")
    return problems


@pytest.mark.parametrize("case", [pytest.param(case, marks=pytest.mark.go) if case.check.name.startswith("kueue")
                                  else case for case in CASES], ids=lambda case: case.id)
def test_fixture_matches_the_pinned_crd_schema(case):
    """Fixtures use only status (and spec) fields that the pinned CRDs declare, with the declared types."""
    jsonschema = pytest.importorskip("jsonschema")
    directory = _crd_dir()
    if not directory.is_dir():
        pytest.skip(f"CRD directory {directory} not found (set RAY_GITOPS_SCHEMA_LOCATION)")
    resource = hl.load_resource(case.fixture_path)
    group, version = resource["apiVersion"].split("/")
    if group == "kueue.x-k8s.io":  # not among ../shared/crds: read in place from Kueue's module at the pinned tag
        directory = go_module_dir("sigs.k8s.io/kueue", versions.pinned().kueue) / "config" / "components" / "crd" / "bases"
    schemas = _crd_schemas(directory)
    schema = schemas.get((group, version, resource["kind"]))
    assert schema is not None, f"no CRD for {resource['apiVersion']} {resource['kind']} in {directory}"
    # metadata is ObjectMeta, not part of the CRD schema. Timestamps are JSON strings (in case YAML parsed any).
    body = _stringify_timestamps({key: value for key, value in resource.items() if key != "metadata"})
    schema = {**schema, "required": [r for r in schema.get("required", []) if r != "metadata"]}
    validator_class = jsonschema.validators.validator_for(schema, default=jsonschema.Draft4Validator)
    errors = [f"{'/'.join(map(str, error.absolute_path))}: {error.message}"
              for error in validator_class(schema).iter_errors(body)]
    assert errors == []
    assert _undeclared_fields(body, schema) == []


def _stringify_timestamps(value):
    if isinstance(value, dict):
        return {key: _stringify_timestamps(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_stringify_timestamps(item) for item in value]
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


def test_undeclared_field_check_catches_typos():
    schema = {"type": "object", "properties": {"status": {"type": "object", "properties": {"state": {"type": "string"}}}}}
    assert _undeclared_fields({"status": {"state": "ready"}}, schema) == []
    assert _undeclared_fields({"status": {"stat": "ready"}}, schema) == [".status.stat"]

