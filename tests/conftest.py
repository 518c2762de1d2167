import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("MUJOCO_GL", "egl")


def run_cli(*args, timeout=300, **kwargs):
    """Run ``python train.py ARGS`` from the repository root; returns the CompletedProcess."""
    return subprocess.run([sys.executable, str(ROOT / "train.py"), *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, **kwargs)


@pytest.fixture
def cli():
    return run_cli
