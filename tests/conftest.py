"""Suite-wide set-up and shared fixtures. Under pytest-xdist (``make test`` runs one worker per core, up to 4),
each worker gets its share of the cores for torch's intra-op threads: without it every worker
would start one thread per core and the workers would fight over them."""

import os

import pytest

if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    import torch

    workers = int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray of 2 CPUs for one test module (skipped without Ray), shut down after it."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()
