"""The NPMP pipeline from the command line (seed 000 Ch 8; docs/npmp.md).

    python -m pipelines.npmp experts --steps 12000                 # tracking experts, one svg0 run per snippet, on Ray
    python -m pipelines.npmp report-experts --out runs/npmp/experts.json
    python -m pipelines.npmp collect                               # noisy rollouts + LFPC data -> runs/npmp/data.h5
    python -m pipelines.npmp distill --out data/primitives/npmp    # BC (or --scheme lfpc), beta 0.1
    python -m pipelines.npmp relabel --data D --out D2             # DAgger: primitives drive, the planner labels
    python -m pipelines.npmp law-weights --data D --out W.h5       # the LQR laws' Hessians (distill --action-weights)
    python -m pipelines.npmp merge A.h5 B.h5 --out D.h5            # collections of other snippets made elsewhere
    python -m pipelines.npmp evaluate --primitives data/primitives/npmp --out runs/npmp/report.json
    python -m pipelines.npmp half --primitives P --out P16                 # float16 weights: half the file
    python -m pipelines.npmp chain --mocap M --chain A=WALK:60,TURN --out C.h5   # chains of clips as snippets
    python -m pipelines.npmp teachers A.h5 B.h5 --mocap M --out T.h5    # planned runs without rollouts (to keep)
    python -m pipelines.npmp all --steps 12000                     # the four stages above, resumable

Every stage takes ``--address`` (a Ray cluster; default: a local one) where it fans out over snippets.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from priors.io import ModuleFileError
from agents.runlock import RunLock

ROOT = Path(__file__).resolve().parents[2]
# Snippets (data/mocap/cmu_snippets.h5) with an expert: walks, runs, and the jump-and-turn clip 01_01 (turning);
# the held-out ones get experts too (one-shot imitation is scored relative to them) but are never distilled.
TRAIN_SNIPPETS = ("07_01-0", "08_02-0", "02_01-0", "09_01-0", "16_35-0", "02_03-0", "01_01-1", "01_01-2")
HELD_OUT_SNIPPETS = ("07_02-0", "09_02-0")
# MPC experts need no training, so every shipped snippet gets one; six clips of different kinds (and their mirror
# images) are held out of distillation, the rest (56 snippets) are distilled
MPC_HELD_OUT_CLIPS = ("07_02-0", "08_04-0", "09_02-0", "16_46-0", "02_03-0", "01_01-3")
RUNS = ROOT / "runs"


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--experts-root", type=Path, default=RUNS / "experts", help="one expert run directory per snippet")
    p.add_argument("--snippets", nargs="+", help="snippets distilled into the NPMP (default: with svg0 experts "
                   f"{', '.join(TRAIN_SNIPPETS)}; with mpc experts every snippet not held out; evaluate: the "
                   "primitives' own)")
    p.add_argument("--held-out", nargs="+",
                   help="snippets never distilled (imitation of unseen clips); default: with svg0 experts "
                        f"{', '.join(HELD_OUT_SNIPPETS)}; with mpc experts {', '.join(MPC_HELD_OUT_CLIPS)} and their "
                        "mirror images; evaluate: the primitives' own")
    p.add_argument("--data", type=Path, default=RUNS / "npmp" / "data.h5")
    p.add_argument("--address", default=None, help="Ray cluster address (default: start a local one)")
    p.add_argument("--num-cpus", type=int, default=None, help="CPUs of the local Ray cluster (default: all)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--seed", type=int, default=0)


def _collect_args(p):
    p.add_argument("--experts", choices=("svg0", "mpc"), default="svg0",
                   help="svg0: the trained runs under --experts-root; mpc: plan with the simulator (agents/mpc.py), "
                        "no training needed; LFPC Jacobians from its feedback law")
    p.add_argument("--planner-set", action="append", default=[], metavar="KEY=VALUE",
                   help="MPC setting of the mpc experts (agents.mpc.MPCConfig)")
    p.add_argument("--expert-policy", choices=("plan", "lqr"), default="plan",
                   help="mpc experts: plan: the planner acts and labels; lqr: the planner runs once per snippet and "
                        "time-varying LQR gains around its run act and label (agents/lqr.py; cheap per label)")
    p.add_argument("--lqr-set", action="append", default=[], metavar="KEY=VALUE",
                   help="a setting of --expert-policy lqr (agents.lqr.LQRConfig: cost weights; follow_walker=true: "
                        "the law ignores the walker's drift from the planner's path and heading; periodic=true: on "
                        "looped snippets, the law around a limit cycle from the loop's first stride on)")
    p.add_argument("--plan-from", type=Path, nargs="+", default=None, metavar="DATA",
                   help="--expert-policy lqr: rebuild each snippet's law around the planner run saved in these data "
                        "files (earlier LQR collections with the same planner settings; the first holding the "
                        "snippet) instead of planning again; a snippet none of them holds is planned")
    p.add_argument("--branch", action="append", default=[], metavar="SNIPPET=PARENT:FRAME",
                   help="--expert-policy lqr: SNIPPET's planner run is PARENT's (saved in a --plan-from file) up to "
                        "FRAME, then planned on from there: chains that share their first frames share their "
                        "teacher there (docs/npmp.md, \"The tube a student leaves\"); their references must agree "
                        "up to FRAME")
    p.add_argument("--branch-across-settings", action="store_true",
                   help="--branch: the parents' runs may have been planned with other planner settings; each branch "
                        "takes its parent's run up to FRAME as it is and plans on with these (a run planned again "
                        "from before where its planner went wrong: docs/npmp.md, \"Teachers that lose the pace\"); "
                        "the parent's settings are kept in the run's attrs (branch_planner)")
    _ending_arg(p, "rollouts")
    p.add_argument("--trajectories", type=int, default=20,
                   help="noisy rollouts per expert (thesis: 100)")
    p.add_argument("--action-noise", type=float, default=0.1, help="std of the rollouts' action noise")
    p.add_argument("--perturbation-trajectories", type=int, default=3,
                   help="noisy rollouts per expert used to estimate the LFPC perturbation distribution")
    p.add_argument("--processes", type=int, default=None,
                   help="collect on this many local processes instead of Ray (a machine without Ray)")
    p.add_argument("--mocap", type=Path, default=None,
                   help="mpc experts: the mocap file holding the snippets (default: the shipped one), e.g. looped "
                        "walks (docs/mocap.md); stored with each snippet's data, so distil and relabel read it too")


def _ending_arg(p, what: str):
    p.add_argument("--ending", choices=("tracking", "fall"), default="tracking",
                   help=f"what ends the {what} before the clip's end: tracking: the tracking task's error (a walker "
                        "that strays from the reference's path ends upright); fall: the head dropping below 0.95 m "
                        "only (walks longer than the law's path is followed)")


def ending_options(args) -> tuple[dict | None, dict]:
    """(the tracking env's options, the meta entry) for ``--ending``: nothing for the tracking task's own."""
    return ({"ending": args.ending}, {"ending": args.ending}) if args.ending != "tracking" else (None, {})


def _distill_args(p):
    p.add_argument("--out", type=Path, default=ROOT / "data" / "primitives" / "npmp")
    p.add_argument("--scheme", choices=("bc", "lfpc"), default="bc")
    p.add_argument("--beta", type=float, default=None,
                   help="weight of the KL to the AR(1) prior (default 0.1; with --init, the initial primitives' own "
                        "unless given: a continuation may change it, the networks are kept)")
    p.add_argument("--distill-steps", type=int, default=2000)
    p.add_argument("--batch", type=int, default=64, help="BC subsequences per update (thesis: 512)")
    p.add_argument("--lr", type=float, default=1e-4, help="Adam's learning rate (thesis: 1e-4)")
    p.add_argument("--lr-schedule", choices=("constant", "cosine"), default="constant",
                   help="cosine: decay the learning rate to near 0 over the run (steadier students: docs/npmp.md)")
    p.add_argument("--windows", choices=("steps", "snippets"), default="steps",
                   help="how BC windows are drawn: uniformly over all steps, or each snippet equally often (snippets "
                        "with little data beside others with many DAgger rounds)")
    p.add_argument("--reference-mocap", type=Path, default=None,
                   help="with the reference look-ahead: read each snippet's reference from this mocap file, where it "
                        "goes on past the data's end (chains written again with more turns, so that the far states "
                        "near a chain's end show the walk going on; docs/npmp.md, \"A teacher that crouched\")")
    p.add_argument("--relabelled-weight", type=float, default=1.0,
                   help="draw the steps of the episodes DAgger rounds appended (the student's own states, relabelled "
                        "by the expert) this many times as often as the expert's rollouts (default 1: uniformly; "
                        "docs/npmp.md, \"A teacher that crouched\")")
    p.add_argument("--action-weights", type=Path, default=None, metavar="WEIGHTS",
                   help="weigh each step's action error by its LQR law's Hessian (a file of `law-weights` for "
                        "--data; bc only; pipelines/npmp/weights.py)")
    p.add_argument("--feedback-scale", type=float, default=1.0,
                   help="on LQR-law data, targets u*_t + SCALE (label - u*_t): the law's feedback scaled (bc only)")
    p.add_argument("--init", type=Path, default=None,
                   help="primitives to continue training from (e.g. after a DAgger round); their model settings win")
    p.add_argument("--latent-dim", type=int, default=60)
    p.add_argument("--lookahead", choices=("trajectory", "reference"), default=None,
                   help="what the encoder's look-ahead reads: the trajectory's own future states (the thesis) or the "
                        "clip's reference states (for experts that do not track closely; priors/npmp/model.py). "
                        "Default: reference for planner (mpc) data, where it tracked longer (docs/npmp.md), "
                        "trajectory for svg0 data")
    p.add_argument("--path-offsets", type=int, nargs="+", default=None, metavar="FRAMES",
                   help="with the reference look-ahead, also show the encoder the reference root's path: its "
                        "displacement and heading change FRAMES ahead, in the present heading (e.g. 15 30 45; "
                        "a departure from the seed for turning: docs/npmp.md). Default: none, or with --init the "
                        "initial primitives' own; initial primitives without a path are given one whose encoder "
                        "weights start at zero (they act as before until trained)")
    p.add_argument("--far-offsets", type=int, nargs="+", default=None, metavar="FRAMES",
                   help="with the reference look-ahead, also show the encoder the reference's states FRAMES ahead, "
                        "beyond the 5-frame look-ahead (e.g. 10 20 30 45 60: as far as the planner that labelled "
                        "the data looked; a departure from the seed: docs/npmp.md, \"The tube a student leaves\"). "
                        "Default and with --init as for --path-offsets")
    p.add_argument("--encoder-hidden", default="1024,1024")
    p.add_argument("--decoder-hidden", default="1024,1024,1024")
    p.add_argument("--logdir", type=Path, default=None,
                   help="TensorBoard directory of the distillation (default: <out>.tb beside the primitives, or "
                        "runs/npmp/tb/<name> for primitives inside the repo's data/)")


def parse_args(argv=None) -> argparse.Namespace:
    from pipelines.npmp import experts

    p = argparse.ArgumentParser(prog="python -m pipelines.npmp", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    experts.add_experts_parser(sub, default_snippets=[*TRAIN_SNIPPETS, *HELD_OUT_SNIPPETS])
    c = sub.add_parser("collect", help="noisy expert rollouts (BC) and nominal trajectories with Jacobians (LFPC)")
    _common(c), _collect_args(c)
    d = sub.add_parser("distill", help="train NPMP primitives on collected data")
    _common(d), _distill_args(d)
    r = sub.add_parser("relabel", help="DAgger: the primitives drive, the planner labels their states; the data "
                                       "plus these episodes -> --out")
    _common(r)
    r.add_argument("--primitives", type=Path, default=ROOT / "data" / "primitives" / "npmp")
    r.add_argument("--out", type=Path, required=True, help="the new data file (--data is left as it is)")
    r.add_argument("--trajectories", type=int, default=2, help="episodes of the primitives per snippet")
    r.add_argument("--action-noise", type=float, default=0.1, help="std of the noise on the primitives' actions")
    r.add_argument("--processes", type=int, default=None,
                   help="relabel on this many local processes instead of Ray (a machine without Ray)")
    r.add_argument("--labeller", choices=("collected", "planner", "anchored"), default="collected",
                   help="collected: the collection's own expert (the LQR law, if collected with one); planner: the "
                        "planner itself plans from every visited state (valid far from its run; 1-2 s per label), "
                        "warm-started from its plan of the step before; anchored: the same, warm-started from the "
                        "plan its own noise-free run followed at that clip time (no memory of the episode)")
    r.add_argument("--planner-set", action="append", default=[], metavar="KEY=VALUE",
                   help="--labeller planner or anchored: MPC setting (agents.mpc.MPCConfig; default: the current "
                        "defaults for planner, the collection's settings for anchored)")
    r.add_argument("--pushes", nargs=3, type=float, metavar=("EVERY", "DURATION", "SCALE"),
                   help="also push the walker during the episodes: every EVERY seconds a force on its root body for "
                        "DURATION seconds, each component drawn with std SCALE times the body's weight "
                        "(envs/perturb.py; docs/npmp.md, \"A committee of students, and what they let drift\")")
    r.add_argument("--driver", choices=("primitives", "labeller", "mixed"), default="primitives",
                   help="who drives the episodes: the primitives (DAgger), the labeller itself (with --pushes: "
                        "its own ways back from where the pushes leave it, appended like a round's episodes), or "
                        "both (mixed: each command --labeller-share of the label plus the rest of the primitives'; "
                        "DAgger's mixture policy)")
    r.add_argument("--labeller-share", type=float, default=None, metavar="BETA",
                   help="--driver mixed: the labeller's share of each executed command, in (0, 1)")
    r.add_argument("--lqr-set", action="append", default=[], metavar="KEY=VALUE",
                   help="--labeller collected on LQR data: a setting of the labelling law changed from the "
                        "collection's (agents.lqr.LQRConfig, e.g. follow_walker=true)")
    _ending_arg(r, "episodes")
    m = sub.add_parser("merge", help="one data file from collections of different snippets made with the same "
                                     "settings (e.g. on different machines)")
    m.add_argument("inputs", nargs="+", type=Path, help="data files written by collect or relabel")
    m.add_argument("--out", type=Path, required=True, help="the merged data file (the inputs are left as they are)")
    m.add_argument("--mixed-planners", action="store_true",
                   help="merge collections whose planner settings differ (e.g. before and after a new default); "
                        "each input's settings are kept in the meta")
    m.add_argument("--mixed-rounds", action="store_true",
                   help="merge collections whose sizes, action noise and DAgger rounds differ but whose labels "
                        "come from the same expert (e.g. new snippets' collection into a file after its rounds); "
                        "each input's are kept in the meta")
    m.add_argument("--mixed-laws", action="store_true",
                   help="merge LQR collections whose laws' settings differ (e.g. periodic laws on looped walks and "
                        "time-indexed ones on arcs); each snippet keeps its own law, which relabel uses")
    m.add_argument("--overlay", action="store_true",
                   help="a snippet in several inputs is taken from the first that holds it (e.g. some snippets' "
                        "parts of a DAgger round, <out>.parts/SNIPPET.h5, over the data the round started from)")
    t = sub.add_parser("teachers", help="the planner's runs of LQR collections without their rollouts (what "
                                        "collect --plan-from needs; small enough to keep in the repository)")
    t.add_argument("inputs", nargs="+", type=Path, help="LQR collections (collect --expert-policy lqr)")
    t.add_argument("--mocap", type=Path, required=True,
                   help="the mocap file the runs will name (their snippets' motion checked equal to the one planned on)")
    t.add_argument("--out", type=Path, required=True, help="the new file (the inputs are left as they are)")
    t.add_argument("--snippets", nargs="+", help="keep only these runs (default: every run of the inputs)")
    t.add_argument("--overlay", action="store_true",
                   help="a snippet planned in several inputs is taken from the first that holds it (runs planned "
                        "again, named before the file they replace)")
    e = sub.add_parser("evaluate", help="one-shot imitation and latent optimisation on training and held-out clips")
    _common(e)
    e.add_argument("--primitives", type=Path, default=ROOT / "data" / "primitives" / "npmp")
    e.add_argument("--out", type=Path, default=RUNS / "npmp" / "report.json")
    e.add_argument("--latent-iterations", type=int, default=300)
    e.add_argument("--no-write-meta", action="store_true",
                   help="do not copy the evaluation numbers into the primitives' meta.json")
    ch = sub.add_parser("chain", help="chains of clips, as a high level that chooses clips builds them, written as "
                                      "new snippets (for the planner to track and teach)")
    ch.add_argument("--mocap", type=Path, nargs="+", required=True, help="mocap files holding the clips")
    ch.add_argument("--chain", action="append", required=True, metavar="NAME=CLIP:FRAMES,CLIP[:FRAMES],...",
                    help="a chain: the first clip's first FRAMES frames, then each clip from its best entry, to its "
                         "end or for FRAMES frames (pipelines/npmp/chains.py)")
    ch.add_argument("--blend", type=int, default=0,
                    help="frames over which each join fades in (priors.npmp.reference.ReferenceChain; the high "
                         "level's --blend must be the same)")
    ch.add_argument("--out", type=Path, required=True, help="the new mocap file")
    h = sub.add_parser("half", help="a copy of primitives with 16-bit weights (half the file; for shipping)")
    w = sub.add_parser("law-weights", help="the LQR laws' Hessians of a data file's runs, as weights of the "
                                            "distillation's action error (distill --action-weights)")
    w.add_argument("--data", type=Path, required=True, help="a collection of LQR laws (collect --expert-policy lqr)")
    w.add_argument("--snippets", nargs="+", help="only these snippets (default: every one with a law's run)")
    w.add_argument("--out", type=Path, required=True, help="the weights file (the data is left as it is)")
    w.add_argument("--floor", type=float, default=None, help="least eigenvalue of a step's weights (default 0.1)")
    w.add_argument("--cap", type=float, default=None, help="largest eigenvalue of a step's weights (default 10)")
    w.add_argument("--processes", type=int, default=None, help="local worker processes instead of Ray")
    w.add_argument("--address", default=None, help="Ray cluster address (default: start a local one)")
    w.add_argument("--num-cpus", type=int, default=None, help="CPUs of the local Ray cluster (default: all)")
    h.add_argument("--primitives", type=Path, required=True)
    h.add_argument("--out", type=Path, required=True, help="the new primitives directory (must differ)")
    a = sub.add_parser("all", help="experts, collect, distill and evaluate in turn (each stage resumes or skips)")
    _common(a), _collect_args(a), _distill_args(a)
    a.add_argument("--steps", type=int, default=12_000, help="environment steps per expert")
    a.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                   help="svg0 setting of the experts (as for the experts command)")
    a.add_argument("--report", type=Path, default=RUNS / "npmp" / "report.json")
    return p.parse_args(argv)


def resolve_snippets(args) -> None:
    """Fill in the default train / held-out snippets for the kind of experts (``--experts``)."""
    from envs.mocap.tracking import snippet_ids

    if getattr(args, "experts", "svg0") == "mpc":
        held_out = args.held_out or [s for c in MPC_HELD_OUT_CLIPS for s in (c, f"{c}-mirror")]
        args.held_out = held_out
        args.snippets = args.snippets or [s for s in snippet_ids() if s not in held_out]
    else:
        args.snippets, args.held_out = args.snippets or list(TRAIN_SNIPPETS), args.held_out or list(HELD_OUT_SNIPPETS)


def collection_jobs(args) -> tuple[list, dict]:
    """One ``CollectJob`` per snippet (its part under ``<data>.parts/``, seed ``--seed`` + its index), and the
    collection's settings (the merged file's meta)."""
    import dataclasses

    from agents.config import ConfigError, apply_overrides, split_overrides
    from agents.lqr import LQRConfig
    from agents.mpc import MPCConfig
    from pipelines.npmp import data
    from pipelines.npmp.experts import check_snippets, expert_dirs

    snippets, lqr = [*args.snippets, *args.held_out], None
    mocap = str(args.mocap) if args.mocap else None
    # checked before any rollout: every part file estimates Delta from these, and a late error loses the rollouts
    if not 1 <= args.perturbation_trajectories <= args.trajectories:
        raise ConfigError(f"need 1 <= --perturbation-trajectories <= --trajectories (LFPC's perturbation "
                          f"distribution is estimated from them), got {args.perturbation_trajectories} and "
                          f"{args.trajectories}")
    if args.experts == "mpc":   # held-out clips need no data: evaluation runs closed loop from the reference
        check_snippets(args.snippets, mocap)
        check_snippets(args.held_out)
        snippets = list(args.snippets)
        settings = dataclasses.asdict(apply_overrides(MPCConfig(threads=1), split_overrides(args.planner_set)))
        sources, expert_meta = ["mpc"] * len(snippets), {"experts": "mpc", "planner": settings}
        if args.expert_policy == "lqr":
            expert_meta["lqr"] = lqr = dataclasses.asdict(apply_overrides(LQRConfig(), split_overrides(args.lqr_set)))
            if lqr["periodic"]:
                for snippet in snippets:
                    data.looped_stride_of(snippet, mocap)   # a clear error before any worker starts
        elif args.plan_from or args.lqr_set:
            raise ConfigError("--plan-from and --lqr-set need --expert-policy lqr")
        if args.plan_from:
            for path in args.plan_from:
                if not path.is_file():
                    raise ConfigError(f"no data file {path} to take the planner's runs from")
            expert_meta["plan_from"] = [_repo_relative(path) for path in args.plan_from]
        branches = parse_branches(args.branch, snippets)
        if branches and (args.expert_policy != "lqr" or not args.plan_from):
            raise ConfigError("--branch needs --expert-policy lqr and --plan-from (the file with the parents' runs)")
        if branches:
            expert_meta["branches"] = {s: list(b) for s, b in branches.items()}
        if args.branch_across_settings:
            if not branches:
                raise ConfigError("--branch-across-settings needs --branch")
            expert_meta["branch_across_settings"] = True
    else:
        if args.expert_policy != "plan":
            raise ConfigError("--expert-policy lqr needs --experts mpc (the LQR law is built around a planner's run)")
        if mocap:
            raise ConfigError("--mocap needs --experts mpc (svg0 experts were trained on the shipped snippets)")
        if args.plan_from or args.ending != "tracking" or args.branch:
            raise ConfigError("--plan-from, --branch and --ending need --experts mpc")
        settings, expert_meta, branches = None, {"experts": "svg0"}, {}
        sources = [str(d) for d in expert_dirs(args.experts_root, snippets)]
    env_options, ending_meta = ending_options(args)
    collection = {"trajectories": args.trajectories, "action_noise_std": args.action_noise,
                  "perturbation_trajectories": args.perturbation_trajectories, **expert_meta, **ending_meta}
    collection = json.loads(json.dumps(collection))   # as stored (tuples become lists)
    parts = args.data.with_suffix(".parts")
    jobs = [data.CollectJob(snippet, source, str(parts / f"{snippet}.h5"), args.seed + i, args.trajectories,
                            args.action_noise, args.perturbation_trajectories, settings,
                            {**collection, "seed": args.seed + i}, lqr, mocap,
                            tuple(map(str, args.plan_from)) if args.plan_from else None, env_options,
                            branches.get(snippet), args.branch_across_settings)
            for i, (snippet, source) in enumerate(zip(snippets, sources))]
    return jobs, {**collection, "seed": args.seed, "held_out": list(args.held_out)}


def parse_branches(specs: list[str], snippets: list[str]) -> dict[str, tuple[str, int]]:
    """``--branch SNIPPET=PARENT:FRAME`` values as {snippet: (parent, frame)}; ConfigError for a malformed one."""
    from agents.config import ConfigError

    branches = {}
    for spec in specs:
        snippet, _, rest = spec.partition("=")
        parent, _, frame = rest.rpartition(":")
        if not (snippet and parent and frame.isdigit() and int(frame) >= 1):
            raise ConfigError(f"--branch {spec}: expected SNIPPET=PARENT:FRAME with FRAME a whole number >= 1")
        if snippet not in snippets or snippet == parent or snippet in branches:
            raise ConfigError(f"--branch {spec}: {snippet} must be one of the collected snippets (once), and not "
                              "its own parent")
        branches[snippet] = (parent, int(frame))
    return branches


def collect(args) -> Path:
    """Collect every snippet into its own part file under ``<data>.parts/`` (kept: a rerun collects only the
    snippets still missing), then merge the parts into ``--data``."""
    from pipelines.npmp import data

    jobs, meta = collection_jobs(args)
    with RunLock(args.data.with_suffix(".parts")):   # one collector per data file
        _run_parts(args, data.run_collect_job, jobs, args.data.with_suffix(".parts"), "collect")
        return data.merge_parts([job.path for job in jobs], args.data, meta=meta)


def _run_parts(args, run, jobs: list, parts: Path, verb: str) -> None:
    """Run the jobs whose part file is not there yet (the shortest snippets first: a stopped run has the most
    snippets), fanned out on Ray or ``--processes``; finished parts are kept whatever happens."""
    from agents.config import ConfigError
    from cluster.fanout import FanOutError, fan_out
    from envs.mocap.tracking import DEFAULT_OUTPUT, snippet_frames
    from pipelines.npmp import data

    todo = sorted((job for job in jobs if not data.finished_part(job)),
                  key=lambda job: snippet_frames(job.snippet, job.mocap or DEFAULT_OUTPUT))
    if len(todo) < len(jobs):
        print(f"{len(jobs) - len(todo)} of {len(jobs)} snippets already {verb}ed in {parts}", file=sys.stderr)
    try:
        fan_out(run, todo, address=args.address, num_cpus=args.num_cpus, processes=args.processes,
                label=lambda job: job.snippet)
    except FanOutError as e:
        raise ConfigError(f"{e}; the finished snippets are kept in {parts}: rerun the same command to {verb} "
                          "the rest") from None


def _common_or_each(laws: dict[str, dict]) -> dict:
    """The one law's settings every snippet shares, or each snippet's (a merge of collections with other laws)."""
    first = next(iter(laws.values()))
    return first if all(law == first for law in laws.values()) else laws


def relabel(args) -> Path:
    """One DAgger round on planner data: every snippet the primitives were distilled on (or ``--snippets``) gets
    ``--trajectories`` episodes driven by the primitives and labelled by the planner, one part per snippet under
    ``<out>.parts/`` (resumable like ``collect``); then the data with those episodes appended -> ``--out``."""
    import dataclasses

    from agents.config import ConfigError, apply_overrides, split_overrides
    from agents.lqr import LQRConfig
    from agents.mpc import MPCConfig
    from pipelines.npmp import data
    from priors.npmp import load_primitives

    if args.out.resolve() == args.data.resolve():
        raise ConfigError("--out must differ from --data (the collected data is kept as it is)")
    base_meta = data.read_meta(args.data)
    if base_meta.get("experts") != "mpc":
        raise ConfigError(f"{args.data} was not collected from planner experts (collect --experts mpc): only a "
                          "planner can label the states the primitives visit")
    available = data.read_snippets(args.data)
    labeller_share = driver_share(args)
    labeller_drives = labeller_share == 1.0
    if labeller_drives:   # no primitives drive: every snippet of the data unless told
        snippets = args.snippets or list(available)
    else:
        _, primitives_meta = load_primitives(args.primitives)
        snippets = args.snippets or [s for s in primitives_meta.get("clips", []) if s in available]
    missing = sorted(set(snippets) - set(available))
    if missing or not snippets:
        raise ConfigError(f"snippets {missing or snippets} are not in {args.data} (it has {available})")
    settings, laws = base_meta.get("planner"), data.read_laws(args.data)   # per snippet: merge --mixed-laws
    laws = {s: laws[s] for s in snippets}
    if args.labeller == "planner":
        settings = dataclasses.asdict(apply_overrides(MPCConfig(threads=1), split_overrides(args.planner_set)))
        laws = dict.fromkeys(snippets)
    elif args.labeller == "anchored":   # the collection's planner made the runs it is anchored to
        settings = dataclasses.asdict(apply_overrides(MPCConfig(**{"threads": 1, **(settings or {})}),
                                                      split_overrides(args.planner_set)))
        laws = dict.fromkeys(snippets)
    elif args.planner_set:
        raise ConfigError("--planner-set needs --labeller planner or anchored (the collected expert keeps its own "
                          "settings)")
    if args.lqr_set:
        if args.labeller != "collected" or None in laws.values():
            raise ConfigError("--lqr-set needs --labeller collected on data collected with --expert-policy lqr")
        laws = {s: dataclasses.asdict(apply_overrides(LQRConfig(**law), split_overrides(args.lqr_set)))
                for s, law in laws.items()}
    mocaps = data.read_mocaps(args.data)
    for snippet, law in laws.items():
        if law and law.get("periodic"):
            data.looped_stride_of(snippet, mocaps[snippet])
    env_options, ending_meta = ending_options(args)
    if labeller_share and args.labeller != "collected":
        raise ConfigError(f"--driver {args.driver} needs --labeller collected (a planner driving is what collect "
                          "does)")
    pushes = None
    if args.pushes:
        pushes = dict(zip(("push_every", "push_duration", "push_scale"), args.pushes))
        data.pushes_model(pushes)   # a clear error before any worker starts
    round_meta = {"primitives": None if labeller_drives else _repo_relative(args.primitives),
                  "snippets": snippets,
                  "trajectories": args.trajectories,
                  "action_noise_std": args.action_noise, "seed": args.seed,
                  **({"labeller": args.labeller, "planner": settings} if args.labeller != "collected" else {}),
                  **({"lqr": _common_or_each(laws)} if args.lqr_set else {}),
                  **({"pushes": pushes} if pushes else {}),
                  **({"driver": args.driver} if args.driver != "primitives" else {}),
                  **({"labeller_share": labeller_share} if args.driver == "mixed" else {}), **ending_meta}
    meta = {**base_meta, "relabelled": [*base_meta.get("relabelled", []), round_meta]}
    parts = args.out.with_suffix(".parts")
    jobs = [data.RelabelJob(s, str(args.data), str(args.primitives), str(parts / f"{s}.h5"), args.seed + i,
                            args.trajectories, args.action_noise, settings, meta, laws[s], mocaps[s],
                            args.labeller == "anchored", env_options, pushes, labeller_share)
            for i, s in enumerate(snippets)]
    with RunLock(parts):
        _run_parts(args, data.run_relabel_job, jobs, parts, "relabel")
        unchanged = [r for r in data.read_results(args.data)[0] if r["snippet"] not in snippets]
        relabelled = [r for job in jobs for r in data.read_results(job.path)[0]]
        path = data.write_dataset(args.out, [*relabelled, *unchanged], meta=meta)
    print(f"relabelled data written to {path}")
    return path


def driver_share(args) -> float:
    """The labeller's share of the executed commands that ``relabel --driver`` asks for: 0 (the primitives drive),
    1 (the labeller) or ``--labeller-share`` (mixed)."""
    from agents.config import ConfigError

    if args.driver != "mixed":
        if args.labeller_share is not None:
            raise ConfigError("--labeller-share needs --driver mixed")
        return 1.0 if args.driver == "labeller" else 0.0
    if args.labeller_share is None or not 0.0 < args.labeller_share < 1.0:
        raise ConfigError(f"--driver mixed needs --labeller-share in (0, 1), got {args.labeller_share}")
    return float(args.labeller_share)


def distill(args) -> Path:
    import dataclasses

    from agents.config import ConfigError
    from priors.npmp import NPMPConfig
    from pipelines.npmp.data import NPMPDataset, read_meta, snippet_mocap
    from pipelines.npmp.distill import DistillConfig, distill as run

    if not args.data.is_file():
        raise ModuleFileError(f"no NPMP data at {args.data} (run `python -m pipelines.npmp collect`)")
    if not args.relabelled_weight > 0:   # before the data is read
        raise ConfigError(f"--relabelled-weight must be > 0, got {args.relabelled_weight}")
    if args.beta is not None and not args.beta >= 0:
        raise ConfigError(f"--beta must be >= 0, got {args.beta}")
    if args.snippets is None or args.held_out is None:   # the split the data was collected with
        collected = NPMPDataset(args.data)
        args.held_out = args.held_out if args.held_out is not None else list(collected.meta.get("held_out", []))
        args.snippets = args.snippets or [s for s in collected.snippets if s not in args.held_out]
    if args.lookahead is None:
        args.lookahead = "reference" if read_meta(args.data).get("experts") == "mpc" else "trajectory"
    initial, provenance, init_meta = None, {}, None
    if args.init is not None:
        from priors.npmp import load_primitives

        initial, init_meta = load_primitives(args.init)
        for name, flag in (("path_offsets", "--path-offsets"), ("far_offsets", "--far-offsets")):
            given, own = getattr(args, name), getattr(initial.config, name)
            if given is not None and own and tuple(given) != own:
                raise ConfigError(f"{args.init} reads the reference at {name} {own}; --init continues it with its "
                                  f"own settings, so {flag} {' '.join(map(str, given))} cannot apply (distil afresh "
                                  f"without --init)")
            if given is None:
                setattr(args, name, own)
    path_offsets, far_offsets = tuple(args.path_offsets or ()), tuple(args.far_offsets or ())
    try:
        NPMPConfig(state_dim=1, action_dim=1, lookahead_source=args.lookahead, path_offsets=path_offsets,
                   far_offsets=far_offsets).validate()
    except ValueError as e:
        raise ConfigError(f"--path-offsets / --far-offsets: {e}") from None
    if args.reference_mocap is not None and not args.reference_mocap.is_file():
        raise ConfigError(f"no mocap file {args.reference_mocap} (--reference-mocap)")
    weights = None
    if args.action_weights is not None:
        from pipelines.npmp.weights import read_law_weights

        if args.scheme != "bc":
            raise ConfigError("--action-weights weighs the BC rollouts' labels (--scheme bc)")
        weights = read_law_weights(args.action_weights, args.data, args.snippets)
    dataset = NPMPDataset(args.data, snippets=args.snippets, lookahead_source=args.lookahead,
                          path_offsets=path_offsets, far_offsets=far_offsets, reference_mocap=args.reference_mocap,
                          action_weights=weights)
    if initial is not None:
        model_config = initial.config
        if model_config.lookahead_source != args.lookahead or model_config.state_dim != dataset.state_dim:
            raise ConfigError(f"{args.init} reads a {model_config.lookahead_source} look-ahead of "
                              f"{model_config.state_dim} states; {args.data} gives {args.lookahead} and "
                              f"{dataset.state_dim}")
        # the meta's own "distill" is this run's; what the primitives went through before is kept beside it
        provenance = {"continued_from": {"path": _repo_relative(args.init), "data": init_meta.get("data"),
                                         "distill": init_meta.get("distill"),
                                         "continued_from": init_meta.get("continued_from")}}
        # primitives without a path or far states are given them (acting as before)
        if path_offsets != model_config.path_offsets:
            initial = initial.with_path(path_offsets, dataset.path_table)
            provenance["path_added"] = list(path_offsets)
        if far_offsets != initial.config.far_offsets:
            initial = initial.with_far(far_offsets)
            provenance["far_added"] = list(far_offsets)
        if args.beta is not None and args.beta != initial.config.beta:
            # beta weighs the loss only: the networks continue as they are under the new objective
            provenance["beta_changed"] = [initial.config.beta, args.beta]
            initial.config = dataclasses.replace(initial.config, beta=args.beta)
        model_config = initial.config
        initial.requires_grad_(True)
    else:
        model_config = NPMPConfig(state_dim=dataset.state_dim, action_dim=dataset.action_dim,
                                  latent_dim=args.latent_dim, encoder_hidden=_widths(args.encoder_hidden),
                                  decoder_hidden=_widths(args.decoder_hidden),
                                  beta=0.1 if args.beta is None else args.beta,
                                  lookahead_source=args.lookahead, path_offsets=path_offsets,
                                  far_offsets=far_offsets)
    config = DistillConfig(scheme=args.scheme, steps=args.distill_steps, batch=args.batch, lr=args.lr,
                           lr_schedule=args.lr_schedule, windows=args.windows,
                           relabelled_weight=args.relabelled_weight, feedback_scale=args.feedback_scale,
                           seed=args.seed)
    if args.feedback_scale != 1.0:
        dataset.law_commands()   # data without a time-indexed law's run: an error before anything is written
    # clips of another mocap file than the shipped one (looped walks): evaluate reads their reference there
    mocaps = {s: m for s in dataset.snippets if (m := snippet_mocap(dataset.attrs[s]))}
    # one distillation per primitives directory; the lock lies beside it, since saving replaces the directory
    with RunLock(args.out, lock_file=args.out.with_name(f".{args.out.name}.lock")):
        run(dataset, args.out, model_config, config, {"proprio": dataset.state_dim}, device=args.device,
            meta={"held_out": list(args.held_out), "data": _repo_relative(args.data), "collection": dataset.meta,
                  **provenance, **({"mocap": mocaps} if mocaps else {}),
                  **({"reference_mocap": _repo_relative(args.reference_mocap)} if args.reference_mocap else {}),
                  **({"action_weights": _repo_relative(args.action_weights)} if args.action_weights else {})},
            logdir=args.logdir or _shipped_logdir(Path(args.out)), initial=initial)
    print(f"primitives written to {args.out}")
    return args.out


def law_weights(args) -> Path:
    """The weights file of ``--data``'s LQR laws (pipelines/npmp/weights.py), one worker per snippet."""
    import numpy as np

    from agents.config import ConfigError
    from cluster.fanout import FanOutError, fan_out
    from pipelines.npmp import data, weights

    if args.out.resolve() == args.data.resolve():
        raise ConfigError("--out must differ from --data (the collected data is kept as it is)")
    laws = data.read_laws(args.data)
    snippets = args.snippets or [s for s, law in laws.items() if law is not None]
    unknown = sorted(set(snippets) - set(laws))
    if unknown or not snippets:
        raise ConfigError(f"snippets {unknown or snippets} are not in {args.data} (it has {sorted(laws)})")
    floor = weights.FLOOR if args.floor is None else args.floor
    cap = weights.CAP if args.cap is None else args.cap
    weights.action_weights(np.eye(2)[None], floor, cap)   # a clear error before any worker starts
    jobs = [weights.LawWeightsJob(s, str(args.data), floor, cap) for s in snippets]
    try:
        results = fan_out(weights.run_law_weights_job, jobs, address=args.address, num_cpus=args.num_cpus,
                          processes=args.processes, label=lambda job: job.snippet)
    except FanOutError as e:
        raise ConfigError(str(e)) from None
    path = weights.write_law_weights(args.out, _repo_relative(args.data), results, floor, cap)
    print(f"the laws' weights of {len(results)} snippets written to {path}")
    return path


