"""The EFA locked-memory check a worker runs at start."""
import resource

from training.runtime import preflight

INF = resource.RLIM_INFINITY


def test_no_efa_no_check():
    assert preflight.efa_memlock_problem({}, (65536, 65536)) is None


def test_unlimited_or_large_memlock_passes():
    assert preflight.efa_memlock_problem({"FI_PROVIDER": "efa"}, (INF, INF)) is None
    assert preflight.efa_memlock_problem({"FI_PROVIDER": "efa"}, (preflight.MEMLOCK_NEEDED, INF)) is None


def test_default_docker_memlock_is_reported_with_the_fix():
    message = preflight.efa_memlock_problem({"FI_PROVIDER": "efa"}, (8 << 20, 8 << 20))
    assert "8388608 bytes" in message and "LimitMEMLOCK=infinity" in message
    assert "capability cannot raise it" in message
