"""Shared fixtures for the training package tests.

One local Ray (2 CPUs, with the dashboard that Ray Train's placement-group cleaner needs) serves the whole session;
``training.runner.run`` sees it initialized and reuses it. Specs are written to ``tmp_path`` with their storage
there too, so nothing lands in the repository.
"""

from __future__ import annotations

import pytest

from tests.training.support import SpecRunner, digits_spec
from training.runtime.env import apply_quiet_defaults

apply_quiet_defaults()


def pytest_collection_finish(session):
    """A test process that runs Ray tests hosts the drivers of every framework. The CUDA build of torch loads Triton
    (LLVM) the first time an optimizer is built (torch._compile -> torch._dynamo -> triton); loading it after
    TensorFlow is in the process segfaults (measured: `import ray.train.tensorflow; torch.optim.Adam(...)` -> SIGSEGV
    in triton._C.libtriton, the reverse order works). So such a process loads it first, before any test runs. A job's
    own process imports one framework, and the fast lane imports no TensorFlow: neither pays the ~2 s import."""
    if any(item.get_closest_marker("ray") for item in session.items):
        import torch._dynamo  # noqa: F401


def pytest_configure(config):
    # Ray Data's context warns about its own deprecated defaults when Ray Train imports it: not ours to fix.
    config.addinivalue_line("filterwarnings", "ignore::DeprecationWarning:ray.data.context")


@pytest.fixture(scope="session")
def ray_session():
    """The one Ray of the test session."""
    import ray

    from training.runtime.cluster import RaySession

    with RaySession(address="") as session:  # "" -> a local Ray even if RAY_ADDRESS is set in the shell
        assert ray.is_initialized()
        yield session


@pytest.fixture
def runner(tmp_path) -> SpecRunner:
    return SpecRunner(tmp_path)


@pytest.fixture(scope="session")
def torch_run(ray_session, tmp_path_factory):
    """One finished 2-worker PyTorch run on the digits (2 epochs), shared by the tests that inspect or resume it.
    Tests that resume or damage it work on a copy (``copy_run``)."""
    r = SpecRunner(tmp_path_factory.mktemp("torch-run"))
    spec = digits_spec("digits-torch", "pytorch", epochs=2)
    code, result = r.run(spec, name="torch.yaml")
    return r, spec, code, result


@pytest.fixture(scope="session")
def ray_address(ray_session) -> str:
    """The session Ray's address, for subprocesses that must join it instead of starting a second Ray."""
    import ray

    return ray.get_runtime_context().gcs_address




@pytest.fixture(scope="session")
def s3_store(tmp_path_factory):
    """The Versity S3 Gateway built from its Go module by the e2e (`python -m e2e build versitygw`), started on
    127.0.0.1 when it is built; None when it is not."""
    from tests.training.support import S3Server, versitygw_binary

    binary = versitygw_binary()
    if binary is None:
        yield None
        return
    server = S3Server(binary, tmp_path_factory.mktemp("s3")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def s3_server(s3_store):
    """The S3 server; the tests that use it are skipped when it is not built, and only then."""
    if s3_store is None:
        pytest.skip("the S3 server is not built: `.venv/bin/python -m e2e build versitygw` (e2e/components/versitygw)")
    return s3_store


@pytest.fixture(scope="module")
def two_node_ray(tmp_path_factory, s3_store):
    """A Ray cluster of two nodes on this machine, the second with a private folder (``cluster.private_dir``) that
    the head does not see: two pods with their own filesystems (tests/training/support.py TwoNodeRay). Like the
    charts' Ray pods, every node has the object store's endpoint and credentials in its environment (when the store
    is built). Per module, not per session: while it runs, a Ray started without an address (the session's, in the
    tests that follow) finds two Ray instances on this machine, and Ray Train's placement-group cleaner, which asks
    the state API without an address, fails ("Found multiple active Ray instances"): Tune trials then wait forever
    for the placement groups of stopped trials."""
    from tests.training.support import TwoNodeRay

    root = tmp_path_factory.mktemp("two-node-ray")
    cluster = TwoNodeRay(root, root / "private", env=s3_store.client_env if s3_store else None)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
