"""Where does a student leave its teacher? (issue 13; docs/npmp.md, "The tube a student leaves").

A student distilled from an LQR law (``collect --expert-policy lqr``) saw the law's noisy rollouts only: states in a
tube around the law's noise-free run. This measures, per snippet, how wide that tube is and how soon the student,
driving closed loop from the clip's first frame, leaves it:
- the tube: at every frame, the median and 90th percentile over the collection's noisy rollouts of their distance
  from the law's noise-free run (``nominal``);
- the student: its distance from the same noise-free run at every frame, the frame from which it stays above the
  tube's 90th percentile (``leaves_at``: the first of ``--stay`` frames in a row outside it), and the steps before
  its head drops below the fall line (``upright``, as ``npmp_noise.py``);
- ``label_error``: the squared difference per action dimension between the student's command and the law's label at
  the student's own states (what a DAgger round would teach there), in the tube and after leaving it;
- with ``--handover K ...``: the law takes over from the student at frame K of the same run (``handovers``: the
  student's distance from the run there, and the steps upright and whether the law then walks to the end). A DAgger
  round labels the student's states with the law; where the law itself cannot recover from them, its labels there
  teach no way back. With ``--handover-by planner`` the collection's planner takes over instead (it plans from the
  state it finds: about 1.8 s per step here).
With ``--groups`` it reads the DAgger rounds' episodes already in the data file (the students' own states, no
student is run) and tells, per observation group of the proprioceptive state (joint angles, body height, the
velocimeter, ...), how far they and the law's own noisy rollouts lie from the law's noise-free run, per bin of
``--every`` frames (``groups``: medians over the snippets' episodes): which parts of the body's state a student lets
drift where the law holds them (docs/npmp.md, "A committee of students, and what they let drift").
With ``--laws`` it reports how many of each law's noisy rollouts in the collection reach the snippet's end
(``laws``: rollouts, to the end, median steps, the steps of the falls and, on chains, each fall's offset from
the nearest join). With ``--nominals`` it also compares the laws' noise-free runs of
the snippets with one another, bin by bin over their common frames (``nominal_gaps``): chains that share their first
frames but whose teachers part there give a student two labels for what it reads alike.
Distances are root-mean-square over the proprioceptive state's dimensions, each divided by its spread over the
collection (so angles and velocities weigh alike). The law is rebuilt from the planner's run stored in the data file
(nothing is planned again).

    python benchmarks/npmp_tube.py --data runs/same2/lqr_chains.h5 --mocap runs/same2/chains.h5 \\
        --primitives runs/same2/p0_s1 --snippets pairE pairF

Results are kept per primitives and snippet (and the data file's tube): a rerun measures only what the file lacks.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.runs import fail, resumed_results, save_results  # noqa: E402


def tube(dataset, snippet: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(nominal states [T+1, S], per-dimension spread [S], median and 90th-percentile distance [T+1] of the
    collection's noisy rollouts from the nominal; nan where no rollout lasts that long)."""
    nominal = dataset.trajectory(snippet, "nominal", 0)["states"]
    rollouts = [rollout["states"] for rollout in law_rollouts(dataset, snippet)]
    spread = np.maximum(np.concatenate([nominal, *rollouts]).std(0), 1e-2)
    distances = np.full((len(rollouts), len(nominal)), np.nan)
    for row, states in zip(distances, rollouts):
        n = min(len(states), len(nominal))
        row[:n] = distance(states[:n], nominal[:n], spread)
    with np.errstate(all="ignore"):   # frames that no rollout reached stay nan
        return nominal, spread, np.nanmedian(distances, 0), np.nanpercentile(distances, 90, 0)


def distance(states: np.ndarray, nominal: np.ndarray, spread: np.ndarray) -> np.ndarray:
    return np.sqrt((((states - nominal) / spread) ** 2).mean(-1))


def law_rollouts(dataset, snippet: str) -> list[dict]:
    """The law's noisy rollouts of ``snippet`` as collected (the DAgger rounds' episodes after them left out)."""
    return [dataset.trajectory(snippet, "bc", i) for i in range(int(dataset.attrs[snippet]["trajectories"]))]


