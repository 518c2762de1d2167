import pytest
import torch


@pytest.fixture
def float64():
    """float64 default dtype for exact identities (modules opt in with ``pytestmark``); restored afterwards."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)