def _repo_relative(path: Path) -> str:
    path = Path(path).resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def _shipped_logdir(out: Path) -> Path | None:
    """Distillation logs of primitives written into data/ (shipped) go to runs/, which git ignores."""
    return RUNS / "npmp" / "tb" / out.name if out.resolve().is_relative_to(ROOT / "data") else None


def _widths(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(w) for w in str(text).split(","))
    except ValueError:
        raise ModuleFileError(f"layer widths must be comma-separated integers, got {text!r}") from None


def half(args) -> Path:
    """``--primitives`` with float16 weights -> ``--out``: the same meta (evaluation numbers included, to be measured
    again on the copy), plus ``weights_dtype`` and the checksum of the float32 file it came from."""
    import torch

    from agents.config import ConfigError
    from priors.npmp import load_primitives, save_primitives

    if args.out.resolve() == args.primitives.resolve():
        raise ConfigError("--out must differ from --primitives (the float32 primitives are kept as they are)")
    model, meta = load_primitives(args.primitives)
    kept = {k: v for k, v in meta.items() if k not in ("format", "version", "sha256", "config", "obs_groups")}
    source = meta["sha256"]["weights.safetensors"]
    out = save_primitives(model, args.out, meta["obs_groups"], dtype=torch.float16,
                          **{**kept, "halved_from_sha256": source})
    print(f"primitives with float16 weights written to {out}")
    return out


