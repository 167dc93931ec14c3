"""Constants shared by the validation tests (imported by name; conftest.py only holds fixtures)."""

from __future__ import annotations

import os
from pathlib import Path

from validation.module_crds import SOURCES

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
KUBE_VERSION = "1.34.0"
INVALID_DIR = FIXTURES / "schema" / "invalid"
GOOD = FIXTURES / "apps" / "good"
# Kueue's kinds, validated against the pinned module's CRDs (../shared/crds has none): fixtures/kueue/good is the eks
# render's platform folder, fixtures/kueue/invalid one error each
KUEUE_FIXTURES = FIXTURES / "kueue"
[KUEUE] = [source for source in SOURCES if source.group == "kueue.x-k8s.io"]
KUEUE_INVALID_CASES = [
    ("clusterqueue-nominalquota-array.yaml", "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota",
     "expected integer or string, got array"),
    ("clusterqueue-unknown-field.yaml", "spec.queueingStrategie", "unknown field"),
    ("resourceflavor-missing-required.yaml", "spec.nodeTaints[0].key", "required field is missing"),
    ("localqueue-wrong-type.yaml", "spec.clusterQueue", "expected string, got integer"),
]

INVALID_CASES = [
    # RayCluster / RayJob / PyTorchJob / Application against ../shared/crds
    ("raycluster-wrong-type.yaml", "spec.workerGroupSpecs[0].replicas", 'expected integer, got string "two"'),
    ("raycluster-unknown-field.yaml", "spec.headGroupSpec.serviceTyp", "unknown field"),
    ("raycluster-missing-required.yaml", "spec.workerGroupSpecs[0].groupName", "required field is missing"),
    ("raycluster-unknown-top-level.yaml", "specs", "unknown field"),
    ("raycluster-label-not-string.yaml", "metadata.labels.version", "expected string"),
    ("rayjob-wrong-type.yaml", "spec.shutdownAfterJobFinishes", 'expected boolean, got string "yes"'),
    ("rayjob-unknown-field.yaml",
     "spec.rayClusterSpec.headGroupSpec.template.spec.containers[0].imagePullPolcy", "unknown field"),
    ("rayjob-missing-required.yaml", "spec.rayClusterSpec.headGroupSpec.template", "required field is missing"),
    ("rayjob-int-or-string.yaml",
     "spec.rayClusterSpec.headGroupSpec.template.spec.containers[0].resources.limits.cpu",
     "expected integer or string, got array"),
    ("pytorchjob-unknown-field.yaml", "spec.pytorchReplicaSpecs.Worker.replica", "unknown field"),
    ("application-missing-required.yaml", "spec.destination", "required field is missing"),
    # built-in kinds against kubernetes-validate's strict schemas
    ("service-wrong-type.yaml", "spec.ports[0].port", 'expected integer, got string "http"'),
    ("service-unknown-field.yaml", "spec.selectr", "unknown field"),
    ("persistentvolumeclaim-missing-required.yaml", "spec.dataSourceRef.kind", "required field is missing"),
    # files that break the layout
    ("configmap-duplicate-key.yaml", "(file)", "duplicate key 'MODEL'"),
    ("configmap-two-documents.yaml", "(file)", "holds 2 YAML documents"),
]


def crd_location() -> Path:
    """$RAY_GITOPS_SCHEMA_LOCATION, or <repo>/../shared/crds (read in place, never copied)."""
    return Path(os.environ.get("RAY_GITOPS_SCHEMA_LOCATION") or REPO_ROOT.parent / "shared" / "crds")
