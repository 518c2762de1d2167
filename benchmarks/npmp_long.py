"""Do the primitives keep walking past a clip's end? Closed-loop imitation of walks looped to many seconds (issue 13;
docs/npmp.md, "Walks longer than a clip").

The shipped walks last 2.3-4.3 s, too short to show whether a controller can walk on. The converter loops a walk's
stride (``--loop SECONDS``, envs/mocap/convert.py ``loop_qpos``; ids ``<id>-loop<SECONDS>``) into a file that is not
shipped (docs/mocap.md has the command). Here each primitives directory imitates each looped walk closed loop from
its first frame (the encoder reads the looped reference, the decoder acts: pipelines/npmp/evaluate.py
``imitate_reference``), next to the feed-forward controller. In absolute terms: steps and seconds before the episode
ended (a fall or drift past the tracking threshold), out of the snippet's, and reward per step (a perfect tracker
earns 1.45).
With ``--frames DIR`` each measured episode is also drawn: one PNG per primitives and snippet, a strip of the
walker's back camera every second until the end (what to look at before believing the numbers).
With ``--phase`` each episode also records whether the walker keeps the reference's tempo: at every step, the
reference frame within 0.45 s (under half a stride, so the nearest pose is not a stride away) whose joint angles are
nearest the walker's, and ``phase_lag`` (that frame minus the step: negative when the walker is behind) at each
quarter of the episode, and its median before the last 20 steps (the fall).
The tracking task ends an episode when its tracking error passes 0.3, and that error compares the bodies' world
positions: a walker that drifts from the reference's path ends there upright. With ``--upright`` each episode is
also run with that ending switched off (``termination_threshold`` 1e9) to the clip's end, and ``upright`` records
the steps before the head first drops below the humanoid task's fall line (0.95 m; all of them if it never does),
the walker's distance from the reference's root then, and how far the walker and the reference have gone from their
start (with ``--frames``, that episode is drawn too: ``<primitives>__<snippet>-upright.png``).

    python benchmarks/npmp_long.py --mocap runs/npmp/loops/mocap.h5 --primitives data/primitives/npmp \\
        --snippets 07_01-0-loop10 07_02-0-loop10 --results benchmarks/results/npmp_long.json

Results are kept per primitives directory and snippet: a rerun measures only what the file lacks.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.runs import Strip, fail, resumed_results, save_results  # noqa: E402
from priors.npmp.reference import CONTROL_STEP_SECONDS  # noqa: E402,F401 (the benchmarks' step length)


def summarise(rows: dict[str, dict]) -> dict:
    """Median steps and seconds before the end, snippets tracked to their end, median reward per step; the same
    for the feed-forward controller."""
    records = list(rows.values())
    return {"snippets": len(records),
            "median_steps": statistics.median(r["steps"] for r in records),
            "median_seconds": statistics.median(r["steps"] for r in records) * CONTROL_STEP_SECONDS,
            "tracked_to_end": sum(r["steps"] >= r["full_steps"] for r in records),
            "median_reward_per_step": statistics.median(r["reward_per_step"] for r in records),
            "median_feed_forward_steps": statistics.median(r["feed_forward_steps"] for r in records),
            "median_feed_forward_reward_per_step": statistics.median(
                r["feed_forward_reward_per_step"] for r in records),
            **({"median_upright_steps": statistics.median(r["upright"]["steps"] for r in records)}
               if all("upright" in r for r in records) else {})}


class PhaseLag:
    """An ``observe`` hook for ``imitate_reference``: at every step the lag (frames) of the reference frame nearest
    the walker's joint angles within ``window`` frames either side (module docstring)."""

    def __init__(self, window: int = 15):
        self.window, self.lags = window, []

    def __call__(self, env, steps: int) -> None:
        import numpy as np

        angles = np.asarray(env.physics.bind(env.walker.mocap_joints).qpos)
        reference, t = env.clip_reference()["joints"], env.time_step
        low, high = max(0, t - self.window), min(len(reference) - 1, t + self.window)
        distance = ((reference[low:high + 1] - angles) ** 2).mean(axis=1)
        self.lags.append(low + int(distance.argmin()) - t)

    def summary(self) -> dict:
        lags, n = self.lags, len(self.lags)
        return {"at_quarters": [lags[min(n - 1, n * q // 4)] for q in range(1, 4)] + [lags[-1]],
                "median_before_last_20_steps": float(statistics.median(lags[:max(1, n - 20)]))}


class Upright:
    """An ``observe`` hook: the step at which the walker's head first drops below ``HEAD_HEIGHT_LIMIT`` (None while
    it has not), its distance from the reference's root in the ground plane at every step, how far the walker's
    root and the reference's have gone from where they started (a walker marching on the spot stays upright too),
    and how far each has turned (a walker on a curved walk that goes straight on stays upright too)."""

    def __init__(self):
        from envs.locomotion import HEAD_HEIGHT_LIMIT

        self.limit, self.fell_at, self.offsets, self.steps = HEAD_HEIGHT_LIMIT, None, [], 0
        self.travelled, self.reference_travelled, self.headings, self.reference_headings = [], [], [], []

    def __call__(self, env, steps: int) -> None:
        import numpy as np

        from envs.mocap.tracking import heading

        reference = env.clip_reference()
        start = reference["position"][0][:2]   # the walker starts on the reference's first frame
        self.travelled.append(float(np.linalg.norm(env.physics.data.qpos[:2] - start)))
        self.reference_travelled.append(float(np.linalg.norm(reference["position"][env.time_step][:2] - start)))
        self.headings.append(heading(env.physics.data.qpos[3:7]))
        self.reference_headings.append(heading(reference["quaternion"][env.time_step]))
        self.offsets.append(env.reference_offset()[0])
        self.steps = steps
        if self.fell_at is None and float(env.physics.bind(env.walker.head).xpos[2]) < self.limit:
            self.fell_at = steps

    def summary(self) -> dict:
        import numpy as np

        upright = self.steps if self.fell_at is None else self.fell_at

        def turn(headings, step=upright):   # degrees, counter-clockwise positive, from the start to ``step``
            return round(float(np.degrees(np.unwrap(headings[:step + 1])[-1] - headings[0])), 1)

        # the turn at every whole second the walker was upright: compared over the same span, walkers that fall at
        # different times (and the spin of a fall, which counts in ``turn_degrees``) do not blur the comparison
        seconds = [round(k / CONTROL_STEP_SECONDS) for k in range(1, int(upright * CONTROL_STEP_SECONDS + 1e-9) + 1)]
        return {"steps": upright, "fell": self.fell_at is not None, "offset_m": round(self.offsets[upright], 3),
                "travelled_m": round(self.travelled[upright], 3),
                "reference_travelled_m": round(self.reference_travelled[upright], 3),
                "turn_degrees": turn(self.headings), "reference_turn_degrees": turn(self.reference_headings),
                "turn_by_second_degrees": [turn(self.headings, n) for n in seconds],
                "reference_turn_by_second_degrees": [turn(self.reference_headings, n) for n in seconds]}


def repo_relative(path: Path) -> str:
    """``path`` relative to the repository when it lies inside it (results keyed the same however it was named)."""
    resolved = path.resolve()
    return str(resolved.relative_to(ROOT)) if resolved.is_relative_to(ROOT) else str(resolved)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mocap", type=Path, required=True, help="the mocap file with the looped walks (docs/mocap.md)")
    p.add_argument("--primitives", type=Path, nargs="+", default=[ROOT / "data" / "primitives" / "npmp"])
    p.add_argument("--snippets", nargs="+", help="snippet ids (default: every looped snippet of --mocap that is "
                                                  "not curved)")
    p.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results" / "npmp_long.json")
    p.add_argument("--frames", type=Path, help="a folder for one PNG strip per episode (a frame every second)")
    p.add_argument("--phase", action="store_true",
                   help="also record the walker's phase lag behind the reference (module docstring)")
    p.add_argument("--upright", action="store_true",
                   help="also run each episode with the tracking ending off: steps before the head drops below the "
                        "fall line (module docstring)")
    args = p.parse_args(argv)

    import torch

    from envs import EnvError
    from envs.mocap.convert import is_curved, is_looped
    from envs.mocap.tracking import snippet_ids
    from pipelines.npmp.evaluate import imitate_reference
    from priors.npmp import ModuleFileError, load_primitives

    torch.set_num_threads(1)
    try:
        every = snippet_ids(args.mocap, augmented=True)
    except EnvError as e:
        fail(str(e))
    snippets = args.snippets or [s for s in every if is_looped(s) and not is_curved(s)]
    unknown = [s for s in snippets if s not in every]
    if unknown or not snippets:
        fail(f"no such snippet(s) in {args.mocap}: {', '.join(unknown) or 'none looped'}")
    results = resumed_results(args.results, Path(__file__).name, argv, mocap=str(args.mocap))
    results.setdefault("primitives", {})
    for path in args.primitives:
        try:
            model, _ = load_primitives(path)
        except ModuleFileError as e:
            fail(f"primitives: {e}")
        name = repo_relative(path)
        entry = results["primitives"].setdefault(name, {"snippets": {}})
        for snippet in snippets:
            measured = entry["snippets"].get(snippet)
            if args.upright and ("travelled_m" not in (measured or {}).get("upright", {}) or args.frames):
                upright, strip = Upright(), Strip() if args.frames else None

                def observe_upright(env, steps):
                    upright(env, steps)
                    if strip is not None:
                        strip(env, steps)

                imitate_reference(model, snippet, ref_path=str(args.mocap), observe=observe_upright,
                                  env_options={"termination_threshold": 1e9})
                if strip is not None:
                    strip.write(args.frames / f"{name.replace('/', '_')}__{snippet}-upright.png")
                summary = upright.summary()
                print(f"{path}: {snippet}: with no tracking ending, upright for {summary['steps']} steps "
                      f"({'then fell' if summary['fell'] else 'to the end'}), {summary['offset_m']:.2f} m from the "
                      f"reference's root, {summary['travelled_m']:.2f} m from its start (the reference: "
                      f"{summary['reference_travelled_m']:.2f} m)", flush=True)
                if measured is not None:
                    measured["upright"] = summary
                    entry["summary"] = summarise(entry["snippets"])
                    save_results(args.results, results)
            if measured is not None and not args.frames and not (args.phase and "phase_lag" not in measured):
                continue
            strip = Strip() if args.frames else None
            phase = PhaseLag() if args.phase else None
            hooks = [h for h in (strip, phase) if h is not None]

            def observe(env, steps):
                for hook in hooks:
                    hook(env, steps)

            row = imitate_reference(model, snippet, ref_path=str(args.mocap), observe=observe if hooks else None)
            if strip is not None:
                strip.write(args.frames / f"{name.replace('/', '_')}__{snippet}.png")
            if phase is not None:
                lag = phase.summary()
                print(f"{path}: {snippet}: phase lag (frames) at each quarter {lag['at_quarters']}, "
                      f"median before the last 20 steps {lag['median_before_last_20_steps']:g}", flush=True)
            if measured is not None:   # measured before (the episode is deterministic): drawn, or its phase added
                if phase is not None:
                    measured["phase_lag"] = lag
                    save_results(args.results, results)
                continue
            if phase is not None:
                row["phase_lag"] = lag
            if args.upright:
                row["upright"] = summary
            entry["snippets"][snippet] = row
            entry["summary"] = summarise(entry["snippets"])
            save_results(args.results, results)   # after every snippet: a stopped run keeps what it measured
            print(f"{path}: {snippet}: {row['steps']} of {row['full_steps']} steps "
                  f"({row['steps'] * CONTROL_STEP_SECONDS:.1f} s), {row['reward_per_step']:.2f} per step; "
                  f"feed-forward {row['feed_forward_steps']} steps", flush=True)
        print(path, entry.get("summary"), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
