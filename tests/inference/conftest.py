import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    """Small tensors: extra intra-op threads only add contention on a shared CPU; restored afterwards."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture
def float64():
    """float64 default dtype for exact identities (modules opt in with ``pytestmark``); restored afterwards."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)
