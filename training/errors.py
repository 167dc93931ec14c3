"""Errors that end a run with a clear message and an ``error`` result JSON."""

from __future__ import annotations


class TrainingJobError(Exception):
    """A failure we can explain to the user. ``kind`` ends up in ``error.type`` of the result."""

    kind = "internal"

    def __init__(self, message: str, *, field: str | None = None, details: str | None = None):
        super().__init__(message)
        self.message = message
        self.field = field
        self.details = details

    def to_dict(self) -> dict:
        out = {"type": self.kind, "message": self.message}
        if self.field:
            out["field"] = self.field
        if self.details:
            out["details"] = self.details
        return out


class SpecError(TrainingJobError):
    """The job spec is malformed (schema or semantic check); raised before Ray starts."""

    kind = "spec"


class ResourceError(TrainingJobError):
    """The request cannot be placed on the connected cluster."""

    kind = "resources"


class ClusterConnectError(TrainingJobError):
    """``RAY_ADDRESS`` names a cluster this process cannot join."""

    kind = "cluster"


class DataError(TrainingJobError):
    """The data source is missing, unreadable or malformed."""

    kind = "data"


class CheckpointError(TrainingJobError):
    """A checkpoint to resume from is missing or corrupt."""

    kind = "checkpoint"


class TrainerLoadError(TrainingJobError):
    """``trainConfig.trainerPath`` cannot be imported or is not a function."""

    kind = "trainer"


class TrainingFailed(TrainingJobError):
    """Training started but failed after the allowed retries."""

    kind = "training"
