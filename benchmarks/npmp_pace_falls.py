"""Do the students fall where their teachers lost the pace? (issue 13; docs/npmp.md, "Teachers that lose the pace").

Reads the teachers' pace (``benchmarks/npmp_heading.py --plans`` results: each chain's planned run's ground speed
over its reference's, over the run and over its last frames) and rankings with ``--by-sequence``
(``benchmarks/npmp_rank.py``: per primitives and chain walked, the episodes and how many fell before the chain's
end), and prints, per primitives, Spearman's rank correlation between a chain's speed ratio and the share of its
episodes that fall before its end, over the chains walked by at least ``--min-episodes`` episodes.

    python benchmarks/npmp_pace_falls.py --pace benchmarks/results/npmp_teacher_pace.json \\
        --rankings benchmarks/results/npmp_rank_sixteen.json benchmarks/results/npmp_rank_sixteen_60k.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.runs import fail  # noqa: E402


def ranks(values: np.ndarray) -> np.ndarray:
    """Ranks from 1, ties given their mean rank."""
    order = np.argsort(values, kind="stable")
    ranked = np.empty(len(values))
    ranked[order] = np.arange(1, len(values) + 1)
    for value in np.unique(values):
        tied = values == value
        ranked[tied] = ranked[tied].mean()
    return ranked


def spearman(x, y) -> float:
    """Spearman's rank correlation of two equally long sequences (nan where either is constant)."""
    rx, ry = ranks(np.asarray(x, float)), ranks(np.asarray(y, float))
    if rx.std() == 0 or ry.std() == 0:
        return float("nan")
    return float(np.corrcoef(rx, ry)[0, 1])


def teacher_pace(path: Path) -> dict[str, dict]:
    """chain -> its planned run's pace (the first plan row of each snippet in an npmp_heading results file)."""
    rows = json.loads(path.read_text())["snippets"]
    return {chain: next(v for k, v in row.items() if k.startswith("plan:") and "speed_ratio" in v)
            for chain, row in rows.items() if any(k.startswith("plan:") and "speed_ratio" in v
                                                  for k, v in row.items())}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pace", type=Path, required=True, help="npmp_heading.py --plans results")
    p.add_argument("--rankings", type=Path, nargs="+", required=True, help="npmp_rank.py --by-sequence results")
    p.add_argument("--min-episodes", type=int, default=10)
    args = p.parse_args(argv)
    try:
        pace = teacher_pace(args.pace)
    except (OSError, ValueError, KeyError) as e:
        fail(f"--pace {args.pace}: {e}")
    if not pace:
        fail(f"--pace {args.pace} holds no planned run's pace (npmp_heading.py --plans)")
    for path in args.rankings:
        try:
            primitives = json.loads(path.read_text())["primitives"]
        except (OSError, ValueError, KeyError) as e:
            fail(f"--rankings {path}: {e}")
        for name, row in primitives.items():
            chains = row.get("by_sequence", {}).get("chains", {})
            walked = [(c, v) for c, v in chains.items() if c in pace and v["episodes"] >= args.min_episodes]
            if len(walked) < 4:
                continue
            falls = [v["falls_within"] / v["episodes"] for _, v in walked]
            whole = spearman([pace[c]["speed_ratio"] for c, _ in walked], falls)
            tail = spearman([pace[c]["speed_ratio_last_60"] for c, _ in walked], falls)
            print(f"{path.name} {name}: {len(walked)} chains, Spearman rho of the teacher's speed ratio with the "
                  f"share falling before the end: {whole:+.2f} (whole run), {tail:+.2f} (last 60 frames)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