def law_endings(dataset, snippet: str, joins: list[int] | None = None) -> dict:
    """How the law's noisy rollouts in the collection end: how many, how many reach the snippet's end (as long as
    the noise-free run), their median steps and the steps at which the others fell. With a chain's ``joins``
    (``pipelines.npmp.chains.chain_joins``) also each fall's offset from the nearest join (negative: before it)."""
    frames = len(dataset.trajectory(snippet, "nominal", 0)["actions"])
    steps = [len(rollout["actions"]) for rollout in law_rollouts(dataset, snippet)]
    falls = sorted(n for n in steps if n < frames)
    endings = {"frames": frames, "rollouts": len(steps), "to_the_end": len(steps) - len(falls),
               "median_steps": float(np.median(steps)), "falls": falls}
    if joins:
        endings["joins"] = list(joins)
        endings["falls_from_join"] = [n - min(joins, key=lambda j: abs(j - n)) for n in falls]
    return endings


def nominal_gaps(dataset, snippets: list[str], every: int) -> dict:
    """For each pair of ``snippets``: per bin of ``every`` frames over their common frames, the distance between the
    laws' noise-free runs (spread as in ``tube``, over both) and the mean squared difference of their labels per
    action dimension."""
    runs = {s: dataset.trajectory(s, "nominal", 0) for s in snippets}
    gaps = {}
    for i, a in enumerate(snippets):
        for b in snippets[i + 1:]:
            n = min(len(runs[a]["mean_actions"]), len(runs[b]["mean_actions"]))
            spread = np.maximum(np.concatenate([runs[a]["states"], runs[b]["states"]]).std(0), 1e-2)
            apart = distance(runs[a]["states"][:n], runs[b]["states"][:n], spread)
            labels = ((runs[a]["mean_actions"][:n] - runs[b]["mean_actions"][:n]) ** 2).mean(1)
            gaps[f"{a} / {b}"] = {"every": every, "state_distance": binned(apart, every),
                                  "label_difference": binned(labels, every)}
    return gaps


def group_drift(dataset, snippets: list[str], groups: dict[str, slice], every: int) -> dict:
    """Per observation group (``groups``: name -> its slice of the proprio state), the median over episodes of
    each bin's mean distance from the law's noise-free run (spread as in ``tube``), for the law's noisy rollouts
    (``law``) and for the episodes the DAgger rounds appended (``rounds``), pooled over ``snippets``."""
    bins = {"law": {g: {} for g in groups}, "rounds": {g: {} for g in groups}}
    count = {"law": 0, "rounds": 0}
    for snippet in snippets:
        nominal, spread, _, _ = tube(dataset, snippet)
        collected = int(dataset.attrs[snippet]["trajectories"])
        for i in range(dataset.bc_trajectories(snippet)):
            who = "law" if i < collected else "rounds"
            states = dataset.trajectory(snippet, "bc", i)["states"]
            n = min(len(states), len(nominal))
            count[who] += 1
            for name, part in groups.items():
                apart = distance(states[:n, part], nominal[:n, part], spread[part])
                for k in range(0, n, every):
                    bins[who][name].setdefault(k, []).append(float(apart[k:k + every].mean()))
    return {"every": every, "episodes": count,
            **{who: {name: [round(float(np.median(per[k])), 3) for k in sorted(per)] for name, per in rows.items()}
               for who, rows in bins.items()}}


def binned(x: np.ndarray, every: int) -> list[float]:
    return [round(float(np.nanmean(x[k:k + every])), 4) for k in range(0, len(x), every)]


def leaves_at(student: np.ndarray, limit: np.ndarray, stay: int) -> int | None:
    """The first frame of ``stay`` frames in a row with the student's distance above the tube's ``limit``."""
    outside = student > np.nan_to_num(limit, nan=np.inf)
    for t in range(len(outside) - stay + 1):
        if outside[t:t + stay].all():
            return t
    return None


