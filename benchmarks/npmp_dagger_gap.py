"""How far do the primitives' actions drift from their DAgger labels along an episode? (issue 13; docs/npmp.md,
"Walks longer than a clip").

A DAgger round (``python -m pipelines.npmp relabel``) lets the primitives drive and labels every state they visit
with the expert's command (the planner's, or the LQR law's). For the last round of each data file, per episode: the
squared difference between the executed action (the primitives' command plus the round's action noise, whose
variance ``noise_std``^2 it includes) and the label, per action dimension, averaged over the first ``--edge`` steps,
the middle, and the last ``--edge`` steps before the episode ended (a fall, in every looped walk so far); then the
median over the round's episodes. Compare it with the distillation's own error on its batches (``mse`` in its log).
``parts_before_end``: how many steps before the episode's end the gap first exceeded ``--over`` (0: never), i.e.
how long before a fall the labeller starts asking for something else than the primitives do.

    python benchmarks/npmp_dagger_gap.py runs/npmp/walk62/data1.h5 runs/npmp/walk62/data_planned2.h5 \\
        --snippets 07_01-0-loop10 08_02-0-loop10

With ``--fit PRIMITIVES`` it also asks how well primitives fit the labels of the data they were trained on: their
command at every stored state (the encoder reading the clip's reference, as closed loop) against the stored label,
the same three parts, for the collected expert's own trajectories, the DAgger rounds before the last, and the last
round. Labels that the primitives fit on one labeller's states but not on another's, at the same clip times,
disagree with each other.

    python benchmarks/npmp_dagger_gap.py runs/npmp/walk62/data_planned2.h5 --fit runs/npmp/walk62/p2_planned \\
        --snippets 07_01-0-loop10
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.runs import fail, write_json  # noqa: E402


OVER = 0.05   # default --over: a gap per action dimension well above the distillation's error (about 0.004-0.007)


def episode_gaps(executed: np.ndarray, labels: np.ndarray, edge: int, over: float = OVER) -> dict:
    """Squared executed-minus-label difference per action dimension over an episode's first ``edge`` steps, its
    middle (nan when the episode is shorter than 2 ``edge``) and its last ``edge`` steps; ``parts_before_end``:
    steps from the first step whose gap exceeds ``over`` to the episode's end (0 if none does)."""
    gap = ((executed - labels) ** 2).mean(axis=1)
    middle = gap[edge:-edge]
    above = np.flatnonzero(gap > over)
    return {"steps": len(gap), "first": float(gap[:edge].mean()),
            "middle": float(middle.mean()) if len(middle) else float("nan"), "last": float(gap[-edge:].mean()),
            "parts_before_end": int(len(gap) - above[0]) if len(above) else 0}


def last_round(path: Path, edge: int, only: list[str] | None = None, required: bool = True,
               over: float = OVER) -> dict | None:
    """The last DAgger round of one data file (its episodes on ``only`` where given): its settings and the medians
    of ``episode_gaps`` over its episodes; None for a file without a round unless ``required``."""
    from agents.config import ConfigError
    from pipelines.npmp.data import NPMPDataset

    try:
        dataset = NPMPDataset(path)
    except (ConfigError, OSError) as e:
        fail(f"{path}: {e}")
    rounds = dataset.meta.get("relabelled")
    if not rounds:
        if required:
            fail(f"{path} has no DAgger round (python -m pipelines.npmp relabel; --fit alone reads any collection)")
        return None
    latest = rounds[-1]
    count = int(latest["trajectories"])
    # rounds record their snippets since 2026-11-27; before, every snippet with relabelled episodes was in them
    snippets = latest.get("snippets") or [s for s in dataset.snippets
                                          if int(dataset.attrs[s].get("relabelled_trajectories", 0)) >= count]
    if only:
        absent = sorted(set(only) - set(snippets))
        if absent:
            fail(f"{path}: its last DAgger round has no episodes of {', '.join(absent)}")
        snippets = [s for s in snippets if s in only]
    episodes = []
    for snippet in snippets:
        total = dataset.bc_trajectories(snippet)
        for index in range(total - count, total):
            t = dataset.trajectory(snippet, "bc", index)
            episodes.append({"snippet": snippet, **episode_gaps(t["actions"], t["mean_actions"], edge, over)})
    return {"driver": latest["primitives"], "labeller": latest.get("labeller", "collected"),
            "noise_std": latest["action_noise_std"], "episodes": len(episodes),
            **{f"median_{key}": float(np.nanmedian([e[key] for e in episodes]))
               for key in ("steps", "first", "middle", "last", "parts_before_end")},
            "per_episode": episodes}


def spread(indices: list[int], at_most: int | None) -> list[int]:
    """At most ``at_most`` of ``indices`` (all where None), evenly spread over them, first and last included."""
    if at_most is None or len(indices) <= at_most:
        return indices
    return [indices[int(i)] for i in np.linspace(0, len(indices) - 1, at_most).round()]


