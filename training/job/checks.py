"""What the schema cannot say well: checks across fields of a spec that the schema has passed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from training.errors import SpecError
from training.frameworks import registry


def semantic_checks(spec: Mapping[str, Any]) -> None:
    """What the schema cannot say well."""
    cfg = spec.get("config", {})
    tc = spec.get("trainConfig", {})
    sc = tc.get("scalingConfig", {})
    use_gpu = sc.get("useGpu", cfg.get("useGpu", False))
    gpu = sc.get("resourcesPerWorker", {}).get("gpu", cfg.get("resourcesPerWorker", {}).get("gpu"))
    if use_gpu and gpu == 0:
        where = "trainConfig.scalingConfig" if "useGpu" in sc else "config"
        raise SpecError(f"{where}.resourcesPerWorker.gpu is 0 but {where}.useGpu is true", field=f"{where}.resourcesPerWorker.gpu")
    data = spec.get("data", {})
    if data.get("path") and data.get("source", "digits") != "cifar10":
        raise SpecError("data.path is only read for data.source: cifar10", field="data.path")
    workers = sc.get("numWorkers", cfg.get("numWorkers"))
    if isinstance(workers, dict):
        where = "trainConfig.scalingConfig.numWorkers" if "numWorkers" in sc else "config.numWorkers"
        if workers["min"] > workers["max"]:
            raise SpecError(f"{where}: min {workers['min']} is above max {workers['max']}", field=where)
        if spec.get("mode") != "train":
            raise SpecError(f"{where}: an elastic {{min, max}} is for mode train (a Tune trial's workers are fixed)",
                            field=where)
    framework = registry.get(tc.get("framework") or registry.DEFAULT)
    if tc.get("collectiveTimeoutSeconds") and not framework.collective_timeout:
        raise SpecError("trainConfig.collectiveTimeoutSeconds is the PyTorch process group's timeout: framework "
                        f"{tc.get('framework')!r} has none", field="trainConfig.collectiveTimeoutSeconds")
    ck = spec.get("checkpoint", {})
    if ck.get("keepBest") and ck.get("metric") == "":
        raise SpecError("checkpoint.metric must name a metric", field="checkpoint.metric")
    if spec.get("mode") == "tune":
        from training.job.search import semantic_checks as search_checks

        search_checks(spec)
