"""The ONE reviewed list of kinds that may be applied without schema validation.

A resource whose kind has no schema (neither a built-in kind of the environment's Kubernetes version nor a CRD under
the schema location) is "skipped", and a skipped resource FAILS validation unless its ``apiVersion/Kind`` is listed
here, with the reason it is acceptable. Changing this list needs review like any other policy change.
"""

from __future__ import annotations

# "<apiVersion>/<Kind>" (e.g. "monitoring.coreos.com/v1/ServiceMonitor") -> why skipping its validation is acceptable.
#
# Empty on purpose: every kind rendered under apps/ today has a schema -- built-in kinds (Namespace, Service,
# ConfigMap, PersistentVolumeClaim, StorageClass, ResourceQuota, ...) come from kubernetes-validate, and RayCluster,
# RayJob, RayService, RayCronJob, PyTorchJob, Application, ApplicationSet and AppProject from their pinned CRDs.
ALLOWED_TO_SKIP: dict[str, str] = {}


def skip_key(api_version: str, kind: str) -> str:
    return f"{api_version}/{kind}"
