"""openAPIV3Schema -> strict JSON Schema, as kubeconform's openapi2jsonschema does for -strict."""

from __future__ import annotations

import jsonschema

from validation.crd_schemas import CrdSchemaStore, kubeconform_filename, openapi_to_strict_jsonschema


def _errors(schema, doc):
    return [e.message for e in jsonschema.Draft4Validator(openapi_to_strict_jsonschema(schema)).iter_errors(doc)]


BASE = {"type": "object", "properties": {"spec": {"type": "object", "properties": {
    "replicas": {"type": "integer"},
    "port": {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True},
    "legacyPort": {"type": "string", "format": "int-or-string"},
    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
             "properties": {"known": {"type": "string"}}},
    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
    "template": {"type": "object", "x-kubernetes-embedded-resource": True,
                 "properties": {"spec": {"type": "object", "properties": {"x": {"type": "string"}}}}},
    "when": {"type": "string", "nullable": True},
    "choice": {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
               "oneOf": [{"required": ["a"]}, {"required": ["b"], "properties": {"b": {"minLength": 1}}}]},
}}}}


def test_objects_with_properties_reject_unknown_fields():
    assert _errors(BASE, {"spec": {"replicas": 1, "typo": 1}})
    assert _errors(BASE, {"spec": {"template": {"spec": {"y": "1"}}}})


def test_top_level_allows_only_apiversion_kind_metadata_and_declared():
    ok = {"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "a"}, "spec": {}}
    assert not _errors(BASE, ok)
    assert _errors(BASE, {**ok, "extra": 1})


def test_int_or_string():
    assert not _errors(BASE, {"spec": {"port": 80}})
    assert not _errors(BASE, {"spec": {"port": "http"}})
    assert _errors(BASE, {"spec": {"port": [80]}})
    assert not _errors(BASE, {"spec": {"legacyPort": 80}})


def test_preserve_unknown_fields_and_maps():
    assert not _errors(BASE, {"spec": {"free": {"anything": {"goes": 1}, "known": "k"}}})
    assert _errors(BASE, {"spec": {"free": {"known": 1}}})  # declared fields are still typed
    assert not _errors(BASE, {"spec": {"labels": {"a": "b"}}})
    assert _errors(BASE, {"spec": {"labels": {"a": 1}}})


def test_embedded_resource_allows_apiversion_kind_metadata():
    embedded = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"x": "y"}}
    assert not _errors(BASE, {"spec": {"template": embedded}})


def test_nullable():
    assert not _errors(BASE, {"spec": {"when": None}})
    assert _errors(BASE, {"spec": {"replicas": None}})


def test_combinator_branches_are_not_made_strict():
    assert not _errors(BASE, {"spec": {"choice": {"b": "x"}}})
    assert _errors(BASE, {"spec": {"choice": {"c": "x"}}})


def test_input_is_not_modified():
    import copy

    before = copy.deepcopy(BASE)
    openapi_to_strict_jsonschema(BASE)
    assert BASE == before


def test_kubeconform_filenames():
    assert kubeconform_filename("RayCluster", "ray.io/v1") == "raycluster-ray-v1.json"
    assert kubeconform_filename("PyTorchJob", "kubeflow.org/v1") == "pytorchjob-kubeflow-v1.json"
    assert kubeconform_filename("ApplicationSet", "argoproj.io/v1alpha1") == "applicationset-argoproj-v1alpha1.json"
    assert kubeconform_filename("Service", "v1") == "service-v1.json"
    assert kubeconform_filename("StorageClass", "storage.k8s.io/v1") == "storageclass-storage-v1.json"


def test_store_finds_every_pinned_kind(crds):
    store = CrdSchemaStore(crds)
    assert store.has_crds
    for api_version, kind in [("ray.io/v1", "RayCluster"), ("ray.io/v1", "RayJob"), ("ray.io/v1", "RayService"),
                              ("ray.io/v1alpha1", "RayCluster"), ("kubeflow.org/v1", "PyTorchJob"),
                              ("argoproj.io/v1alpha1", "Application"), ("argoproj.io/v1alpha1", "ApplicationSet"),
                              ("argoproj.io/v1alpha1", "AppProject")]:
        crd = store.lookup(api_version, kind)
        assert crd is not None, (api_version, kind)
        assert crd.schema["additionalProperties"] is False
    assert store.lookup("ray.io/v2", "RayCluster") is None
    assert store.lookup("v1", "Service") is None


def test_no_jsonschema_keyword_in_converted_crds_is_invalid(crds):
    store = CrdSchemaStore(crds)
    for kind, api in [("RayJob", "ray.io/v1"), ("ApplicationSet", "argoproj.io/v1alpha1")]:
        jsonschema.Draft4Validator.check_schema(store.lookup(api, kind).schema)
