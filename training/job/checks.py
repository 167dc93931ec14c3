"""What the schema cannot say well, checked on the typed job after :func:`training.job.defaults.normalize` (so a
default is read where it is written, once). Each message names the field the user wrote, in the block they wrote it
in (``Workers.written_in``)."""

from __future__ import annotations

from training.errors import SpecError
from training.frameworks import registry
from training.job.parts import Job
from training.job.search import check_search


def check(job: Job) -> None:
    """Raise ``SpecError`` naming the first field of ``job`` that cannot work with the others."""
    workers, training = job.workers, job.training
    if workers.use_gpu and workers.gpu == 0:
        where = workers.written_in.get("useGpu", "config")
        raise SpecError(f"{where}.resourcesPerWorker.gpu is 0 but {where}.useGpu is true",
                        field=f"{where}.resourcesPerWorker.gpu")
    if job.data.path and job.data.source != "cifar10":
        raise SpecError("data.path is only read for data.source: cifar10", field="data.path")
    if workers.min_count is not None:
        where = f"{workers.written_in.get('numWorkers', 'config')}.numWorkers"
        if workers.min_count > workers.count:
            raise SpecError(f"{where}: min {workers.min_count} is above max {workers.count}", field=where)
        if job.mode != "train":
            raise SpecError(f"{where}: an elastic {{min, max}} is for mode train (a Tune trial's workers are fixed)",
                            field=where)
    if training.collective_timeout_s and not registry.get(training.framework).collective_timeout:
        raise SpecError("trainConfig.collectiveTimeoutSeconds is the PyTorch process group's timeout: framework "
                        f"{training.framework!r} has none", field="trainConfig.collectiveTimeoutSeconds")
    if job.checkpoint.keep_best and job.checkpoint.metric == "":
        raise SpecError("checkpoint.metric must name a metric", field="checkpoint.metric")
    if job.mode == "tune":
        check_search(job)
