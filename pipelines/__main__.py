"""Workflows from the command line.

    python -m pipelines robustness RUN_DIR [options]     # how rarely a trained controller fails (AMLS)
    python -m pipelines.npmp ...                         # the NPMP pipeline (its own commands)
"""
from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    from pipelines import robustness

    parser = argparse.ArgumentParser(prog="python -m pipelines", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    robustness.add_arguments(commands.add_parser(
        "robustness", help="rare-event estimate of a trained controller's failure probability",
        description=robustness.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter))
    args = parser.parse_args(argv)
    return robustness.main(args)


if __name__ == "__main__":
    sys.exit(main())
