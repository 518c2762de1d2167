"""Tracking experts, measured in absolute terms: the MPC planner (agents/mpc.py) on every snippet, from its first frame.

Per snippet, both controllers run from the snippet's first frame (the reference pose and velocity) until the
episode ends -- by termination (the tracking error passed the env's threshold: the walker fell or drifted away) or by
reaching the snippet's end:
- ``mpc``: the planner, deterministic for a given ``seed``;
- ``feed_forward``: the servos commanded to the reference's next-frame joint angles (what the planner starts from).
Each records ``steps_tracked`` (steps before the episode ended), ``tracked_to_end``, ``return``, ``reward_per_step``
and ``relative_return`` = return / (``MAX_COMIC_REWARD`` x ``full_steps``), the return of kinematic playback (a
perfect tracker earns 1.45 per step; ``full_steps`` is the episode length when never terminated). The planner also
records ``seconds_per_control_step`` (wall time per planning step on ``cores`` threads; ``cores`` = the rollout
threads of one planner), its predicted return per step, and where its reward goes: ``reward_terms_per_step`` (each
CoMic term's mean per step, agents/mpc.py ``comic_terms``) and ``median_joints_velocity_error`` (E of the
joint-velocity term 0.5 exp(-0.1 E)); ``--report`` tabulates them per kind of snippet.

Targets (issue 13) over the shipped snippets and their mirrors: >= 90 % tracked to the end; median relative return
>= 0.7. ``summary`` reports them; ``missing`` lists snippets not run yet.

Resumable: benchmarks/results/experts.json is rewritten after every snippet; a rerun with the same planner settings
runs only the snippets still missing (``--hours`` stops starting new ones after that long). Changing a planner
setting (``--set``) starts a new table.

    python benchmarks/experts.py --workers 2 --hours 1.5      # the shipped snippets and mirrors, two at a time
    python benchmarks/experts.py --snippets 07_01-0 09_01-0   # a few
    python benchmarks/experts.py --report                      # the table of what has been measured
    python benchmarks/experts.py --snippets 01_01-2-mirror --results /tmp/look.json --frames /tmp/frames   # look at one
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import platform
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.runs import Strip, fail, run_pool, write_json  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "experts.json"
TRACKED_TARGET, RELATIVE_TARGET = 0.9, 0.7
# the clips by what they show (data/mocap/cmu/SOURCES.md, data/mocap/bvh/SOURCES.md), for the report's per-kind
# rows, the first match counting; others: "other"
KINDS = {"walking turn": ("16_27", "69_26"), "walk": ("02_01", "07_", "08_"), "run": ("02_03", "09_", "16_"),
         "jump and turn": ("01_01",)}


def kind(snippet: str) -> str:
    return next((name for name, prefixes in KINDS.items() if snippet.startswith(prefixes)), "other")


def run_controller(env, act) -> dict:
    """One episode of ``env`` (built with clip_start) with ``act() -> command``, as a record."""
    from pipelines.npmp.evaluate import run_episode

    total, steps, terminated = run_episode(env, act, seed=0)
    return {"steps_tracked": steps, "tracked_to_end": not terminated, "return": total,
            "reward_per_step": total / steps}


def measure(args: tuple) -> tuple[str, dict]:
    """(snippet, record) for one snippet; runs in a worker process with one planner thread."""
    snippet, settings, mocap, frames = args
    import numpy as np

    import envs
    from agents.mpc import COMIC_TERMS, MPCConfig, TrackingPlanner
    from envs.mocap.tracking import MAX_COMIC_REWARD
    from pipelines.npmp.experts import reference_score

    reference = reference_score(snippet, mocap)
    scale = MAX_COMIC_REWARD * reference["full_steps"]
    env = envs.make(f"humanoid-track:{snippet}", seed=0, clip_start=True, ref_path=mocap)
    feed_forward = run_controller(env, env.reference_action)
    config = MPCConfig(**settings)
    planner = TrackingPlanner(env, config)
    seconds, predicted = [], []
    strip = Strip() if frames else None

    terms = []   # what each step earned, term by term (the state after step t against reference frame t)

    def plan():
        if strip is not None:   # the state this step plans from; the first frame is the clip's first pose
            strip(env, len(seconds))
        if seconds:
            terms.append(planner.reward_terms())
        command = planner.act()
        seconds.append(planner.last_info.seconds)
        predicted.append(planner.last_info.predicted_return / planner.last_info.horizon)
        return command

    planner.reset()
    mpc = run_controller(env, plan)
    terms.append(planner.reward_terms())
    if strip is not None:
        strip(env, len(seconds))
        strip.write(Path(frames) / f"{snippet}.png")
    planner.close()
    env.close()
    for record in (mpc, feed_forward):
        record["relative_return"] = record["return"] / scale
    mpc.update(seconds_per_control_step=float(np.mean(seconds)), cores=planner.threads,
               predicted_reward_per_step=float(np.mean(predicted)),
               reward_terms_per_step={name: float(np.mean([step[name] for step in terms])) for name in COMIC_TERMS},
               median_joints_velocity_error=float(np.median([step["joints_velocity_error"] for step in terms])))
    return snippet, {"frames": reference["full_steps"] + 6, "full_steps": reference["full_steps"], "mpc": mpc,
                     "feed_forward": feed_forward}


def summarise(table: dict[str, dict]) -> dict:
    if not table:
        return {}

    def stats(key):
        rows = [r[key] for r in table.values()]
        return {"tracked_to_end": sum(r["tracked_to_end"] for r in rows) / len(rows),
                "median_relative_return": statistics.median(r["relative_return"] for r in rows),
                "median_steps_tracked_fraction": statistics.median(
                    r["steps_tracked"] / t["full_steps"] for r, t in zip(rows, table.values())),
                "mean_reward_per_step": statistics.fmean(r["reward_per_step"] for r in rows)}
    mpc = stats("mpc")
    return {"snippets": len(table), "mpc": mpc, "feed_forward": stats("feed_forward"),
            "mpc_beats_feed_forward": sum(r["mpc"]["return"] > r["feed_forward"]["return"] for r in table.values()),
            "seconds_per_control_step": statistics.fmean(r["mpc"]["seconds_per_control_step"]
                                                         for r in table.values()),
            "targets": {"tracked_to_end >= 0.9": mpc["tracked_to_end"] >= TRACKED_TARGET,
                        "median_relative_return >= 0.7": mpc["median_relative_return"] >= RELATIVE_TARGET}}


def report(result: dict) -> str:
    lines = ["| snippet | steps | MPC tracked | MPC reward/step | MPC relative | feed-forward tracked | "
             "feed-forward relative | s / control step |", "|---|---|---|---|---|---|---|---|"]
    for sid, r in sorted(result["snippets"].items()):
        m, f = r["mpc"], r["feed_forward"]
        lines.append(f"| {sid} | {r['full_steps']} | {m['steps_tracked']} | {m['reward_per_step']:.2f} | "
                     f"{m['relative_return']:.2f} | {f['steps_tracked']} | {f['relative_return']:.2f} | "
                     f"{m['seconds_per_control_step']:.2f} |")
    s = result.get("summary", {})
    if s:
        lines.append("")
        lines.append(f"{s['snippets']} snippets: MPC tracked to the end {s['mpc']['tracked_to_end']:.0%} "
                     f"(feed-forward {s['feed_forward']['tracked_to_end']:.0%}), median relative return "
                     f"{s['mpc']['median_relative_return']:.2f} (feed-forward "
                     f"{s['feed_forward']['median_relative_return']:.2f}), MPC above feed-forward on "
                     f"{s['mpc_beats_feed_forward']}; {s['seconds_per_control_step']:.2f} s per control step.")
    if result["snippets"]:
        lines += ["", "| kind | snippets | mean length (steps) | MPC: tracked to the end | median fraction tracked | "
                  "median reward / step | median relative return | feed-forward: median fraction tracked | "
                  "median reward / step | median relative return |", "|---|---|---|---|---|---|---|---|---|---|"]
        groups = {}
        for sid, r in result["snippets"].items():
            groups.setdefault(kind(sid), []).append(r)
        for name, rows in [*sorted(groups.items()), ("**all**", list(result["snippets"].values()))]:
            median = lambda key, who: statistics.median(value(r, key, who) for r in rows)  # noqa: E731
            lines.append(f"| {name} | {len(rows)} | {statistics.fmean(r['full_steps'] for r in rows):.0f} | "
                         f"{sum(r['mpc']['tracked_to_end'] for r in rows)} | {median('fraction', 'mpc'):.2f} | "
                         f"{median('reward_per_step', 'mpc'):.2f} | {median('relative_return', 'mpc'):.2f} | "
                         f"{median('fraction', 'feed_forward'):.2f} | "
                         f"{median('reward_per_step', 'feed_forward'):.2f} | "
                         f"{median('relative_return', 'feed_forward'):.2f} |")
        lines += reward_terms_table(groups, list(result["snippets"].values()))
    if result.get("missing"):
        lines.append(f"Not measured yet: {', '.join(result['missing'])}.")
    return "\n".join(lines)


def reward_terms_table(groups: dict[str, list], everything: list) -> list[str]:
    """Where the planner's reward per step goes: per kind, the median over snippets of each CoMic term's mean per
    step (of its maximum) and the median joint-velocity error E (the term is 0.5 exp(-0.1 E)); snippets measured
    before the terms were recorded are left out."""
    from agents.mpc import COMIC_WEIGHTS

    with_terms = {name: [r for r in rows if "reward_terms_per_step" in r["mpc"]]
                  for name, rows in [*sorted(groups.items()), ("**all**", everything)]}
    if not with_terms["**all**"]:
        return []
    lines = ["", "Where the planner's reward per step goes (median over snippets of each term's mean per step; "
             "its maximum in brackets):", "",
             "| kind | snippets | " + " | ".join(f"{name.replace('_', ' ')} ({top})" for name, top in COMIC_WEIGHTS.items())
             + " | joint-velocity error E (median) |", "|---|---|" + "---|" * (len(COMIC_WEIGHTS) + 1)]
    for name, rows in with_terms.items():
        if rows:
            terms = " | ".join(f"{statistics.median(r['mpc']['reward_terms_per_step'][t] for r in rows):.3f}"
                               for t in COMIC_WEIGHTS)
            error = statistics.median(r["mpc"]["median_joints_velocity_error"] for r in rows)
            lines.append(f"| {name} | {len(rows)} | {terms} | {error:.0f} |")
    return lines + ["", velocity_term_needed(RELATIVE_TARGET)]


def velocity_term_needed(relative_target: float) -> str:
    """What the relative-return target asks of the joint-velocity term, from the reward's weights alone: without
    that term a tracker perfect in everything else earns (1.45 - 0.5) / 1.45 of playback's return."""
    from agents.mpc import COMIC_WEIGHTS, JOINTS_VELOCITY_SCALE

    total, velocity = sum(COMIC_WEIGHTS.values()), COMIC_WEIGHTS["joints_velocity"]
    ceiling = (total - velocity) / total
    needed = relative_target * total - (total - velocity)   # per step, every other term at its maximum
    if needed <= 0:
        return f"Without the joint-velocity term the relative return can reach {ceiling:.3f}."
    largest_error = math.log(velocity / needed) / JOINTS_VELOCITY_SCALE
    return (f"Without the joint-velocity term no tracker exceeds a relative return of {ceiling:.3f}: "
            f"{relative_target} needs that term to pay at least {needed:.3f} per step, a joint-velocity error "
            f"E <= {largest_error:.1f} with every other term at its maximum.")


