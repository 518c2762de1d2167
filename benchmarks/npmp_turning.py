"""Can the primitives turn? Closed-loop imitation of the walks and of their curved variants (issue 13; docs/npmp.md,
"Can the primitives turn?").

Every shipped walk goes straight, so the headline's steering needs a skill the clips do not show. The converter bends
the 14 walks into left and right arcs at 30 deg/s (``<id>-left30``, ``<id>-right30``; envs/mocap/convert.py
``curve_qpos``). Here the primitives imitate each walk and both arcs closed loop from the clip's first frame (the
encoder reads the clip's reference, the decoder acts: pipelines/npmp/evaluate.py ``reference_encoder``), and we
record steps before termination, reward per step, and how far the walker's heading turned over the first
``--compare-steps`` steps (or as many as the shortest of a walk's three episodes lasted), next to the reference's
turn. Primitives that turn with the arc turn more on ``-left30`` and less on ``-right30`` than on the straight clip;
primitives that ignore the arc turn the same on all three.

With ``--collection DATA`` the table also gets the planner's own run of each curved snippet in that collection
(``python -m pipelines.npmp collect --experts mpc --expert-policy lqr ...``): steps it tracked.

    python benchmarks/npmp_turning.py --primitives data/primitives/npmp runs/npmp/curved30/p0 \\
        --collection runs/npmp/curved30/data.h5 --results benchmarks/results/npmp_turning.json
"""
from __future__ import annotations

import argparse
import datetime
import math
import statistics
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.runs import fail, write_json  # noqa: E402
from envs.mocap.convert import curve_suffix, yaw  # noqa: E402


def sides(rate: float) -> tuple[str, str, str]:
    """The id suffixes of a walk and of its left and right arcs at ``rate`` degrees per second."""
    return ("", *curve_suffix(rate))


@torch.no_grad()
def imitate(model, snippet: str, compare_steps: int) -> dict:
    """Closed-loop imitation of ``snippet`` (encoder on its reference): steps, reward per step, and the walker's and
    the reference's headings (radians, unwrapped) over the first ``compare_steps`` steps, or until the episode
    ended."""
    from envs.mocap import tracking
    from pipelines.npmp.evaluate import reference_encoder, reference_playback

    reference = reference_playback(snippet)
    latent = reference_encoder(model, torch.as_tensor(reference.states), torch.as_tensor(reference.root))
    env = tracking.make(f"{tracking.TIMED_FAMILY}:{snippet}", seed=0, clip_start=True)
    try:
        obs, _ = env.reset(seed=0)
        headings, total, steps = [], 0.0, 0
        while True:
            headings.append(yaw(env.physics.bind(env.walker.root_body).xquat))
            state = torch.as_tensor(np.asarray(obs["proprio"], np.float32))
            mean, _ = model.decode(state, latent(steps, state))
            obs, reward, terminated, truncated, _ = env.step(mean.clamp(-1.0, 1.0).numpy())
            total, steps = total + float(reward), steps + 1
            if terminated or truncated:
                break
        n = min(compare_steps, len(headings) - 1)
        reference = np.unwrap([yaw(q) for q in env.clip_reference()["quaternion"][:n + 1]])
        return {"full_steps": env.last_step, "steps": steps, "reward_per_step": total / steps,
                "walker_headings": np.unwrap(headings[:n + 1]).tolist(), "reference_headings": reference.tolist()}
    finally:
        env.close()


def add_turns(records: list[dict]) -> None:
    """Each record's turn (degrees) of the walker and of the reference over the steps all of ``records`` (a walk and
    its arcs) lasted, so that the arcs are compared with their walk over the same span."""
    n = min(min(len(r["walker_headings"]), len(r["reference_headings"])) for r in records) - 1
    for r in records:
        walker, reference = r.pop("walker_headings"), r.pop("reference_headings")
        r.update(compared_steps=n, walker_turn_degrees=math.degrees(walker[n] - walker[0]),
                 reference_turn_degrees=math.degrees(reference[n] - reference[0]))


