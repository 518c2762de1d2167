"""Targets reached on `humanoid` by primitives that a high level steers by choosing clips (issue 13; docs/npmp.md,
"A high level that chooses clips").

The headline task (``humanoid``: one target at a time, anywhere in the 8 m square at least 2 m from the walker,
reached when the walker stays within 1 m of it for 10 steps, after which it moves; 25 s; a fall ends the episode)
with every episode started on the first frame of the first clip of ``--clips`` and the walker driven by
``priors.reuse.ClipChoiceActionEnv``: each high-level action chooses which of ``--clips`` (walks and real walking
turns the primitives were taught) the primitives imitate next, entered where it best matches the chain so far
(``priors.npmp.reference.ClipGraph``). Scripted controllers, to show what the primitives allow through this
interface (and a learned one, to compare with them on the same episodes):
- ``walk``: always the first clip (a walk): targets reached by walking into them, the chance level;
- ``random``: a uniformly random clip at every choice (drawn from the episode's seed): the chance level of a high
  level that has learned nothing, where the first clip is a turn (an untrained DQN's, epsilon = 1);
- ``nearest``: the clip whose path, laid from where the walker is, leaves it nearest the target (through it, or
  the distance left plus the turn still needed toward it; the path of the reference, not of the walker: no
  simulation);
- ``planned``: each clip tried with the simulator itself from the captured episode (the segment it gives, then
  ``--depth`` - 1 more segments of the clip ``nearest`` would choose), and the one that does not fall, earns the
  most reward (steps on a target) and ends nearest the target is followed;
- ``toward`` / ``away``: the clip whose laid path turns the walker furthest toward (away from) the side the target
  is on: with one left and one right turn, "turn to the target's side" and its opposite, the simple rules a learned
  choice might have found instead of ``nearest``'s;
- ``learned`` (with ``--learned RUN``): the last policy of a run of ``--agent npmp-clips`` (train.py), greedy; the
  run's clips, start, blend and primitives must be this command's, so that it and the scripted controllers play the
  same episodes (benchmarks/npmp.py ``--greedy-episodes`` plays ``--first-seed 50000`` onwards).
Reported per primitives, controller and episode (seeds ``--first-seed`` onwards, the same targets and start for
every controller):
targets reached, steps (of 834), whether it fell, the step the first target was reached, the segments and how often
each clip was chosen, the mean entry match, how far the walker turned (degrees, counter-clockwise positive), and
the first target's distance (m) and bearing (degrees) at the start, and the chain followed (each segment's clip,
entry frame and frames, the start's first).

    python benchmarks/npmp_clips_humanoid.py --mocap data/mocap/cmu_snippets.h5 data/mocap/cmu_turns.h5 \\
        --clips 07_01-0 16_27-0 16_27-0-mirror --primitives runs/turns/u5_s1 --episodes 10

``--reach RESETS`` tells what the clips allow at best, with no primitives run: a perfect tracker (the walker's root
on the chain's own path, laid from the start pose) over every sequence of up to ``--reach-depth`` choices; per
reset, the first control step at which its path has kept the first target within the task's 1 m for 10 steps.
Reported: the share of first targets so reached within 1, 2, ..., 10 s, and the median step of those reached.
``--walked RESETS`` tells the same for the primitives themselves: what the best choices reach through them, so what
no high level could pass. Noise-free the physics is deterministic and the walker's start differs from episode to
episode only by where it stands and faces, so every sequence of up to ``--walked-depth`` choices is walked once, as
a tree (each choice tried from the captured episode), until it falls, the episode ends or the depth is used up; per
reset (seeds ``--first-seed`` onwards, the controllers' episodes) every walked path is laid onto that episode's start
and the first step at which one keeps the first target within 1 m for 10 steps before its fall is taken. Reported
like ``--reach``, with each sequence walked: its choices, the steps it stayed up and whether it fell.

``--action-noise SIGMA`` executes clip(command + N(0, SIGMA^2), -1, 1) for every low-level command (the noise drawn
from the episode's seed): noise-free, the episodes that choose alike are one trajectory (the physics is
deterministic), so a handful of distinct walks stand for all of them; with noise each episode is its own walk.
``planned``'s tries draw from the same stream.

Results are kept per primitives, controller and episode: a rerun measures only what the file lacks. ``--frames DIR``
draws the chosen episodes again (seeded, deterministic physics) as PNG strips of the walker's back camera, a frame
every second: ``<primitives>__<controller>__<episode>.png``.

``--primitives A+B+...`` runs a committee (``Committee``): every member's encoder keeps its own latent as when it
acts alone, and the environment receives the mean of the members' commands. Whether students' errors are their own
(a committee stays up longer) or shared (it does not) (docs/npmp.md, "A committee of students, and what they
let drift").
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from collections import Counter
from pathlib import Path

import gymnasium as gym
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.npmp_steer_humanoid import measure_episodes, target_bearing  # noqa: E402
from benchmarks.runs import fail, resumed_results, save_results  # noqa: E402

CONTROLLERS = ("walk", "random", "nearest", "planned", "toward", "away", "learned")


class NoisyCommands(gym.ActionWrapper):
    """``--action-noise``: the wrapped environment executes clip(command + N(0, sigma^2), -1, 1); a reset with a
    seed restarts the noise from that seed (episode ``seed`` sees the same noise for every controller)."""

    def __init__(self, env, sigma: float):
        super().__init__(env)
        self.sigma, self.rng = float(sigma), np.random.default_rng(1)

    def reset(self, **kwargs):
        if kwargs.get("seed") is not None:
            self.rng = np.random.default_rng([kwargs["seed"], 1])
        return self.env.reset(**kwargs)

    def action(self, command):
        noisy = command + self.sigma * self.rng.standard_normal(np.shape(command))
        return np.clip(noisy, -1.0, 1.0).astype(np.float32)


class Committee:
    """Primitives that act as the mean of their members' commands (``--primitives A+B+...``; module docstring):
    the latent is the members' latents side by side, each member encoding its own part from its own z_{t-1}."""

    def __init__(self, members: list):
        first = members[0].config
        for other in members[1:]:
            c = other.config
            if (c.state_dim, c.action_dim, c.read_offsets, c.path_offsets) != (first.state_dim, first.action_dim,
                                                                              first.read_offsets, first.path_offsets):
                raise ValueError("committee members must read the same states and reference frames and give the "
                                 "same actions")
        self.members, self.latent = members, first.latent_dim
        self.config = dataclasses.replace(first, latent_dim=first.latent_dim * len(members))

    def parameters(self):
        return self.members[0].parameters()

    def _parts(self, z):
        return [z[..., i * self.latent:(i + 1) * self.latent] for i in range(len(self.members))]

    def encode_step(self, z_prev, window):
        import torch

        means, stds = zip(*(m.encode_step(z, window) for m, z in zip(self.members, self._parts(z_prev))))
        return torch.cat(means, -1), torch.cat(stds, -1)

    def decode(self, state, z):
        import torch

        means = [m.decode(state, part)[0] for m, part in zip(self.members, self._parts(z))]
        mean = torch.stack(means).mean(0)
        return mean, torch.full_like(mean, self.members[0].config.decoder_std)


