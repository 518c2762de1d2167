import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("MUJOCO_GL", "egl")


def pytest_configure(config):
    """Importing arviz writes a once-a-day stamp by renaming a fixed temporary file; two xdist workers importing it
    at once on a machine without today's stamp race on that file and one fails to collect (seen on a fresh machine,
    2026-12-02). The controller, which configures before the workers start, imports it first and writes the stamp."""
    if not hasattr(config, "workerinput"):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            try:
                import arviz  # noqa: F401
            except ImportError:   # the dev extras are not installed: the tests that need arviz say so themselves
                pass


def run_cli(*args, timeout=300, **kwargs):
    """Run ``python train.py ARGS`` from the repository root; returns the CompletedProcess."""
    return subprocess.run([sys.executable, str(ROOT / "train.py"), *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, **kwargs)


@pytest.fixture(autouse=True)
def _one_thread_seeded():
    """Small networks: extra intra-op threads only add contention on a shared CPU. Every test starts from the same
    torch seed. Both restored afterwards."""
    import torch

    threads, state = torch.get_num_threads(), torch.get_rng_state()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    yield
    torch.set_num_threads(threads)
    torch.set_rng_state(state)


@pytest.fixture
def cli():
    return run_cli
