"""``benchmarks/experts.py`` with dm_control's arena option ``noslip_iterations`` set to ``--noslip N`` (its composer
arena sets 5 for every walker; issue 13, docs/npmp.md "Turning by the steps"): does the planner's failure on a turn
come from that sequential, not mirror-symmetric, projection over the contacts (``benchmarks/mirror_symmetry.py``)?
Every other argument is experts.py's; use a separate ``--results`` file, the option is not part of its table's key.

    python benchmarks/experts_noslip.py --noslip 0 --mocap runs/npmp/stepped/step.h5 --workers 1 \\
        --results runs/npmp/stepped/plan_noslip0.json --snippets 07_01-0-loop10-stepleft45
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dm_control import composer  # noqa: E402

from benchmarks import experts  # noqa: E402

NOSLIP_VARIABLE = "PROBCTL_NOSLIP_ITERATIONS"   # read again by the spawned workers, which import this module
_build = composer.Arena._build


def _build_with_noslip(self, *args, **kwargs):
    _build(self, *args, **kwargs)
    self.mjcf_model.option.noslip_iterations = int(os.environ[NOSLIP_VARIABLE])


if NOSLIP_VARIABLE in os.environ:
    composer.Arena._build = _build_with_noslip

if __name__ == "__main__":
    argv = sys.argv[1:]
    at = argv.index("--noslip") if "--noslip" in argv else len(argv)
    if at + 1 >= len(argv) or not argv[at + 1].isdigit():
        print("error: need --noslip N (an integer >= 0), then benchmarks/experts.py's arguments", file=sys.stderr)
        raise SystemExit(2)
    os.environ[NOSLIP_VARIABLE] = argv[at + 1]
    composer.Arena._build = _build_with_noslip
    raise SystemExit(experts.main(argv[:at] + argv[at + 2:]))