def value(row: dict, key: str, who: str) -> float:
    """A per-snippet number of the planner or the feed-forward controller; ``fraction``: of the snippet tracked."""
    record = row[who]
    return record["steps_tracked"] / row["full_steps"] if key == "fraction" else record[key]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--snippets", nargs="*", help="snippet ids (default: every snippet of the shipped data)")
    p.add_argument("--workers", type=int, default=2, help="snippets planned at once (one core each)")
    p.add_argument("--hours", type=float, help="start no new snippet after this long")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="planner setting (MPCConfig)")
    p.add_argument("--results", type=Path, default=RESULTS)
    p.add_argument("--mocap", type=Path, help="another mocap file in the shipped one's schema (e.g. looped walks, "
                   "envs/mocap/convert.py --loop); default: the shipped data/mocap/cmu_snippets.h5")
    p.add_argument("--frames", type=Path, help="also draw each planned episode: one PNG per snippet in this folder, "
                   "the walker every second and at the end (only snippets run now; a rerun skips measured ones)")
    p.add_argument("--report", action="store_true", help="print the table of the results file and exit")
    args = p.parse_args(argv)

    from agents.config import ConfigError, apply_overrides
    from agents.mpc import MPCConfig, stored_settings
    from envs import EnvError
    from envs.mocap.tracking import DEFAULT_OUTPUT, snippet_ids

    if args.report:
        if not args.results.is_file():
            fail(f"no results at {args.results}; run the benchmark first")
        print(report(json.loads(args.results.read_text())))
        return 0
    if args.workers < 1:
        fail(f"--workers must be at least 1, got {args.workers}")
    try:
        overrides = dict(pair.split("=", 1) for pair in args.set)
        config = apply_overrides(MPCConfig(threads=1), overrides)
        config.validate()
    except ValueError as e:   # ConfigError, or a --set without "="
        fail(f"--set: {e}" if not isinstance(e, ConfigError) else str(e))
    mocap = str(args.mocap or DEFAULT_OUTPUT)
    try:
        available = snippet_ids(mocap, augmented=True)
    except EnvError as e:
        fail(str(e))
    snippets = args.snippets or snippet_ids(mocap)   # by default the clips as captured and their mirrors
    unknown = [s for s in snippets if s not in available]
    if unknown:
        fail(f"unknown snippet(s) {', '.join(unknown)}; snippets are {', '.join(available[:4])}, ... "
             f"({len(available)} in all)")
    settings = dataclasses.asdict(config)
    old = json.loads(args.results.read_text()) if args.results.is_file() else {}
    same = stored_settings(old.get("planner")) == settings and old.get("mocap", str(DEFAULT_OUTPUT)) == mocap
    table = old.get("snippets", {}) if same else {}
    result = {"command": "python benchmarks/experts.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
              "date": datetime.date.today().isoformat(), "planner": settings, "snippets": table}
    if args.mocap:
        result["mocap"] = mocap

    def save():
        result["snippets"] = dict(sorted(table.items()))
        result["summary"] = summarise(table)
        result["missing"] = [s for s in snippets if s not in table]
        write_json(args.results, result)

    def on_result(item):
        snippet, record = item
        table[snippet] = record
        save()
        m, f = record["mpc"], record["feed_forward"]
        print(f"{snippet}: MPC {m['steps_tracked']}/{record['full_steps']} steps, {m['reward_per_step']:.2f} per step "
              f"(feed-forward {f['steps_tracked']}, {f['reward_per_step']:.2f}); "
              f"{m['seconds_per_control_step']:.2f} s per control step", flush=True)

    todo = [(s, settings, mocap, args.frames) for s in snippets if s not in table]
    print(f"{len(todo)} snippets to plan ({len(snippets) - len(todo)} already measured)", flush=True)
    run_pool(measure, todo, args.workers, args.hours, on_result, "experts")
    save()
    print(report(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
