"""Learned behaviour priors (seed 000 Ch 7): the four experiments of issue #5, at budgets this machine can afford.

1. ``ant-go-to-target`` (sparse): svg0 with no prior vs an MLP prior on proprioception only vs an MLP prior on all
   observations (Fig 7.3: the asymmetric prior speeds up learning on ant and humanoid sparse tasks).
2. ``jumping_ball-go-to-target``: the same three conditions (Fig 7.3: no consistent gain for the jumping ball).
3. Transfer (Fig 7.6b): an MLP prior learned on ``ant-walk`` (one source run), loaded frozen into
   ``ant-go-to-target``, against learning from scratch (experiment 1's no-prior runs: same task, seeds, budget).
4. Latent-space reuse (Fig 7.6a): a latent AR(1) prior learned on ``ant-walk``; a new policy whose action is the latent
   z of the frozen decoder, against learning ``ant-walk`` from scratch.

Every run is ``agents.loop.Trainer`` (the same code as ``train.py``) with the settings in ``COMMON`` -- smaller networks
and fewer updates per step than the thesis so that ≥ 3 seeds per condition fit in about an hour on 2 cores (the
thesis: 2 x 300 units, 128 actors, batch 512; its runs are orders of magnitude longer). Curves are the training
episode returns read back from each run's TensorBoard events; "steps to threshold" is the first environment step
at which the mean of the last ``WINDOW`` training returns reaches the task's threshold.

    python benchmarks/priors.py                        # everything, 2 worker processes
    python benchmarks/priors.py --steps 10000 --seeds 0 --experiments 1    # a quick look

Writes benchmarks/results/priors.json (after every run; finished runs are reused on a rerun with the same settings),
docs/priors_curves.png and the table in docs/priors.md.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import platform
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.runs import plot_curve_panels, run_jobs, steps_to_threshold, train_and_read, write_json  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "priors.json"
FIGURE = ROOT / "docs" / "priors_curves.png"
DOCS = ROOT / "docs" / "priors.md"
WINDOW = 10
NOTES_MARKER = "<!-- notes: kept when the table above is regenerated -->"
# Budget-driven settings for every run (see the module docstring); everything else is svg0's default.
COMMON = {"hidden": "128,128", "prior.hidden": "128,128", "update_every": "4", "learning_starts": "1000"}
THRESHOLDS = {"ant-go-to-target": 15.0, "jumping_ball-go-to-target": 15.0, "ant-walk": 10.0}

NO_PRIOR = {}
PRIOR_PROPRIO = {"prior": "mlp", "prior.obs": "proprio"}
PRIOR_ALL = {"prior": "mlp", "prior.obs": "proprio,task"}


def experiments(steps: int, source_steps: int, workdir: Path) -> dict[str, dict]:
    """name -> {"source": (env, overrides) or None, "conditions": {label: (env, overrides)}}."""
    walk_prior = workdir / "source-ant-walk-mlp"
    walk_latent = workdir / "source-ant-walk-latent"
    return {
        "1_ant_go_to_target": {"conditions": {
            "no prior": ("ant-go-to-target", NO_PRIOR),
            "MLP prior, proprio": ("ant-go-to-target", PRIOR_PROPRIO),
            "MLP prior, all obs": ("ant-go-to-target", PRIOR_ALL)}},
        "2_jumping_ball_go_to_target": {"conditions": {
            "no prior": ("jumping_ball-go-to-target", NO_PRIOR),
            "MLP prior, proprio": ("jumping_ball-go-to-target", PRIOR_PROPRIO),
            "MLP prior, all obs": ("jumping_ball-go-to-target", PRIOR_ALL)}},
        "3_transfer_walk_to_go_to_target": {
            "sources": {walk_prior: ("ant-walk", PRIOR_PROPRIO)},
            "conditions": {
                "scratch (no prior)": ("ant-go-to-target", NO_PRIOR),
                "walk prior, frozen": ("ant-go-to-target", {**PRIOR_PROPRIO, "prior.init": str(walk_prior),
                                                             "prior.trainable": "false"})}},
        "4_latent_space_reuse": {
            "sources": {walk_latent: ("ant-walk", {"prior": "latent", "prior.obs": "proprio"})},
            "conditions": {
                "scratch (no prior)": ("ant-walk", NO_PRIOR),
                "latent space as action space": ("ant-walk", {"latent_controller": str(walk_latent)})}},
    }


def train_run(env: str, seed: int, steps: int, overrides: dict[str, str], logdir: Path) -> dict:
    record = train_and_read(env, "svg0", seed, steps, {**COMMON, **overrides}, logdir, tags=("prior/kl_target",))
    record["final_kl_target"] = record.pop("last").get("prior/kl_target")
    return record


def _job(args):
    key, env, seed, steps, overrides, logdir = args
    print(f"start {key}", flush=True)
    record = train_run(env, seed, steps, overrides, Path(logdir))
    print(f"done  {key}: eval {record['eval_return']:.1f} in {record['wall_s']:.0f} s", flush=True)
    return key, record


def summarise(spec: dict, runs: dict, seeds: list[int], steps: int) -> dict:
    out = {}
    for name, experiment in spec.items():
        rows = {}
        for label, (env, _) in experiment["conditions"].items():
            records = [runs[_key(env, overrides, seed, steps)] for seed in seeds
                       for overrides in [experiment["conditions"][label][1]]
                       if _key(env, overrides, seed, steps) in runs]
            if not records:
                continue
            threshold = THRESHOLDS[env]
            reached = [steps_to_threshold(r["curve"], threshold, WINDOW) for r in records]
            final = [float(np.mean([v for _, v in r["curve"][-WINDOW:]])) if r["curve"] else float("nan")
                     for r in records]
            rows[label] = {
                "env": env, "seeds": len(records), "threshold": threshold,
                "steps_to_threshold": reached,
                "reached_threshold": sum(r is not None for r in reached),
                "final_train_return_mean": float(np.mean(final)), "final_train_return_std": float(np.std(final)),
                "eval_return_mean": float(np.mean([r["eval_return"] for r in records])),
                "eval_return_std": float(np.std([r["eval_return"] for r in records])),
                "success_fraction": (float(np.mean([np.mean([v >= 60.0 for _, v in r["curve"]]) for r in records]))
                                     if "go-to-target" in env else None),
                "wall_s_mean": float(np.mean([r["wall_s"] for r in records])),
            }
        out[name] = rows
    return out


def _key(env: str, overrides: dict, seed: int, steps: int) -> str:
    """A run's name in the results file; settings keep the flat names they had before svg0's config sections, so
    runs measured then are still found."""
    from agents.svg0 import SVG0Config

    flat = {new: old for old, new in SVG0Config.MOVED.items()}
    overrides = {flat.get(k, k): v for k, v in overrides.items()}
    settings = ",".join(f"{k}={v}" for k, v in sorted(overrides.items()) if k not in ("prior_init", "latent_controller"))
    source = "source" if "prior_init" in overrides or "latent_controller" in overrides else ""
    return f"{env}|{settings}|{source}|seed={seed}|steps={steps}"


def plot(spec: dict, runs: dict, seeds: list[int], steps: int, path: Path = FIGURE) -> None:
    panels = {name.replace("_", " "): {label: [runs[k] for k in (_key(env, o, seed, steps) for seed in seeds) if k in runs]
                                       for label, (env, o) in experiment["conditions"].items()}
              for name, experiment in spec.items()}
    plot_curve_panels(panels, steps, path)


def write_docs(result: dict, path: Path = DOCS) -> None:
    lines = ["# Learned behaviour priors: measured", "",
             "Generated by `python benchmarks/priors.py` (" + result["command"] + "); raw numbers in "
             "`benchmarks/results/priors.json`, curves in `docs/priors_curves.png`.", "",
             f"Budget: {result['steps']} environment steps per run, sources {result['source_steps']} steps, seeds "
             f"{result['seeds']}, settings {result['common_settings']} on top of svg0's defaults "
             f"({result['machine']}).", "",
             "| experiment | condition | seeds | threshold | reached | steps to threshold | final train return "
             "| eval return | success fraction |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, rows in result["summary"].items():
        for label, row in rows.items():
            reached = ", ".join("-" if s is None else str(s) for s in row["steps_to_threshold"])
            success = "" if row["success_fraction"] is None else f"{row['success_fraction']:.3f}"
            lines.append(f"| {name} | {label} | {row['seeds']} | {row['threshold']:g} | "
                         f"{row['reached_threshold']}/{row['seeds']} | {reached} | "
                         f"{row['final_train_return_mean']:.1f} ± {row['final_train_return_std']:.1f} | "
                         f"{row['eval_return_mean']:.1f} ± {row['eval_return_std']:.1f} | {success} |")
    lines += ["", "Prior source runs (one seed each):", ""]
    lines += [f"- `{key}`: final train return {row['final_train_return']:.2f}, eval return {row['eval_return']:.2f}"
              for key, row in result.get("sources", {}).items()]
    lines += ["", "![curves](priors_curves.png)", ""]
    # hand-written notes below the marker survive regeneration
    old = path.read_text() if path.exists() else ""
    notes = old[old.index(NOTES_MARKER):] if NOTES_MARKER in old else NOTES_MARKER + "\n"
    path.write_text("\n".join(lines) + "\n" + notes)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=20_000, help="environment steps per compared run")
    p.add_argument("--source-steps", type=int, default=30_000, help="environment steps of the prior source runs")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--experiments", nargs="+", default=["1", "2", "3", "4"])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--workdir", type=Path, default=ROOT / "runs" / "priors_benchmark",
                   help="run directories (the source runs' priors are loaded from here)")
    p.add_argument("--output", type=Path, default=RESULTS)
    p.add_argument("--report", action="store_true",
                   help="only rebuild the summary, figure and docs table from the finished runs in --output")
    args = p.parse_args(argv)

    spec = {k: v for k, v in experiments(args.steps, args.source_steps, args.workdir).items()
            if k.split("_")[0] in args.experiments}
    header = {"command": "python benchmarks/priors.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "steps": args.steps, "source_steps": args.source_steps, "seeds": args.seeds,
              "common_settings": COMMON, "window": WINDOW, "thresholds": THRESHOLDS,
              "machine": f"{platform.processor() or platform.machine()}, {mp.cpu_count()} cores, "
                         f"{args.workers} worker processes, one torch thread each"}
    previous = json.loads(args.output.read_text()) if args.output.exists() else {}
    runs = previous.get("runs", {}) if previous.get("steps") == args.steps else {}

    sources = [(f"source|{path.name}|steps={args.source_steps}", env, 0, args.source_steps, overrides, str(path))
               for experiment in spec.values() for path, (env, overrides) in experiment.get("sources", {}).items()]
    sources = [s for s in sources if not (Path(s[5]) / "prior" / "meta.json").is_file()]
    compared = []
    for experiment in spec.values():
        for label, (env, overrides) in experiment["conditions"].items():
            for seed in args.seeds:
                key = _key(env, overrides, seed, args.steps)
                logdir = args.workdir / key.replace("|", "_").replace(",", "_").replace("=", "-")
                compared.append((key, env, seed, args.steps, overrides, str(logdir)))
    compared = list({job[0]: job for job in compared}.values())  # experiment 3 reuses experiment 1's scratch runs
    independent = [j for j in compared if "source" not in j[0].split("|")[2]]
    dependent = [j for j in compared if j not in independent]
    if not args.report:  # sources first (the dependent runs load them), then everything else
        run_jobs(_job, sources + independent, args.workers, runs, args.output, header)
        run_jobs(_job, dependent, args.workers, runs, args.output, header)
    else:
        header = {k: previous.get(k, v) for k, v in header.items()}

    sources = {key: {"env": r["env"], "overrides": r["overrides"], "steps": r["steps"], "eval_return": r["eval_return"],
                     "final_train_return": float(np.mean([v for _, v in r["curve"][-WINDOW:]])) if r["curve"] else None}
               for key, r in runs.items() if key.startswith("source|")}
    result = {**header, "summary": summarise(spec, runs, args.seeds, args.steps), "sources": sources, "runs": runs}
    write_json(args.output, result)
    plot(spec, runs, args.seeds, args.steps)
    write_docs(result)
    print(json.dumps(result["summary"], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
