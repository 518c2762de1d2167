"""Rank primitives on the same `humanoid` episodes with an interval, not one count (issue 13; docs/npmp.md, "Ranking
students on paired noisy episodes").

Reads the episodes ``benchmarks/npmp_clips_humanoid.py`` measured (its results files; one controller and variant,
``--key``, e.g. ``"nearest, blend 7, lead 63, noise 0.02"``) for two or more primitives, keeps the seeds every one of
them played, and reports per primitives: episodes, targets reached (in all and per episode, with a 95 % bootstrap
interval over episodes), the median steps upright (with its interval) and falls; then, paired on the seeds against
the first primitives named, the mean difference per episode in targets and in steps with their 95 % intervals, and
whether the interval leaves zero out ("better" / "worse") or not ("not separated").

Why paired and why noisy: noise-free, the episodes that choose alike are one walk, so a small change of the weights
moves many episodes at once and one count on 200 episodes does not rank students (docs/npmp.md, "The recipe again
from the kept teachers"); under ``--action-noise`` each episode is its own walk and the seeds give both students
the same targets, start and noise stream, so the episodes' own difficulty cancels in the differences.

    python benchmarks/npmp_rank.py --results R.json --key "nearest, blend 7, lead 63, noise 0.02" \\
        --primitives data/primitives/npmp-clips runs/s7/student
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.runs import fail, write_json  # noqa: E402

RESAMPLES = 10_000


def interval(values: np.ndarray, statistic, seed: int) -> list[float]:
    """The 95 % percentile bootstrap interval of ``statistic`` over ``values`` (resampled along axis 0). Every
    interval draws the same resamples from ``seed``, so a primitives' numbers do not depend on which others are
    ranked beside it."""
    picks = np.random.default_rng(seed).integers(len(values), size=(RESAMPLES, len(values)))
    draws = np.array([statistic(values[p]) for p in picks])
    return [round(float(np.percentile(draws, 2.5)), 3), round(float(np.percentile(draws, 97.5)), 3)]


def verdict(low: float, high: float) -> str:
    return "better" if low > 0 else "worse" if high < 0 else "not separated"


def rank(episodes: dict[str, dict[str, dict]], seed: int = 0) -> dict:
    """``episodes``: primitives -> seed -> an episode row (targets_reached, steps, fell), the first primitives the
    reference. Only the seeds all of them played are used."""
    names = list(episodes)
    seeds = sorted(set.intersection(*(set(rows) for rows in episodes.values())), key=int)
    if not seeds:
        raise ValueError("the primitives share no episode (no seed all of them played)")
    table = {name: np.array([[episodes[name][s]["targets_reached"], episodes[name][s]["steps"],
                              episodes[name][s]["fell"]] for s in seeds], dtype=float) for name in names}
    out = {"episodes": len(seeds), "seeds": f"{seeds[0]}-{seeds[-1]}" if len(seeds) > 1 else seeds[0],
           "reference": names[0], "primitives": {}}
    for name in names:
        t = table[name]
        row = {"targets": int(t[:, 0].sum()), "targets_per_episode": round(float(t[:, 0].mean()), 3),
               "targets_per_episode_95": interval(t[:, 0], np.mean, seed),
               "median_steps": float(np.median(t[:, 1])), "median_steps_95": interval(t[:, 1], np.median, seed),
               "falls": int(t[:, 2].sum())}
        if name != names[0]:
            d = t[:, :2] - table[names[0]][:, :2]
            for column, label in ((0, "targets"), (1, "steps")):
                low, high = interval(d[:, column], np.mean, seed)
                row[f"{label}_minus_reference"] = round(float(d[:, column].mean()), 3)
                row[f"{label}_minus_reference_95"] = [low, high]
                row[f"{label}_verdict"] = verdict(low, high)
        out["primitives"][name] = row
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--results", type=Path, nargs="+", required=True,
                   help="results files of benchmarks/npmp_clips_humanoid.py (a primitives' rows from the first "
                        "file holding them)")
    p.add_argument("--key", required=True, help="the controller and variant, as the results files name it")
    p.add_argument("--primitives", nargs="+", required=True, help="two or more; the first is the reference")
    p.add_argument("--out", type=Path, help="also write the ranking here (JSON)")
    args = p.parse_args(argv)
    if len(args.primitives) < 2:
        fail("need two or more --primitives: the first is the reference the others are paired against")
    held: dict[str, dict] = {}
    for path in args.results:
        try:
            results = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            fail(f"{path}: not a results file ({str(e).splitlines()[0]})")
        if not isinstance(results, dict):
            fail(f"{path}: not a results file (no 'primitives' table)")
        for name, keys in results.get("primitives", {}).items():
            if args.key in keys and name not in held:
                held[name] = keys[args.key]
    missing = [name for name in args.primitives if name not in held]
    if missing:
        fail(f"no episodes under key {args.key!r} for {', '.join(missing)} in {', '.join(map(str, args.results))}")
    try:
        ranking = rank({name: held[name] for name in args.primitives})
    except ValueError as e:
        fail(str(e))
    ranking["key"] = args.key
    for name, row in ranking["primitives"].items():
        line = (f"{name}: {row['targets']} targets in {ranking['episodes']} episodes "
                f"({row['targets_per_episode']} per episode, 95 % {row['targets_per_episode_95']}), median "
                f"{row['median_steps']} steps upright (95 % {row['median_steps_95']}), {row['falls']} falls")
        if "targets_verdict" in row:
            line += (f"; against {ranking['reference']}: targets {row['targets_minus_reference']:+} per episode "
                     f"{row['targets_minus_reference_95']} ({row['targets_verdict']}), steps "
                     f"{row['steps_minus_reference']:+} {row['steps_minus_reference_95']} ({row['steps_verdict']})")
        print(line, flush=True)
    if args.out:
        write_json(args.out, ranking)
    return 0


if __name__ == "__main__":
    sys.exit(main())