def training_fit(path: Path, primitives: Path, edge: int, only: list[str] | None = None,
                 per_part: int | None = None) -> dict:
    """The primitives' squared error against the stored labels of ``path`` (module docstring), per part of the
    data: ``collected`` (the expert's own noisy rollouts), ``earlier rounds`` and ``last round`` (DAgger episodes);
    medians over each part's episodes of ``episode_gaps`` (at most ``per_part`` episodes per snippet and part,
    ``spread``: every episode is one closed-loop pass of the encoder, about 0.3 s)."""
    import torch

    from agents.config import ConfigError
    from pipelines.npmp.data import NPMPDataset, snippet_mocap
    from pipelines.npmp.evaluate import primitives_actor, reference_playback
    from priors.io import ModuleFileError
    from priors.npmp import load_primitives

    try:
        dataset = NPMPDataset(path, snippets=only)
        model, _ = load_primitives(primitives)
        rounds = dataset.meta.get("relabelled") or []
        parts: dict[str, list[dict]] = {"collected": [], "earlier rounds": [], "last round": []}
        for snippet in dataset.snippets:
            collected, total = int(dataset.attrs[snippet]["trajectories"]), dataset.bc_trajectories(snippet)
            in_last = bool(rounds) and snippet in (rounds[-1].get("snippets") or dataset.snippets)
            last_start = total - int(rounds[-1]["trajectories"]) if in_last else total
            reference = reference_playback(snippet, ref_path=snippet_mocap(dataset.attrs[snippet]))
            chosen = {"collected": range(collected), "earlier rounds": range(collected, last_start),
                      "last round": range(last_start, total)}
            for part, indices in chosen.items():
                for index in spread(list(indices), per_part):
                    t = dataset.trajectory(snippet, "bc", index)
                    actor = primitives_actor(model, snippet, reference=reference)
                    with torch.no_grad():
                        commands = np.stack([actor(step, state) for step, state in enumerate(t["states"][:-1])])
                    parts[part].append({"snippet": snippet, **episode_gaps(commands, t["mean_actions"], edge)})
    except (ConfigError, ModuleFileError, ValueError) as e:
        fail(f"{path}: {e}")
    return {name: {"episodes": len(rows), **({f"median_{key}": float(np.nanmedian([r[key] for r in rows]))
                                              for key in ("steps", "first", "middle", "last")} if rows else {})}
            for name, rows in parts.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("data", type=Path, nargs="+", help="data files written by relabel (with --fit: or by collect)")
    p.add_argument("--snippets", nargs="+", help="only these snippets' episodes (default: all the round's)")
    p.add_argument("--edge", type=int, default=20, help="steps at each end of an episode")
    p.add_argument("--over", type=float, default=OVER,
                   help="the gap whose first excess is counted back from the episode's end (parts_before_end)")
    p.add_argument("--fit", type=Path, metavar="PRIMITIVES",
                   help="also: these primitives' error on each part of the data's stored labels (module docstring)")
    p.add_argument("--per-part", type=int, metavar="N",
                   help="--fit: at most N episodes per snippet of each part, evenly spread (default: every episode)")
    p.add_argument("--results", type=Path, help="also write the numbers here (JSON)")
    args = p.parse_args(argv)
    if args.edge < 1 or not args.over > 0:
        fail(f"--edge must be >= 1 and --over > 0, got {args.edge} and {args.over}")
    if args.per_part is not None and args.per_part < 1:
        fail(f"--per-part must be >= 1, got {args.per_part}")
    missing = [str(d) for d in args.data if not d.is_file()]
    if missing:
        fail(f"no such data file: {', '.join(missing)}")
    rows = {str(path): row for path in args.data
            if (row := last_round(path, args.edge, args.snippets, required=args.fit is None, over=args.over))
            is not None}
    if rows:
        print(f"squared gap between executed action and label, per action dimension (median over episodes; "
              f"first / middle / last {args.edge} steps)")
    for path, r in rows.items():
        print(f"{path}: driver {r['driver']}, labeller {r['labeller']}, noise {r['noise_std']:g} "
              f"(adds {r['noise_std'] ** 2:.4f}); {r['episodes']} episodes of a median {r['median_steps']:.0f} steps: "
              f"{r['median_first']:.3f} / {r['median_middle']:.3f} / {r['median_last']:.3f}; above {args.over:g} "
              f"from {r['median_parts_before_end']:.0f} steps before the end")
    fits = {}
    if args.fit:
        print(f"{args.fit}: squared error against the stored labels of its training data (median over episodes; "
              f"first / middle / last {args.edge} steps)")
        for path in args.data:
            fits[str(path)] = fit = training_fit(path, args.fit, args.edge, args.snippets, args.per_part)
            for part, r in fit.items():
                if r["episodes"]:
                    print(f"{path}, {part}: {r['episodes']} episodes of a median {r['median_steps']:.0f} steps: "
                          f"{r['median_first']:.4f} / {r['median_middle']:.4f} / {r['median_last']:.4f}")
    if args.results:
        write_json(args.results, {"command": "python " + " ".join(["benchmarks/npmp_dagger_gap.py",
                                                                   *(argv if argv is not None else sys.argv[1:])]),
                                  "edge": args.edge, "over": args.over, "rounds": rows,
                                  **({"fit": {"primitives": str(args.fit), "data": fits}} if args.fit else {})})
    return 0


if __name__ == "__main__":
    sys.exit(main())