def load_committee(path: Path):
    """(model, meta) of ``--primitives`` PATH: one set, or a ``Committee`` of the sets joined by ``+`` (the first
    one's meta; every member must read the same observation groups)."""
    from priors.npmp import load_primitives

    loaded = [load_primitives(part) for part in str(path).split("+")]
    if len(loaded) == 1:
        return loaded[0]
    if any(meta["obs_groups"] != loaded[0][1]["obs_groups"] for _, meta in loaded):
        raise ValueError("committee members must read the same observation groups")
    return Committee([model for model, _ in loaded]), loaded[0][1]


def walker_pose(env) -> np.ndarray:
    """The walker's root floor pose (x, y, heading in rad), in the convention of the chain's root poses."""
    from envs.mocap.tracking import heading

    qpos = env.unwrapped.physics.data.qpos
    return np.array([qpos[0], qpos[1], heading(qpos[3:7])])


def target_position(env) -> np.ndarray:
    return np.asarray(env.unwrapped.task.objective.positions(env.unwrapped.physics)[0, :2], np.float64)


def predicted_path(env, chain) -> np.ndarray:
    """The chain's root positions [N, 2] from the walker's current frame on, laid in the world from where the
    walker is (the chain's pose at the current frame moved onto the walker's)."""
    from priors.npmp.reference import move_poses

    poses = chain.root_poses()
    t = min(env._t, len(poses) - 1)
    return move_poses(poses[t:], poses[t], walker_pose(env))[:, :2]


