import os

import pytest
import torch

# Smoke by default: the same code paths, smaller. PODRACER_SIZE=full runs the long versions.
SIZE = os.environ.get("PODRACER_SIZE", "smoke")


@pytest.fixture(autouse=True)
def _fixed_threads():
    """Learning tests are deterministic on CPU for a fixed thread count; pin it to one. Small
    networks gain nothing from a second thread, and on a busy 2-core machine torch's threads
    stall each other (updates measured 10-50x slower)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


# The test files that start or join a Ray in the pytest process itself (the others only start
# Rays in subprocesses, which keep Ray's default: token auth for a local Ray).
IN_PROCESS_RAY = {"test_ray_backend.py", "test_storage.py", "test_cluster_faults.py"}


@pytest.fixture(autouse=True, scope="module")
def _ray_without_token_auth(request):
    """The Rays these files start in their own process (IN_PROCESS_RAY) run without token auth,
    unless the environment says otherwise; their subprocess drivers inherit the setting. Module
    scope, autouse: set before the files' own module fixtures start a Ray (``local_ray``).

    Ray 2.60's local ``ray.init`` switches the whole process to token auth (it sets RAY_AUTH_MODE=token
    in os.environ and keeps that mode after ``ray.shutdown``); that process can then still join a
    cluster started with auth disabled, but every actor it creates there is cancelled before it
    starts ("all references to the actor were removed"). The tests that join loopback clusters
    without auth would then pass or fail by which test this worker ran before (probing found it:
    tests/test_storage.py's local Ray, then the spot cluster of tests/test_cluster_faults.py).
    Clusters with token auth get their mode and token explicitly (LoopbackCluster(token=True))."""
    with pytest.MonkeyPatch.context() as mp:
        if request.path.name in IN_PROCESS_RAY and "RAY_AUTH_MODE" not in os.environ:
            mp.setenv("RAY_AUTH_MODE", "disabled")
        yield
