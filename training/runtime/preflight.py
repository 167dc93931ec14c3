"""Checks of the node a worker runs on that would otherwise fail late and obscurely.

EFA: libfabric registers (pins) the buffers NCCL sends from. A non-root process may lock at most RLIMIT_MEMLOCK
bytes; no capability helps a non-root process (IPC_LOCK is not in its effective set). The node's container
runtime sets the limit (containerd LimitMEMLOCK=infinity on the EKS accelerated AMI). When it is too small,
memory registration fails and NCCL falls back to TCP sockets or the collective fails: say so at start, with the
fix, instead.
"""
from __future__ import annotations

import os
import resource

# libfabric's EFA provider pins buffers of hundreds of MiB per process; below this, registration fails
MEMLOCK_NEEDED = 1 << 30


def efa_memlock_problem(environ=None, limits=None) -> str | None:
    """A message when FI_PROVIDER=efa and the locked-memory limit is too small, else None."""
    environ = os.environ if environ is None else environ
    if environ.get("FI_PROVIDER") != "efa":
        return None
    soft, hard = limits if limits is not None else resource.getrlimit(resource.RLIMIT_MEMLOCK)
    if soft == resource.RLIM_INFINITY or soft >= MEMLOCK_NEEDED:
        return None
    shown = "unlimited" if hard == resource.RLIM_INFINITY else f"{hard} bytes"
    return (f"efa: the locked-memory limit (ulimit -l) is {soft} bytes (hard: {shown}); EFA needs it unlimited to "
            f"register NCCL's buffers, or NCCL falls back to TCP sockets. The node's container runtime sets it: "
            f"containerd with LimitMEMLOCK=infinity (the EKS accelerated AMI does). A capability cannot raise it "
            f"for this non-root process.")