def path_cost(path: np.ndarray, target: np.ndarray) -> float:
    """How far a laid path (the new segment's root positions [N, 2]) leaves the walker from the target: its
    closest approach where that is within the task's 1 m, else the distance left at its end plus 1 m per radian
    the walker would still have to turn toward the target (the walking direction: the path's last 0.3 s)."""
    distance = np.linalg.norm(path - target, axis=1)
    if distance.min() < 1.0:
        return float(distance.min())
    walking, wanted = path[-1] - path[-10], target - path[-1]
    turn = abs(np.angle(complex(*wanted) / complex(*walking)))
    return float(distance[-1] + turn)


REACH_SECONDS = (1, 2, 3, 4, 5, 6, 8, 10)


def first_reached(path: np.ndarray, target: np.ndarray) -> int | None:
    """The first step at which ``path`` [N, 2] has kept ``target`` within the task's tolerance for the task's
    ``STEPS_BEFORE_RESPAWN`` steps in a row (the step the task counts it reached), or None."""
    from envs.locomotion import STEPS_BEFORE_RESPAWN, TOLERANCE

    inside = np.linalg.norm(path - target, axis=1) < TOLERANCE
    run = 0
    for step, on in enumerate(inside):
        run = run + 1 if on else 0
        if run >= STEPS_BEFORE_RESPAWN:
            return step
    return None


def reach(env, graph, clips: list[str], segment_frames: dict, start_frames: int, blend: int, resets: int,
          depth: int) -> dict:
    """``--reach`` (module docstring): the perfect tracker's first targets over ``resets`` resets of ``env``."""
    from itertools import product

    from priors.npmp.reference import ReferenceChain, move_poses

    paths = []
    for length in range(1, depth + 1):
        for sequence in product(clips, repeat=length):
            chain = ReferenceChain(None, graph, clips[0], start_frames, blend)
            for clip in sequence:
                chain.append(clip, segment_frames.get(clip))
            paths.append(chain.root_poses())
    laid = lambda pose: [move_poses(poses, poses[0], pose)[:, :2] for poses in paths]   # noqa: E731
    return {"resets": resets, "depth": depth, "chains": len(paths), **first_targets(env, range(resets), laid)}


def first_targets(env, seeds, laid) -> dict:
    """Over the episodes of ``seeds``: the first step at which any of the paths ``laid(start pose)`` [N, 2] keeps the
    episode's first target within the task's tolerance (``first_reached``), summarised as the share so reached
    within each of ``REACH_SECONDS``, the share never reached and the median step of those reached."""
    from priors.npmp.reference import CONTROL_STEP_SECONDS

    steps = []
    for seed in seeds:
        env.reset(seed=seed)
        target = target_position(env)
        reached = [first_reached(path, target) for path in laid(walker_pose(env))]
        steps.append(min((s for s in reached if s is not None), default=None))
    found = np.array([s for s in steps if s is not None])
    return {"share_reached_within_seconds": {
                f"{seconds:g}": round(float(np.sum(found <= seconds / CONTROL_STEP_SECONDS)) / len(steps), 3)
                for seconds in REACH_SECONDS},
            "share_never_reached": round(1.0 - len(found) / len(steps), 3),
            "median_step_reached": float(np.median(found)) if len(found) else None}


