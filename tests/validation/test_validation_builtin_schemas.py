"""Built-in kinds: which kubernetes-validate version is used, and file naming."""

from __future__ import annotations

import pytest

from validation.builtin_schemas import (
    BuiltinSchemas,
    is_builtin_group,
    schema_file_name,
    select_version,
    shipped_versions,
)


def test_shipped_versions_cover_the_declared_one():
    assert (1, 34) in shipped_versions()
    assert shipped_versions() == tuple(sorted(shipped_versions()))


@pytest.mark.parametrize("declared, used, noted", [
    ("1.34.0", "1.34", False), ("1.34.7", "1.34", False), ("v1.30", "1.30", False),
    ("1.99.0", f"{shipped_versions()[-1][0]}.{shipped_versions()[-1][1]}", True),
    ("1.10.0", f"{shipped_versions()[0][0]}.{shipped_versions()[0][1]}", True),
])
def test_version_rule(declared, used, noted):
    choice = select_version(declared)
    assert choice.used_str == used
    assert (choice.note is not None) == noted


def test_bad_version():
    with pytest.raises(ValueError):
        select_version("latest")


def test_file_names_and_groups():
    assert schema_file_name("Role", "rbac.authorization.k8s.io/v1") == "role-rbac-v1.json"
    assert schema_file_name("Service", "v1") == "service-v1.json"
    assert is_builtin_group("v1") and is_builtin_group("apps/v1") and is_builtin_group("storage.k8s.io/v1")
    assert not is_builtin_group("ray.io/v1")


def test_standalone_schema_is_self_contained():
    import jsonschema

    builtins = BuiltinSchemas("1.34.0")
    schema = builtins.standalone_schema("Service", "v1")
    assert "$id" not in schema and "$schema" not in schema
    assert "io.k8s.api.core.v1.ServiceSpec" in schema["definitions"]
    text = str(schema)
    assert "/api/_definitions.json" not in text and "#/$defs/" not in text
    validator = jsonschema.Draft4Validator(schema)  # draft-4 keywords only: any kubeconform reads it alike
    assert not list(validator.iter_errors({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
                                           "spec": {"ports": [{"port": 80}]}}))
    assert list(validator.iter_errors({"apiVersion": "v1", "kind": "Service", "spec": {"typo": 1}}))


def test_kind_with_wrong_group_has_no_builtin_schema():
    builtins = BuiltinSchemas("1.34.0")
    assert builtins.validator("Service", "example.com/v1") is None
    assert builtins.validator("Deployment", "apps/v1beta1") is None
    assert builtins.validator("Deployment", "apps/v1") is not None