def evaluate(args) -> dict:
    """Absolute closed-loop imitation of every train and held-out clip from the reference (no experts needed); with
    expert runs under --experts-root (svg0 experts), or else the experts' nominal trajectories in --data (planner
    experts), also the seed's expert-relative one-shot imitation and the latent-optimisation diagnostic."""
    import torch

    from priors.npmp import load_primitives, save_primitives
    from pipelines.npmp.data import Expert, NPMPDataset, expert_rollout
    from pipelines.npmp.evaluate import evaluate_clip, imitate_reference, summarise, summarise_absolute
    from pipelines.npmp.experts import check_snippets, expert_dirs

    torch.set_num_threads(1)
    model, meta = load_primitives(args.primitives, args.device)
    splits = {"train": args.snippets or meta.get("clips") or list(TRAIN_SNIPPETS),
              "held_out": args.held_out or meta.get("held_out") or list(HELD_OUT_SNIPPETS)}
    mocaps = meta.get("mocap", {})   # clips of another mocap file than the shipped one (distill records them)
    for path in {mocaps.get(s) for s in [*splits["train"], *splits["held_out"]]}:
        check_snippets([s for s in [*splits["train"], *splits["held_out"]] if mocaps.get(s) == path], path)
    with_experts = args.experts_root.is_dir() and any(args.experts_root.iterdir())
    collected = None if with_experts or not args.data.is_file() else NPMPDataset(args.data)
    report = {"primitives": str(args.primitives), "beta": model.config.beta, "distill_steps": meta.get("steps"),
              "scheme": (meta.get("distill") or {}).get("scheme")}
    for split, snippets in splits.items():
        absolute = []
        for snippet in snippets:
            result = imitate_reference(model, snippet, args.seed, mocaps.get(snippet))
            print(f"{split} {snippet}: primitives {result['steps']}/{result['full_steps']} steps, "
                  f"{result['reward_per_step']:.2f} per step; feed-forward {result['feed_forward_steps']} steps, "
                  f"{result['feed_forward_reward_per_step']:.2f} per step", flush=True)
            absolute.append(result)
        report[split] = {"absolute": absolute, "absolute_summary": summarise_absolute(absolute)}
        if with_experts:
            trajectories = {d.name: expert_rollout(Expert(d), seed=args.seed)
                            for d in expert_dirs(args.experts_root, snippets)}
        else:   # the experts' nominal trajectories stored in the data (planner experts), where it has them
            trajectories = {s: collected.trajectory(s) for s in snippets if collected and s in collected.snippets}
        if trajectories:
            relative = [evaluate_clip(model, t, s, args.latent_iterations, args.seed, mocaps.get(s))
                        for s, t in trajectories.items()]
            report[split].update(clips=relative, summary=summarise(relative))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    summaries = {split: {k: v for k, v in report[split].items() if k.endswith("summary")} for split in splits}
    if not args.no_write_meta:
        save_primitives(model, args.primitives, meta["obs_groups"],
                        **{k: v for k, v in meta.items() if k not in ("format", "version", "sha256", "config",
                                                                      "obs_groups", "evaluation")},
                        evaluation=summaries)
    print(json.dumps(summaries, indent=1))
    return report