def walked_tree(env, depth: int) -> list[tuple[np.ndarray, bool, list[int]]]:
    """Every sequence of up to ``depth`` choices walked once from ``env``'s episode as it is (``--walked``): per
    sequence that ended (a fall, the episode's end) or used up ``depth``, (the walker's root positions [N + 1, 2], the
    current one first, then one per control step; whether it fell; the choices)."""
    leaves = []

    def grow(path: np.ndarray, choices: list[int]) -> None:
        captured = env.get_state()
        for choice in range(len(env.choices)):
            env.set_state(captured)
            _, _, terminated, truncated, info = env.step(choice)
            walked = np.concatenate([path, info["root_path"][:, :2]])
            if terminated or truncated or len(choices) + 1 == depth:
                leaves.append((walked, bool(info.get("fell", False)), [*choices, choice]))
            else:
                grow(walked, [*choices, choice])

    if env.get_state() is None:
        raise ValueError("the environment cannot capture its episode: no tree of choices can be walked")
    grow(walker_pose(env)[None, :2], [])
    return leaves


def walked_reach(env, resets: int, first_seed: int, depth: int) -> dict:
    """``--walked`` (module docstring): the best choices' first targets through the primitives, over ``resets``
    episodes from ``first_seed`` on."""
    from priors.npmp.reference import move_poses

    env.reset(seed=first_seed)
    origin, leaves = walker_pose(env), walked_tree(env, depth)
    poses = [np.c_[path, np.zeros(len(path))] for path, _, _ in leaves]   # headings unused: positions are moved
    laid = lambda pose: [move_poses(p, origin, pose)[:, :2] for p in poses]   # noqa: E731
    upright = [len(path) - 1 for path, _, _ in leaves]
    return {"resets": resets, "first_seed": first_seed, "depth": depth, "sequences": len(leaves),
            "sequences_that_fell": sum(fell for _, fell, _ in leaves),
            "median_steps_walked": float(np.median(upright)), "longest_walked": int(max(upright)),
            **first_targets(env, range(first_seed, first_seed + resets), laid),
            "walked": [{"choices": [env.choices[c] for c in choices], "steps": len(path) - 1, "fell": fell}
                       for path, fell, choices in leaves]}


def continued_chains(env) -> list:
    """For each of ``env``'s choices, its chain continued with that clip (the chain itself is left as it is)."""
    chains = []
    for clip in env.choices:
        chain = env.chain.copy()
        chain.append(clip, env.segment_frames.get(clip))
        chains.append(chain)
    return chains


def nearest_choice(env) -> int:
    """``nearest`` (module docstring): the choice whose laid path leaves the walker nearest the target
    (``path_cost``)."""
    target, start = target_position(env), len(env.chain)
    costs = [path_cost(predicted_path(env, chain)[max(0, start - env._t):], target) for chain in continued_chains(env)]
    return int(np.argmin(costs))


def side_choice(env, bearing: float, toward: bool) -> int:
    """``toward`` / ``away`` (module docstring): the choice whose laid segment turns the walker's heading furthest
    to the side of the target's ``bearing`` (degrees from the walking direction, counter-clockwise positive:
    ``target_bearing``) or to the other side."""
    side, start = np.sign(bearing) or 1.0, min(env._t, len(env.chain) - 1)
    turns = [side * float(np.angle(np.exp(1j * (chain.root_poses()[-1, 2] - chain.root_poses()[start, 2]))))
             for chain in continued_chains(env)]
    return int(np.argmax(turns) if toward else np.argmin(turns))