def student_episode(expert, env, actor, noise: float, seed: int, handover: int | None = None,
                    by_planner: bool = False) -> dict:
    """The student drives from the clip's first frame (until step ``handover``, when the law, or with
    ``by_planner`` the planner, takes over); the law labels every state visited. Returns the proprioceptive states
    [T+1, S], the commands and labels [T, A] and the steps upright."""
    from benchmarks.npmp_long import Upright

    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=0)
    expert.begin_episode()
    upright, states, commands, labels = Upright(), [], [], []
    upright(env, 0)
    while upright.fell_at is None:
        state = expert.layout.flatten(obs)[expert.proprio]
        states.append(state)
        labels.append(expert.mean_command(None))
        if handover is None or len(commands) < handover:
            command = actor(len(commands), state)
        elif by_planner:
            if len(commands) == handover:
                expert.planner.reset()   # no warm start from a run it did not plan
            command = expert.planner.act()
        else:
            command = labels[-1]
        if noise:
            command = np.clip(command + noise * rng.standard_normal(command.shape), -1.0, 1.0)
        commands.append(command)
        obs, _, terminated, truncated, _ = env.step(expert.env_action(command))
        upright(env, len(commands))
        if terminated or truncated:
            break
    states.append(expert.layout.flatten(obs)[expert.proprio])
    return {"states": np.asarray(states), "commands": np.asarray(commands), "labels": np.asarray(labels),
            "upright": upright.summary()["steps"]}


