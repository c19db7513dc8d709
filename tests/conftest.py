import os

import pytest
import torch

# Smoke by default: the same code paths, smaller. PODRACER_SIZE=full runs the long versions.
SIZE = os.environ.get("PODRACER_SIZE", "smoke")


@pytest.fixture(autouse=True)
def _fixed_threads():
    """Learning tests are deterministic on CPU for a fixed thread count; pin it."""
    n = torch.get_num_threads()
    torch.set_num_threads(min(2, n))
    yield
    torch.set_num_threads(n)
