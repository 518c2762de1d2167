"""Motor primitives in absolute terms, next to the expert they were distilled from (issue 13, item 3).

Reads a report of ``python -m pipelines.npmp evaluate`` (closed loop from each clip's first frame: the encoder reads
the clip, the decoder acts; steps before termination and reward per step, next to the feed-forward controller) and
the planner experts' own runs on the same snippets (benchmarks/results/experts.json, ``python benchmarks/experts.py``),
and stores one entry under ``--key`` in benchmarks/results/npmp_absolute.json: per snippet the three controllers
side by side, and per split the medians with the issue's targets on the held-out clips -- tracked fraction >= 0.8
and reward per step >= 0.7 of the expert's.

    python benchmarks/npmp_absolute.py --report runs/npmp/report.json --key shipped \\
        --primitives "data/primitives/npmp (...)" --command "python -m pipelines.npmp evaluate ..."
    python benchmarks/npmp_absolute.py --table shipped          # the markdown table of a stored entry
"""
from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.runs import fail, write_json  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
TARGET_TRACKED_FRACTION = 0.8       # held-out median fraction of the snippet tracked
TARGET_REWARD_RATIO = 0.7           # held-out median reward per step over the expert's


def _median(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def rows(report_split: dict, experts: dict) -> list[dict]:
    """The report's absolute rows with the planner expert's own run on the same snippet (None where not measured)."""
    out = []
    for row in report_split["absolute"]:
        expert = (experts.get(row["snippet"]) or {}).get("mpc")
        row = dict(row)
        if expert:
            row.update(expert_steps=expert["steps_tracked"], expert_reward_per_step=expert["reward_per_step"],
                       reward_ratio_to_expert=row["reward_per_step"] / expert["reward_per_step"])
        out.append(row)
    return out


def summary(split_rows: list[dict]) -> dict:
    return {"clips": len(split_rows),
            "median_tracked_fraction": _median([r["tracked_fraction"] for r in split_rows]),
            "tracked_to_end": sum(r["steps"] >= r["full_steps"] for r in split_rows),
            "median_reward_per_step": _median([r["reward_per_step"] for r in split_rows]),
            "median_reward_ratio_to_expert": _median([r.get("reward_ratio_to_expert") for r in split_rows]),
            "expert_tracked_to_end": sum(r.get("expert_steps", -1) >= r["full_steps"] for r in split_rows),
            "median_expert_reward_per_step": _median([r.get("expert_reward_per_step") for r in split_rows]),
            "median_feed_forward_tracked_fraction": _median([r["feed_forward_steps"] / r["full_steps"]
                                                             for r in split_rows]),
            "median_feed_forward_reward_per_step": _median([r["feed_forward_reward_per_step"] for r in split_rows]),
            "longer_than_feed_forward": sum(r["steps"] > r["feed_forward_steps"] for r in split_rows),
            "more_reward_per_step_than_feed_forward": sum(r["reward_per_step"] > r["feed_forward_reward_per_step"]
                                                          for r in split_rows)}


def entry(report: dict, experts: dict, primitives: str, commands: list[str]) -> dict:
    result = {"primitives": primitives, "commands": commands, "scheme": report.get("scheme"),
              "distill_steps": report.get("distill_steps")}
    for split in ("train", "held_out"):
        result[split] = rows(report[split], experts)
        result[f"{split}_summary"] = summary(result[split])
    held = result["held_out_summary"]
    result["targets"] = {
        f"held-out median tracked fraction >= {TARGET_TRACKED_FRACTION}":
            held["median_tracked_fraction"] is not None and held["median_tracked_fraction"] >= TARGET_TRACKED_FRACTION,
        f"held-out median reward per step >= {TARGET_REWARD_RATIO} of the expert's":
            held["median_reward_ratio_to_expert"] is not None
            and held["median_reward_ratio_to_expert"] >= TARGET_REWARD_RATIO}
    return result


def table(result: dict) -> str:
    def cell(x, digits=2):
        return "–" if x is None else (f"{x:.{digits}f}" if isinstance(x, float) else str(x))

    lines = ["| split | snippet | full steps | primitives: steps / reward per step | expert (MPC): steps / reward per "
             "step | feed-forward: steps / reward per step |", "|---|---|---|---|---|---|"]
    for split in ("train", "held_out"):
        for r in result[split]:
            lines.append(f"| {split.replace('_', ' ')} | {r['snippet']} | {r['full_steps']} | {r['steps']} / "
                         f"{cell(r['reward_per_step'])} | {cell(r.get('expert_steps'))} / "
                         f"{cell(r.get('expert_reward_per_step'))} | {r['feed_forward_steps']} / "
                         f"{cell(r['feed_forward_reward_per_step'])} |")
    lines += ["", "| split | clips | median tracked | to the end (expert) | median reward / step (expert's; ratio) | "
              "feed-forward: median tracked / reward per step | longer / more reward than feed-forward |",
              "|---|---|---|---|---|---|---|"]
    for split in ("train", "held_out"):
        s = result[f"{split}_summary"]
        lines.append(f"| {split.replace('_', ' ')} | {s['clips']} | {cell(s['median_tracked_fraction'])} | "
                     f"{s['tracked_to_end']} ({s['expert_tracked_to_end']}) | {cell(s['median_reward_per_step'])} "
                     f"({cell(s['median_expert_reward_per_step'])}; {cell(s['median_reward_ratio_to_expert'])}) | "
                     f"{cell(s['median_feed_forward_tracked_fraction'])} / "
                     f"{cell(s['median_feed_forward_reward_per_step'])} | {s['longer_than_feed_forward']} / "
                     f"{s['more_reward_per_step_than_feed_forward']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--report", type=Path, help="a report written by `python -m pipelines.npmp evaluate --out`")
    p.add_argument("--key", help="the entry's name in the results file")
    p.add_argument("--primitives", default="", help="what the primitives are (stored with the entry)")
    p.add_argument("--command", action="append", default=[], help="a command that reproduces the entry (repeatable)")
    p.add_argument("--experts", type=Path, default=RESULTS / "experts.json")
    p.add_argument("--results", type=Path, default=RESULTS / "npmp_absolute.json")
    p.add_argument("--table", metavar="KEY", help="print the markdown table of a stored entry and exit")
    args = p.parse_args(argv)
    results = json.loads(args.results.read_text()) if args.results.is_file() else {}
    if args.table:
        if args.table not in results or not isinstance(results[args.table], dict) or "train" not in results[args.table]:
            fail(f"no entry {args.table!r} with per-snippet rows in {args.results}")
        print(table(results[args.table]))
        return 0
    if not (args.report and args.key):
        fail("give --report and --key (or --table KEY)")
    try:
        report = json.loads(args.report.read_text())
        experts = json.loads(args.experts.read_text())["snippets"]
        result = entry(report, experts, args.primitives, args.command)
    except (OSError, ValueError, KeyError, TypeError) as e:
        fail(f"cannot read {args.report} or {args.experts}: {e}")
    results.update({"date": datetime.date.today().isoformat(), args.key: result})
    write_json(args.results, results)
    print(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