class LearnedChoice:
    """``learned`` (module docstring): a run's last policy, greedy, on the groups of the observation it saw."""

    def __init__(self, run_dir: Path, env, clips: list[str], primitives: Path, start_frames: int, blend: int):
        """``clips``: this command's ``--clips`` (CLIP[:FRAMES]), which must be the run's."""
        from agents.loop import load_run_config, load_trained_agent
        from agents.observations import ObsLayout

        run, config = load_run_config(run_dir)
        if run.agent != "npmp-clips":
            raise ValueError(f"{run_dir} is a run of --agent {run.agent}, not npmp-clips")
        theirs = (config.clips.split(","), Path(config.primitives).resolve(), config.start_frames, config.blend)
        ours = (clips, primitives.resolve(), start_frames, blend)
        if theirs != ours:
            raise ValueError(f"{run_dir} chose among {','.join(theirs[0])} on {theirs[1]}, start {theirs[2]}, blend "
                             f"{theirs[3]}: pass --clips, --primitives, --start-frames and --blend alike")
        groups = [g for g in config.high_level_obs.split(",") if g] or list(env.observation_space.spaces)
        space = gym.spaces.Dict({g: env.observation_space[g] for g in groups})
        _, _, self.agent, _ = load_trained_agent(run_dir, space, env.action_space)
        self.layout, self.groups = ObsLayout(space), groups

    def __call__(self, obs: dict) -> int:
        action, _ = self.agent.act(self.layout.flatten({g: obs[g] for g in self.groups}), deterministic=True)
        return int(np.asarray(action).reshape(-1)[0])


def learned_checkpoint(run_dir: Path | None) -> str:
    """``run_dir``'s newest checkpoint (its path names the run and the step): results of a run trained on are kept
    apart from those of its earlier policy; fails with one line where there is none."""
    from agents import checkpoint

    try:
        return str(checkpoint.latest(Path(run_dir) / "checkpoints"))
    except checkpoint.CheckpointError as e:
        fail(f"--learned {run_dir}: {str(e).splitlines()[0]}")


def planned_choice(env, depth: int) -> int:
    """``planned`` (module docstring)."""
    captured, scores, observer = env.get_state(), [], env.observer
    env.observer = None   # tries are not drawn
    for choice in range(len(env.choices)):
        env.set_state(captured)
        reward, fell, action = 0.0, False, choice
        for _ in range(depth):
            _, r, terminated, truncated, info = env.step(action)
            reward += float(r)
            if terminated or truncated:
                fell = bool(info.get("fell", False))
                break
            action = nearest_choice(env)
        distance = float(np.linalg.norm(target_position(env) - walker_pose(env)[:2]))
        scores.append((not fell, reward, -distance))
    env.set_state(captured)
    env.observer = observer
    return max(range(len(scores)), key=scores.__getitem__)