def summarise(rows: dict[str, dict], walks: list[str], suffixes: tuple[str, str, str]) -> dict:
    """Per side: median fraction tracked, snippets tracked to the end, median reward per step; per arc, the median
    of (walker's turn on the arc - its turn on the straight clip), against the reference's, and how many walks
    turned the arc's way."""
    out = {}
    for side, sign in zip(suffixes, (0, 1, -1)):
        records = [rows[w + side] for w in walks]
        out[side[1:] or "straight"] = {
            "median_fraction_tracked": statistics.median(r["steps"] / r["full_steps"] for r in records),
            "tracked_to_end": sum(r["steps"] >= r["full_steps"] for r in records),
            "median_reward_per_step": statistics.median(r["reward_per_step"] for r in records)}
        if side:
            extra = [rows[w + side]["walker_turn_degrees"] - rows[w]["walker_turn_degrees"] for w in walks]
            out[side[1:]].update(
                median_extra_turn_degrees=statistics.median(extra),
                median_reference_extra_turn_degrees=statistics.median(
                    rows[w + side]["reference_turn_degrees"] - rows[w]["reference_turn_degrees"] for w in walks),
                turned_the_arcs_way=sum(sign * e > 0 for e in extra),
                median_compared_steps=statistics.median(rows[w]["compared_steps"] for w in walks))
    return out


def planner_runs(collection: Path) -> dict[str, dict]:
    """The planner's own run of each snippet of a planner collection: steps it tracked, out of the snippet's."""
    from envs.mocap.tracking import REF_STEPS, snippet_frames
    from pipelines.npmp.data import read_results

    results, _ = read_results(collection)
    return {r["snippet"]: {"planner_steps": int(len(r["plan"]["commands"])),
                           "full_steps": snippet_frames(r["snippet"]) - max(REF_STEPS) - 1}
            for r in results if "plan" in r}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--primitives", type=Path, nargs="+", default=[ROOT / "data" / "primitives" / "npmp"])
    p.add_argument("--rate", type=float, default=30.0, help="the arcs' yaw rate, degrees per second (as converted)")
    p.add_argument("--walks", nargs="*", help="walk snippet ids (default: every snippet with arcs at --rate)")
    p.add_argument("--compare-steps", type=int, default=40, help="steps over which headings are compared (1.2 s)")
    p.add_argument("--collection", type=Path, help="a planner collection of curved snippets: its planner runs too")
    p.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results" / "npmp_turning.json")
    args = p.parse_args(argv)
    if args.compare_steps < 1:
        fail(f"--compare-steps must be at least 1, got {args.compare_steps}")

    from agents.config import ConfigError
    from envs import EnvError
    from envs.mocap.tracking import snippet_ids
    from priors.npmp import ModuleFileError, load_primitives

    torch.set_num_threads(1)
    suffixes = sides(args.rate)
    every = set(snippet_ids(augmented=True))
    walks = args.walks or [s for s in snippet_ids() if all(s + side in every for side in suffixes)]
    missing = [w + side for w in walks for side in suffixes if w + side not in every]
    if missing or not walks:
        fail(f"no such snippet(s) {', '.join(missing) or f'with arcs at {args.rate:g} deg/s'} (the walks with "
             "curved variants: docs/mocap.md)")
    results = {"command": "python " + " ".join([f"benchmarks/{Path(__file__).name}", *(argv or sys.argv[1:])]),
               "date": datetime.date.today().isoformat(), "rate": args.rate, "compare_steps": args.compare_steps,
               "primitives": {}}
    for path in args.primitives:
        try:
            model, _ = load_primitives(path)
        except ModuleFileError as e:
            fail(f"primitives: {e}")
        rows = {}
        for walk in walks:
            for side in suffixes:
                rows[walk + side] = imitate(model, walk + side, args.compare_steps)
            add_turns([rows[walk + side] for side in suffixes])
            for side in suffixes:
                print(f"{path}: {walk + side}: {rows[walk + side]}", flush=True)
        results["primitives"][str(path)] = {"summary": summarise(rows, walks, suffixes), "snippets": rows}
        print(path, results["primitives"][str(path)]["summary"], flush=True)
    if args.collection:
        try:
            results["planner"] = planner_runs(args.collection)
        except (ConfigError, EnvError) as e:
            fail(str(e))
    write_json(args.results, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
