"""Ray's failure wrappers turned into one clear error: which worker, what it raised, after how many restarts."""

from __future__ import annotations

from training.errors import TrainingFailed, TrainingJobError


def root_cause(exc: BaseException) -> BaseException:
    """The user-level exception inside Ray's wrappers (``cause`` of a task error, a worker group's failures, a
    controller or health-check failure)."""
    seen = set()
    while id(exc) not in seen:
        seen.add(id(exc))
        failures = getattr(exc, "worker_failures", None)
        if failures:
            exc = failures[sorted(failures)[0]]
            continue
        cause = getattr(exc, "cause", None)
        if isinstance(cause, BaseException):
            exc = cause
            continue
        inner = getattr(exc, "controller_failure", None) or getattr(exc, "health_check_failure", None)
        if isinstance(inner, BaseException):
            exc = inner
            continue
        break
    return exc


def process_died(exc: BaseException) -> bool:
    """Whether ``exc`` says a worker's process (its actor, its node or its raylet) is gone, rather than that the
    code in it raised: by Ray's own exception types, not by their names or messages."""
    from ray import exceptions

    return isinstance(exc, (exceptions.RayActorError, exceptions.WorkerCrashedError, exceptions.NodeDiedError,
                            exceptions.LocalRayletDiedError))


def first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0][:400]


def training_failure(exc: BaseException, max_failures: int) -> TrainingJobError:
    """One clear error out of a failed Ray Train run. A worker's own ``TrainingJobError`` (bad data, bad checkpoint)
    wins; otherwise a worker whose process died is named first (the others then fail in their collectives)."""
    failures = getattr(exc, "worker_failures", None) or {}
    roots = {rank: root_cause(err) for rank, err in sorted(failures.items())}
    for root in roots.values():
        if isinstance(root, TrainingJobError):
            return root
    if not roots:
        root = root_cause(exc)
        if isinstance(root, TrainingJobError):
            return root
        roots = {None: root}
    died = [r for r, e in roots.items() if process_died(e)]
    primary = died[0] if died else next(iter(roots))
    root = roots[primary]
    who = "the controller" if primary is None else f"worker rank {primary}"
    verb = "died" if died else "failed"
    msg = (f"training failed after {max_failures} allowed restart(s): {who} {verb}: "
           f"{type(root).__name__}: {first_line(root)}")
    others = [f"rank {r}: {type(e).__name__}: {first_line(e)[:160]}" for r, e in roots.items() if r != primary]
    if others:
        msg += " (then " + "; ".join(others) + ")"
    return TrainingFailed(msg, details=str(exc)[-4000:])


def fit(trainer, max_failures: int):
    """``trainer.fit()``, with a failed run raised as :func:`training_failure`."""
    import ray.train

    try:
        result = trainer.fit()
    except ray.train.TrainingFailedError as exc:
        raise training_failure(exc, max_failures) from None
    if getattr(result, "error", None):
        raise training_failure(result.error, max_failures)
    return result