def episode(env, controller: str, seed: int, depth: int, observe=None, learned: LearnedChoice | None = None) -> dict:
    obs, _ = env.reset(seed=seed)
    start = (round(float(np.hypot(*obs["task"][:2])), 2), round(target_bearing(obs["task"]), 1))
    chosen, first, turned, last_yaw, steps = Counter(), None, 0.0, walker_pose(env)[2], 0
    draws = np.random.default_rng([seed, 2])
    env.observer = observe
    if observe is not None:
        observe(env.unwrapped, 0)
    while True:
        choice = (0 if controller == "walk" else int(draws.integers(len(env.choices))) if controller == "random"
                  else nearest_choice(env) if controller == "nearest"
                  else side_choice(env, target_bearing(obs["task"]), controller == "toward")
                  if controller in ("toward", "away")
                  else learned(obs) if controller == "learned" else planned_choice(env, depth))
        chosen[env.choices[choice]] += 1
        before = env.unwrapped.task.objective.targets_reached
        obs, _, terminated, truncated, info = env.step(choice)
        steps += info["control_steps"]
        yaw = walker_pose(env)[2]
        turned, last_yaw = turned + float(np.angle(np.exp(1j * (yaw - last_yaw)))), yaw
        if first is None and env.unwrapped.task.objective.targets_reached > before:
            first = steps
        if terminated or truncated:
            break
    metrics = info["episode_metrics"]
    return {"targets_reached": int(metrics["task/targets_reached"]), "steps": steps, "fell": bool(info["fell"]),
            "first_target_step": first, "segments": int(metrics["clips/segments"]), "chosen": dict(chosen),
            "mean_match": round(metrics["clips/mean_match"], 3), "turn_degrees": round(float(np.degrees(turned)), 1),
            "first_target_m_and_bearing": start,
            "chain": [[clip, int(first), int(frames)] for clip, first, frames in env.chain.segments]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mocap", type=Path, nargs="+", required=True, help="mocap files holding the clips")
    p.add_argument("--clips", nargs="+", required=True, metavar="CLIP[:FRAMES]",
                   help="the clips to choose from (the first, a walk, starts every episode); with :FRAMES, a choice "
                        "follows that clip for at most FRAMES frames (a looped walk a stride at a time)")
    p.add_argument("--primitives", type=Path, nargs="*", default=[],
                   help="primitives directories; A+B+... is a committee of them (module docstring)")
    p.add_argument("--controllers", nargs="+", choices=CONTROLLERS, default=list(CONTROLLERS[:4]))
    p.add_argument("--depth", type=int, default=2, help="planned: segments simulated per choice")
    p.add_argument("--start-frames", type=int, default=30, help="frames of the first clip before the first choice")
    p.add_argument("--blend", type=int, default=0, help="frames over which each join fades in (ReferenceChain)")
    p.add_argument("--skip-windup", action="store_true",
                   help="a turning clip is entered no earlier than its wind-up's end (ClipGraph)")
    p.add_argument("--lead", type=int, help="frames of the chain left when the next choice is made (default: the "
                                            "primitives' look-ahead + 3); must exceed --blend")
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--first-seed", type=int, default=0, help="episodes are seeded from this one on")
    p.add_argument("--learned", type=Path, metavar="RUN",
                   help="a run directory of --agent npmp-clips: its last policy is the controller 'learned'")
    p.add_argument("--action-noise", type=float, default=0.0, metavar="SIGMA",
                   help="executes clip(command + N(0, SIGMA^2), -1, 1), seeded per episode (module docstring)")
    p.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results" / "npmp_clips_humanoid.json")
    p.add_argument("--frames", type=Path, help="a folder for one PNG strip per episode; measures them again")
    p.add_argument("--reach", type=int, default=0, metavar="RESETS",
                   help="also: what a perfect tracker of the clips reaches, over this many resets (module docstring)")
    p.add_argument("--reach-depth", type=int, default=4, help="--reach: the most choices in a sequence")
    p.add_argument("--walked", type=int, default=0, metavar="RESETS",
                   help="also: what the best choices reach through the primitives, noise-free, over this many "
                        "episodes (module docstring)")
    p.add_argument("--walked-depth", type=int, default=8, help="--walked: the most choices in a sequence")
    args = p.parse_args(argv)

    import torch

    import envs
    from envs import EnvError
    from agents.checkpoint import CheckpointError
    from agents.config import ConfigError
    from agents.npmp import clip_graph, parse_clip_choices
    from priors.npmp import ModuleFileError
    from priors.reuse import ClipChoiceActionEnv

    torch.set_num_threads(1)
    if args.episodes < 1 or args.depth < 1 or args.start_frames < 3 or args.blend < 0 or args.action_noise < 0:
        fail("need --episodes >= 1, --depth >= 1, --start-frames >= 3, --blend >= 0 and --action-noise >= 0")
    if args.reach < 0 or not 1 <= args.reach_depth <= 6 or not (args.reach or args.primitives):
        fail("need --primitives, --reach RESETS or both, --reach >= 0 and --reach-depth in [1, 6]")
    if args.walked < 0 or not 1 <= args.walked_depth <= 12 or (args.walked and args.action_noise):
        fail("need --walked >= 0, --walked-depth in [1, 12], and no --action-noise with --walked (its tree is "
             "walked once: noise-free)")
    if args.first_seed < 0 or ("learned" in args.controllers) != (args.learned is not None):
        fail("need --first-seed >= 0, and --learned RUN exactly when --controllers includes learned")
    try:
        clips, segment_frames = parse_clip_choices(args.clips)
        graph, where = clip_graph(clips, [str(m) for m in args.mocap], skip_windup=args.skip_windup)
    except ConfigError as e:
        fail(f"--clips: {e}")
    results = resumed_results(args.results, Path(__file__).name, argv, clips=args.clips)
    windup = ", after wind-up" if args.skip_windup else ""   # in every results key: other joins, other numbers
    if args.reach:
        try:
            env = envs.make("humanoid", seed=0, start_snippet=clips[0], ref_path=str(where[clips[0]]))
            key = f"start {args.start_frames}" + (f", blend {args.blend}" if args.blend else "") + windup
            results.setdefault("reach", {})[key] = reach(env, graph, clips, segment_frames, args.start_frames,
                                                         args.blend, args.reach, args.reach_depth)
        except (EnvError, ValueError) as e:
            fail(f"--reach: {str(e).splitlines()[0]}")
        env.close()
        save_results(args.results, results)
        print(f"reach ({key}): {results['reach'][key]}", flush=True)
    for path in args.primitives:
        try:
            model, meta = load_committee(path)
        except (ModuleFileError, ValueError, OSError) as e:
            fail(f"primitives {path}: {str(e).splitlines()[0]}")
        rows = results.setdefault("primitives", {}).setdefault(str(path), {})
        variant = ((f", blend {args.blend}" if args.blend else "") + (f", lead {args.lead}" if args.lead else "")
                   + (f", noise {args.action_noise:g}" if args.action_noise else "") + windup)
        names = {"planned": f"planned, depth {args.depth}"}
        if args.learned is not None:
            names["learned"] = f"learned {learned_checkpoint(args.learned)}"
        keys = {c: names.get(c, c) + variant for c in args.controllers}
        seeds = range(args.first_seed, args.first_seed + args.episodes)
        todo = [(c, e) for c in args.controllers for e in seeds
                if args.frames or str(e) not in rows.get(keys[c], {})]
        walked_key = f"depth {args.walked_depth}, start {args.start_frames}{variant}" if args.walked else None
        if walked_key is not None:   # measured again unless kept for these very episodes
            walked = results.setdefault("walked", {}).setdefault(str(path), {})
            kept = walked.get(walked_key, {})
            if (kept.get("resets"), kept.get("first_seed")) == (args.walked, args.first_seed):
                walked_key = None
        if not todo and walked_key is None:
            continue
        try:
            walker = envs.make("humanoid", seed=0, start_snippet=clips[0], ref_path=str(where[clips[0]]))
            if args.action_noise:
                walker = NoisyCommands(walker, args.action_noise)
            env = ClipChoiceActionEnv(walker, model, graph, clips, clips[0], meta["obs_groups"], args.start_frames,
                                      lead=args.lead, segment_frames=segment_frames, blend=args.blend)
        except (EnvError, ModuleFileError, ValueError) as e:
            fail(f"{path}: {str(e).splitlines()[0]}")
        try:
            learned = None if args.learned is None else LearnedChoice(args.learned, env, args.clips, path,
                                                                      args.start_frames, args.blend)
        except (CheckpointError, ValueError) as e:   # ConfigError is a ValueError
            fail(f"--learned {args.learned}: {str(e).splitlines()[0]}")
        if walked_key is not None:
            try:
                walked[walked_key] = walked_reach(env, args.walked, args.first_seed, args.walked_depth)
            except ValueError as e:
                fail(f"--walked: {str(e).splitlines()[0]}")
            save_results(args.results, results)
            print(f"{path}: walked ({walked_key}): {walked[walked_key]}", flush=True)
        measure_episodes(env, lambda controller, seed, strip: episode(env, controller, seed, args.depth,
                                                                      observe=strip, learned=learned),
                         path, todo, keys, rows, results, args.results, args.frames)
    return 0


if __name__ == "__main__":
    sys.exit(main())
