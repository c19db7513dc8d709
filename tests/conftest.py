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