def main(argv=None) -> int:
    from agents.config import ConfigError
    from envs import EnvError
    from cluster.fanout import FanOutError
    from agents.runlock import RunDirectoryBusy

    args = parse_args(argv)
    try:
        if args.command in ("experts", "report-experts"):
            from pipelines.npmp.experts import run_experts

            return run_experts(args)
        if args.command in ("collect", "all"):
            resolve_snippets(args)
        if args.command == "collect":
            collect(args)
        elif args.command == "relabel":
            relabel(args)
        elif args.command == "distill":
            distill(args)
        elif args.command == "merge":
            from pipelines.npmp.data import merge_datasets

            merged = merge_datasets(args.inputs, args.out, mixed_planners=args.mixed_planners,
                                    mixed_rounds=args.mixed_rounds, mixed_laws=args.mixed_laws,
                                    overlay=args.overlay)
            print(f"merged {len(args.inputs)} files into {merged}")
        elif args.command == "teachers":
            from pipelines.npmp.data import teacher_runs

            if args.out.resolve() in {p.resolve() for p in args.inputs}:
                raise ConfigError(f"--out {args.out} is one of the inputs; write the runs to a new file")
            written = teacher_runs(args.inputs, args.out, args.mocap, args.snippets, args.overlay)
            print(f"wrote the planner's runs of {len(args.inputs)} files to {written} "
                  f"({written.stat().st_size / 1e6:.1f} MB)")
        elif args.command == "evaluate":
            evaluate(args)
        elif args.command == "chain":
            from pipelines.npmp.chains import write_chains

            if args.blend < 0:
                raise ConfigError(f"--blend must be >= 0 frames, got {args.blend}")
            write_chains(args.mocap, args.chain, args.out, args.blend)
            print(f"wrote {len(args.chain)} chains to {args.out}")
        elif args.command == "half":
            half(args)
        elif args.command == "law-weights":
            law_weights(args)
        elif args.command == "all":
            from pipelines.npmp.experts import train_experts

            if args.experts == "svg0":
                train_experts([*args.snippets, *args.held_out], args.experts_root, args.steps, address=args.address,
                              num_cpus=args.num_cpus, seed=args.seed, overrides=args.overrides)
            if not args.data.is_file():
                collect(args)
            if not (args.out / "meta.json").is_file():
                distill(args)
            args.primitives, args.out, args.latent_iterations, args.no_write_meta = args.out, args.report, 300, False
            evaluate(args)
    except (ModuleFileError, ConfigError, EnvError, FileNotFoundError, ValueError, FanOutError,
            RunDirectoryBusy) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