def measure(dataset, data: Path, mocap: Path, primitives: Path, snippet: str, noise: float, stay: int,
            every: int, handovers: tuple[int, ...] = (), by_planner: bool = False) -> dict:
    from benchmarks.npmp_noise import law_expert
    from pipelines.npmp.evaluate import primitives_actor, reference_playback
    from priors.npmp import load_primitives

    nominal, spread, median, p90 = tube(dataset, snippet)
    model, _ = load_primitives(primitives)
    expert, env = law_expert(data, snippet, mocap)
    try:
        actor = primitives_actor(model, snippet, 0, str(mocap), reference_playback(snippet, 0, str(mocap)))
        run = student_episode(expert, env, actor, noise, seed=0)
        taken = {k: student_episode(expert, env, actor, noise, seed=0, handover=k, by_planner=by_planner)["upright"]
                 for k in handovers if k < run["upright"]}
    finally:
        env.close()
    n = min(len(run["states"]), len(nominal))
    apart = distance(run["states"][:n], nominal[:n], spread)
    left = leaves_at(apart, p90[:n], stay)
    error = ((run["commands"] - run["labels"]) ** 2).mean(1)
    inside, outside = error[:left if left is not None else len(error)], error[left:] if left is not None else []
    return {"frames": len(nominal) - 1, "upright": run["upright"], "leaves_at": left, "noise": noise,
            "label_error_inside": round(float(np.mean(inside)), 5) if len(inside) else None,
            "label_error_outside": round(float(np.mean(outside)), 5) if len(outside) else None,
            "every": every, "student_distance": binned(apart, every), "tube_median": binned(median[:n], every),
            "tube_p90": binned(p90[:n], every), "label_error": binned(error, every),
            "handovers": [{"at": k, "distance": round(float(apart[k]), 4), "upright": steps,
                           "to_end": steps >= len(nominal) - 1} for k, steps in taken.items()]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, required=True, help="a data file collected with --expert-policy lqr")
    p.add_argument("--mocap", type=Path, required=True, help="the mocap file holding the snippets")
    p.add_argument("--primitives", type=Path, nargs="*", default=[])
    p.add_argument("--nominals", action="store_true", help="also compare the snippets' noise-free runs pairwise")
    p.add_argument("--laws", action="store_true", help="also count the laws' noisy rollouts that reach the end")
    p.add_argument("--groups", action="store_true",
                   help="also tell, per observation group, how far the data's DAgger episodes and the law's rollouts "
                        "lie from the law's run (module docstring)")
    p.add_argument("--snippets", nargs="+", required=True)
    p.add_argument("--noise", type=float, default=0.0, help="action noise on the student's commands")
    p.add_argument("--stay", type=int, default=3, help="frames in a row outside the tube that count as leaving it")
    p.add_argument("--every", type=int, default=10, help="frames per bin in the stored per-frame lists")
    p.add_argument("--handover", type=int, nargs="*", default=[], metavar="K",
                   help="frames at which the law takes over from the student, each in a run of its own")
    p.add_argument("--handover-by", choices=("law", "planner"), default="law",
                   help="who takes over: the law, or the collection's planner (slow: it plans every step)")
    p.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results" / "npmp_tube.json")
    args = p.parse_args(argv)

    import torch

    from envs import EnvError
    from pipelines.npmp.chains import chain_joins
    from pipelines.npmp.data import ConfigError, NPMPDataset
    from priors.npmp import ModuleFileError

    torch.set_num_threads(1)
    if not args.noise >= 0 or args.stay < 1 or args.every < 1 or any(k < 0 for k in args.handover):
        fail("--noise and --handover must be >= 0, --stay and --every >= 1")
    if args.handover_by == "planner" and not args.handover:
        fail("--handover-by planner needs --handover K ... (the frames at which the planner takes over)")
    for path in (args.data, args.mocap):
        if not path.is_file():
            fail(f"no such file: {path}")
    try:
        dataset = NPMPDataset(args.data, snippets=args.snippets)
    except ConfigError as e:
        fail(str(e))
    if not args.primitives and not args.nominals and not args.laws and not args.groups:
        fail("nothing to measure: give --primitives, --nominals, --laws and/or --groups")
    results = resumed_results(args.results, Path(__file__).name, argv, mocap=str(args.mocap))
    if args.nominals:
        gaps = results.setdefault("nominals", {}).setdefault(str(args.data), {})
        gaps.update(nominal_gaps(dataset, args.snippets, args.every))
        save_results(args.results, results)
        for pair, gap in gaps.items():
            print(f"{args.data}: {pair}: noise-free runs apart by {gap['state_distance'][:6]} ..., labels by "
                  f"{gap['label_difference'][:6]} ... (per {gap['every']} frames)")
    if args.laws:
        laws = results.setdefault("laws", {}).setdefault(str(args.data), {})
        try:
            joins = chain_joins(args.mocap)
        except OSError as e:
            fail(f"{args.mocap}: {str(e).splitlines()[0]}")
        laws.update({snippet: law_endings(dataset, snippet, joins.get(snippet)) for snippet in args.snippets})
        save_results(args.results, results)
        for snippet in args.snippets:
            law = laws[snippet]
            near = (f"; from the nearest of the joins {law['joins']}: {law['falls_from_join']}"
                    if "joins" in law else "")
            print(f"{args.data}: {snippet}: {law['to_the_end']} of {law['rollouts']} rollouts to the end "
                  f"({law['frames']} steps), median {law['median_steps']:g}, falls at {law['falls']}{near}")
    if args.groups:
        import envs

        walker = envs.make("humanoid", seed=0)   # the walker's proprio layout, as in every tracking env
        groups = {name: part for name, part in walker.unwrapped.observation_slices("proprio").items()
                  if part.stop > part.start}
        walker.close()
        drift = group_drift(dataset, args.snippets, groups, args.every)
        if not drift["episodes"]["rounds"]:
            fail(f"{args.data} holds no DAgger episodes of {', '.join(args.snippets)} (pipelines.npmp relabel)")
        results.setdefault("groups", {})[str(args.data)] = drift
        save_results(args.results, results)
        print(f"{args.data}: distance from the law's run per {args.every} frames, law's rollouts / DAgger episodes "
              f"({drift['episodes']['law']} / {drift['episodes']['rounds']}):")
        for name in groups:
            print(f"  {name}: {drift['law'][name][:8]} / {drift['rounds'][name][:8]}")
    rows = results.setdefault("primitives", {})
    for primitives in args.primitives:
        for snippet in args.snippets:
            handovers = (f", handover{' by planner' if args.handover_by == 'planner' else ''} "
                         f"{' '.join(map(str, args.handover))}" if args.handover else "")
            key = f"{snippet} (tube of {args.data}, noise {args.noise:g}{handovers})"   # measured again with them
            if key in rows.get(str(primitives), {}):
                continue
            try:
                row = measure(dataset, args.data, args.mocap, primitives, snippet, args.noise, args.stay, args.every,
                              tuple(args.handover), args.handover_by == "planner")
            except (EnvError, ConfigError, ModuleFileError, ValueError, OSError) as e:
                fail(f"{primitives}: {snippet}: {str(e).splitlines()[0]}")
            rows.setdefault(str(primitives), {})[key] = row
            save_results(args.results, results)
            print(f"{primitives}: {snippet}: upright {row['upright']} of {row['frames']}, leaves the tube at "
                  f"{row['leaves_at']}; label error {row['label_error_inside']} inside, {row['label_error_outside']} "
                  f"after", flush=True)
            for h in row["handovers"]:
                print(f"  the {args.handover_by} takes over at {h['at']} ({h['distance']} from its run): "
                      f"upright {h['upright']}"
                      f"{' (to the end)' if h['to_end'] else ''}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
