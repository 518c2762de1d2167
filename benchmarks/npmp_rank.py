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

``--by-sequence CHAINS.h5`` (a chains file of ``python -m pipelines.npmp chain``, e.g.
data/mocap/cmu_turn_chains.h5) also splits each primitives' episodes by the chain whose clips their first segments
follow, and by whether the primitives were taught that chain (its name among the clips in their meta.json): where
they fall depends on whether they were shown the sequence of clips the high level chose (docs/npmp.md, "Three
more DAgger rounds from the shipped set").

``--by-segment`` also counts, per primitives, the episodes that entered each segment of their chain (the n-th
choice; ``LAST_SEGMENT`` and after pooled) and those that fell in it, apart for a segment that goes on with the clip
before it (``same``: the same turn again) and one that changes clip (``switch``): is the hazard the segment's place
in the episode or the change of direction (docs/npmp.md, "A committee of students, and what they let drift")?
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


def read_chains(path: Path) -> dict[str, tuple[str, ...]]:
    """Chain name -> its segments' clips, from a chains file's ``chain_segments`` ("NAME CLIP@FIRST+FRAMES ...")."""
    import h5py
    try:
        with h5py.File(path, "r") as f:
            lines = [str(line.decode() if isinstance(line, bytes) else line) for line in f.attrs["chain_segments"]]
    except (OSError, KeyError) as e:
        raise ValueError(f"{path}: not a chains file ({str(e).splitlines()[0]})") from None
    return {name: tuple(segment.split("@")[0] for segment in segments)
            for name, *segments in (line.split() for line in lines)}


def taught_chains(primitives: str) -> set[str] | None:
    """The chains named among the clips a primitives directory was taught (its meta.json); None where it has no
    readable meta.json (a results file may name primitives that are not on this machine)."""
    try:
        return set(json.loads((Path(primitives) / "meta.json").read_text())["clips"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


END_WINDOW = 60   # steps before a chain's end: as far as the students' encoder reads the reference ahead


def by_sequence(rows: dict[str, dict], chains: dict[str, tuple[str, ...]], taught: set[str] | None) -> dict:
    """Episodes grouped by the chain their first segments follow: per chain and per class (taught, untaught, short:
    fewer segments than a chain has, unknown where ``taught`` is None): episodes, targets, median steps upright,
    falls before the chain's segments end, of those the falls in the last ``END_WINDOW`` steps before it, and the
    median of the steps upright minus the chain's length (negative: before its end)."""
    length = max(len(clips) for clips in chains.values())
    named = {clips: name for name, clips in chains.items()}
    groups: dict[str, dict[str, list]] = {"chains": {}, "classes": {}}
    for row in rows.values():
        segments = row["chain"]
        clips = tuple(clip for clip, _, _ in segments[:length])
        name = named.get(clips) if len(clips) == length else None
        cls = "short" if len(clips) < length else "unknown" if taught is None else \
            "taught" if name in taught else "untaught"
        end = sum(frames for _, _, frames in segments[:length])
        within = row["fell"] and row["steps"] < end
        for table, key in ((groups["chains"], name or ("short" if cls == "short" else "other")),
                           (groups["classes"], cls)):
            table.setdefault(key, []).append((row["targets_reached"], row["steps"], within,
                                              within and row["steps"] >= end - END_WINDOW, row["steps"] - end))
    summary = lambda episodes: {"episodes": len(episodes), "targets": int(sum(e[0] for e in episodes)),
                                "median_steps": float(np.median([e[1] for e in episodes])),
                                "falls_within": int(sum(e[2] for e in episodes)),
                                f"falls_in_last_{END_WINDOW}": int(sum(e[3] for e in episodes)),
                                "median_steps_from_end": float(np.median([e[4] for e in episodes]))}
    return {table: {key: summary(episodes) for key, episodes in sorted(groups[table].items(),
                                                                       key=lambda kv: -len(kv[1]))}
            for table in groups}


LAST_SEGMENT = 6   # --by-segment: segments from this one on are pooled (few episodes get there)


def by_segment(rows: dict[str, dict]) -> dict:
    """Per segment of the episodes' chains (``"<n> same"`` or ``"<n> switch"``, the start's ``"0 start"``): how
    many episodes entered it, how many fell in it, and the share that fell (module docstring)."""
    counts: dict[str, tuple[int, int]] = {}
    for row in rows.values():
        start, before = 0, None
        for n, (clip, _, frames) in enumerate(row["chain"]):
            if row["steps"] < start:
                break
            kind = "start" if n == 0 else "same" if clip == before else "switch"
            key = f"{min(n, LAST_SEGMENT)} {kind}"
            entered, fell = counts.get(key, (0, 0))
            counts[key] = (entered + 1, fell + int(row["fell"] and row["steps"] < start + frames))
            start, before = start + frames, clip
    return {key: {"entered": e, "fell": f, "hazard": round(f / e, 3)}
            for key, (e, f) in sorted(counts.items(), key=lambda kv: (int(kv[0].split()[0]), kv[0]))}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--results", type=Path, nargs="+", required=True,
                   help="results files of benchmarks/npmp_clips_humanoid.py (a primitives' rows from the first "
                        "file holding them)")
    p.add_argument("--key", required=True, help="the controller and variant, as the results files name it")
    p.add_argument("--primitives", nargs="+", required=True, help="two or more; the first is the reference")
    p.add_argument("--out", type=Path, help="also write the ranking here (JSON)")
    p.add_argument("--by-sequence", type=Path, metavar="CHAINS.h5",
                   help="also split each primitives' episodes by the chain their first segments follow and by "
                        "whether the primitives were taught it (module docstring)")
    p.add_argument("--by-segment", action="store_true",
                   help="also count the falls per segment of the chain, same turn again or a change (docstring)")
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
    shared = set.intersection(*(set(held[name]) for name in args.primitives))   # the seeds every one played
    if args.by_sequence:
        try:
            chains = read_chains(args.by_sequence)
            for name in args.primitives:
                ranking["primitives"][name]["by_sequence"] = by_sequence(
                    {s: held[name][s] for s in shared}, chains, taught_chains(name))
        except (ValueError, KeyError, TypeError) as e:
            fail(f"--by-sequence: {str(e).splitlines()[0]}")
    if args.by_segment:
        try:
            for name in args.primitives:
                ranking["primitives"][name]["by_segment"] = by_segment({s: held[name][s] for s in shared})
        except (ValueError, KeyError, TypeError) as e:
            fail(f"--by-segment: the rows lack their chains ({str(e).splitlines()[0]})")
    for name, row in ranking["primitives"].items():
        line = (f"{name}: {row['targets']} targets in {ranking['episodes']} episodes "
                f"({row['targets_per_episode']} per episode, 95 % {row['targets_per_episode_95']}), median "
                f"{row['median_steps']} steps upright (95 % {row['median_steps_95']}), {row['falls']} falls")
        if "targets_verdict" in row:
            line += (f"; against {ranking['reference']}: targets {row['targets_minus_reference']:+} per episode "
                     f"{row['targets_minus_reference_95']} ({row['targets_verdict']}), steps "
                     f"{row['steps_minus_reference']:+} {row['steps_minus_reference_95']} ({row['steps_verdict']})")
        print(line, flush=True)
        for cls, part in row.get("by_sequence", {}).get("classes", {}).items():
            print(f"  {cls}: {part['episodes']} episodes, {part['targets']} targets, median {part['median_steps']} "
                  f"steps upright, {part['falls_within']} fall before the chain's end "
                  f"({part[f'falls_in_last_{END_WINDOW}']} in its last {END_WINDOW} steps; median steps from its end "
                  f"{part['median_steps_from_end']:+g})", flush=True)
        if "by_segment" in row:
            print("  fell / entered per segment: " + ", ".join(
                f"{key} {part['fell']}/{part['entered']}" for key, part in row["by_segment"].items()), flush=True)
    if args.out:
        write_json(args.out, ranking)
    return 0


if __name__ == "__main__":
    sys.exit(main())
