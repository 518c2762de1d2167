"""The acting/learning loop behind ``train.py``: one actor writes sequences into replay, the learner samples them.

Everything a run produces lives in its run directory: ``config.json`` (the resolved config), TensorBoard event
files, ``checkpoints/`` (agents/checkpoint.py) and ``videos/``. ``--resume`` restores networks, optimisers,
replay, counters and RNG states from the newest complete checkpoint and continues at its step. Where every
environment can be captured (envs/dmc.py: dm_control suite and locomotion tasks, acting in the learner's process)
the checkpoint also holds the episodes in progress, so a resumed run continues them and produces the same numbers as
an uninterrupted one; elsewhere (Ray actors, motion-capture tracking, Gymnasium envs, agents that wrap their
environment) each environment starts a fresh episode, seeded from the run seed and the step.
"""
from __future__ import annotations

import contextlib
import dataclasses
import difflib
import functools
import json
import math
import random
import signal
import threading
import time
import weakref
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from tqdm import tqdm

import agents
import envs
from agents import checkpoint
from agents.config import ConfigError, apply_overrides, from_dict, settable_keys
from agents.observations import ObsLayout
from agents.protocol import Agent, RunInterrupted, TrainingDiverged
from agents.replay import SequenceReplay
from agents.runlock import RunLock
from agents.schedule import FIELDS as SCHEDULE_FIELDS, Schedule
from agents.actors import LocalActor, RayActors
from agents.vector import EnvPool


RELABELLED_STREAM = -1   # the replay stream of the episodes agents make from finished ones (Agent.relabel)


@dataclasses.dataclass(frozen=True)
class RunConfig:
    env: str = "cartpole-swingup"
    agent: str = "svg0"
    steps: int = 100_000  # environment steps, counting action repeats
    seed: int = 0
    action_repeat: int = 1
    device: str = "auto"
    logdir: str = ""
    eval_every: int = 10_000
    eval_episodes: int = 5
    video_every: int = 0  # 0: no videos
    checkpoint_every: int = 10_000
    log_every: int = 1_000  # environment steps between scalar summaries
    threads: int = 1  # torch intra-op threads; 1 is fastest for small networks beside a simulator
    num_envs: int = 1  # environments per actor, stepped in parallel worker processes (agents/vector.py)
    actors: int = 0  # distributed actor processes on Ray (agents/actors.py); 0: act in the learner's process
    address: str = ""  # Ray cluster to join (auto, ray://host:port); empty: start a local one
    actor_chunk: int = 50  # steps per environment an actor takes with one copy of the weights
    schedule: Schedule | None = None  # replay and updates (agents/schedule.py); None: the agent's own defaults

    def validate(self) -> None:
        for name in ("steps", "action_repeat", "eval_every", "eval_episodes", "checkpoint_every", "log_every",
                     "threads", "num_envs", "actors", "actor_chunk"):
            if getattr(self, name) < (0 if name == "actors" else 1):
                raise ConfigError(f"{name} must be {'>= 0' if name == 'actors' else 'positive'}, "
                                  f"got {getattr(self, name)}")
        if self.address and self.actors == 0:
            raise ConfigError("address names a Ray cluster for distributed actors; set actors >= 1 as well")
        if self.video_every < 0:
            raise ConfigError("video_every must be >= 0")
        if not 0 <= self.seed < 2**32:
            raise ConfigError(f"seed must be in [0, 2**32), got {self.seed}")
        if self.device not in ("auto", "cpu", "cuda") and not self.device.startswith("cuda:"):
            raise ConfigError(f"device must be auto, cpu or cuda, got {self.device!r}")
        if self.schedule is not None:
            self.schedule.validate()

    def resolved(self) -> "RunConfig":
        """This config with its schedule filled in from the agent's defaults where it has none."""
        if self.schedule is not None:
            return self
        return dataclasses.replace(self, schedule=agents.agent_class(self.agent).schedule)


def _crossed(every: int, before: int, after: int) -> bool:
    """Whether a multiple of ``every`` lies in (before, after]: steps advance by the action repeat, not by 1."""
    return every > 0 and after // every > before // every


def make_run_env(env_name: str, action_repeat: int, agent: str, agent_config, device: str, seed: int):
    """A run's environment, wrapped by the agent where it acts through something else (a frozen low-level controller
    whose latent input is the agent's action: ``wrap_env``). Module-level, so worker processes can build it."""
    cls = agents.agent_class(agent)
    controller = cls.acts_through_controller(agent_config)   # then the controller, not the env, repeats
    env = envs.make(env_name, seed=seed, action_repeat=1 if controller else action_repeat,
                    **cls.env_options(agent_config))
    return cls.wrap_env(env, agent_config, torch.device(device), action_repeat if controller else 1)




def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError("--device cuda was requested but no CUDA device is available; use --device cpu or auto")
    return torch.device(name)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def play_episode(agent, env, layout: ObsLayout, seed: int, before_step=None, steps_per_action: int = 1
                 ) -> tuple[float, int, dict]:
    """One episode of the deterministic policy (the Gaussian's mode) from ``env.reset(seed=seed)``: (return, control
    steps, the last step's info). ``before_step()``, if given, runs before every action (to draw a frame); an action
    is ``info["control_steps"]`` control steps where the wrapper says so, else ``steps_per_action``."""
    obs, _ = env.reset(seed=seed)
    total, steps, done, info = 0.0, 0, False, {}
    while not done:
        if before_step is not None:
            before_step()
        action, _ = agent.act(layout.flatten(obs), deterministic=True)
        obs, reward, terminated, truncated, info = env.step(action)
        total += reward
        steps += int(info.get("control_steps", steps_per_action))
        done = terminated or truncated
    return total, steps, info


def evaluate(agent, env, layout: ObsLayout, episodes: int, seed: int, record: bool = False):
    """Mean return of the deterministic policy (the Gaussian's mode) over ``episodes``, frames of the first, and the
    mean of each of the episodes' ``episode_metrics`` (e.g. ``task/targets_reached``: what a sparse task's greedy
    policy achieves, which its return alone does not tell)."""
    returns, frames, metrics = [], [], {}
    # a wrapper that runs several control steps per action (priors.reuse.ClipChoiceActionEnv) draws each of them
    # through its observer, so that the video plays at the control rate
    per_control_step = hasattr(env, "observer")
    for episode in range(episodes):
        drawn = record and episode == 0
        if per_control_step:
            env.observer = (lambda inner, _: frames.append(inner.render())) if drawn else None
        draw = (lambda: frames.append(env.render())) if drawn and not per_control_step else None
        episode_return, _, info = play_episode(agent, env, layout, seed + episode, before_step=draw)
        returns.append(episode_return)
        for tag, value in info.get("episode_metrics", {}).items():
            metrics.setdefault(tag, []).append(float(value))
    if per_control_step:
        env.observer = None
    return float(np.mean(returns)), frames, {tag: float(np.mean(v)) for tag, v in metrics.items()}


def write_video(writer, run_dir: Path, tag: str, frames: list[np.ndarray], step: int, fps: int) -> None:
    """A GIF in ``videos/`` and in TensorBoard's image tab (no moviepy needed)."""
    import imageio.v3 as iio
    from tensorboard.compat.proto.summary_pb2 import Summary

    frames = frames[::2]  # half the frames keeps GIFs small
    data = iio.imwrite("<bytes>", np.stack(frames), extension=".gif", duration=2000 / max(fps, 1), loop=0)
    (run_dir / "videos").mkdir(exist_ok=True)
    (run_dir / "videos" / f"eval_{step:09d}.gif").write_bytes(data)
    height, width = frames[0].shape[:2]
    image = Summary.Image(height=height, width=width, colorspace=3, encoded_image_string=data)
    writer._get_file_writer().add_summary(Summary(value=[Summary.Value(tag=tag, image=image)]), step)


class Trainer:
    def __init__(self, run: RunConfig, agent_config, resume_from: Path | None = None):
        run = run.resolved()
        run.validate()
        run.schedule.validate(agent_config.sequence_length)
        self.run, self.agent_config, self.schedule = run, agent_config, run.schedule
        self.run_dir = Path(run.logdir)
        self.device = resolve_device(run.device)
        torch.set_num_threads(run.threads)
        seed_everything(run.seed)
        self.eval_env = self._make_env(run.seed + 10_000)  # also tells the spaces; training envs start in train()
        self.layout = ObsLayout(self.eval_env.observation_space)
        self.agent: Agent = agents.make(run.agent, self.eval_env.observation_space, self.eval_env.action_space,
                                        agent_config, self.device)
        self.rng = np.random.default_rng(run.seed)
        # discrete actions are stored as one float column holding the action index
        action_space = self.eval_env.action_space
        action_dim = action_space.shape[0] if isinstance(action_space, gym.spaces.Box) else 1
        self.replay = SequenceReplay(self.schedule.replay_capacity, self.layout.dim, action_dim,
                                     agent_config.sequence_length, self.rng)
        self.env_steps = self.actor_steps = self.episodes = 0
        self.source = None   # where experience comes from, while train() runs
        self.stop_signal: int | None = None   # SIGINT/SIGTERM received during train(): stop after the step
        self.resume_episodes = None   # the checkpoint's episodes in progress, continued where possible
        self.episode_return: list[float] = []
        self.episode_length: list[int] = []
        # held from before the checkpoint is read until train() returns (or the process ends)
        self.lock = RunLock(self.run_dir)
        weakref.finalize(self, self.lock.release)
        if resume_from is not None:
            self.lock.acquire()
            try:
                self._restore(resume_from)
                if self.env_steps >= run.steps:
                    raise ConfigError(f"the run is already at step {self.env_steps} (--steps {run.steps}); "
                                      "pass a larger --steps to continue it")
            except BaseException:
                self.lock.release()
                raise

    def _make_env(self, seed: int):
        return make_run_env(self.run.env, self.run.action_repeat, self.run.agent, self.agent_config, str(self.device),
                            seed)

    def training_seeds(self) -> list[int]:
        """Environment i (of every actor's): the run seed for the first (as with one environment), spread for the
        rest."""
        return [self.run.seed + 100_003 * i for i in range(self.run.num_envs * max(self.run.actors, 1))]

    # -- run directory ---------------------------------------------------------------------------------------
    def resolved_config(self) -> dict:
        return {"run": dataclasses.asdict(self.run), "agent": dataclasses.asdict(self.agent_config)}

    def _update(self) -> dict:
        try:
            return self.agent.update(self.replay.sample(self.schedule.batch_size, self.device))
        except RuntimeError as e:   # e.g. an optimiser step that overflows: the same as a non-finite loss
            if "overflow" not in str(e) and "nan" not in str(e).lower():
                raise
            first = (str(e).strip().splitlines() or [""])[0][:120]
            raise TrainingDiverged(f"the update at env step {self.env_steps} failed numerically ({first}); lower "
                                   "the learning rates or set grad_clip; the last checkpoint is intact") from None

    def save_checkpoint(self) -> Path:
        state = {"agent": self.agent.state_dict(), "torch_rng": torch.get_rng_state()}
        if self.device.type == "cuda":
            state["cuda_rng"] = torch.cuda.get_rng_state(self.device)
        # the episodes in progress, where every environment can be captured (exact resume)
        snapshot = self.source.snapshot() if self.source is not None else None
        if snapshot is not None:
            state["episodes_in_progress"] = checkpoint.arrays_to_tensors(
                {**snapshot, "returns": list(map(float, self.episode_return)),
                 "lengths": list(map(int, self.episode_length))})
        meta = {"config": self.resolved_config(),
                "counters": {"env_steps": self.env_steps, "actor_steps": self.actor_steps,
                             "episodes": self.episodes},
                "numpy_rng": self.rng.bit_generator.state, "replay": self.replay.counters()}
        path = checkpoint.save(self.run_dir / "checkpoints", self.env_steps, state, self.replay.arrays(), meta)
        self.agent.export_artifacts(self.run_dir)  # e.g. a learned prior, loadable by other runs
        return path

    def _restore(self, path: Path) -> None:
        meta, state, replay_arrays = checkpoint.load(path, device=self.device)
        try:
            self.agent.load_state_dict(state["agent"])
            self.replay.load(replay_arrays, meta["replay"])
            torch.set_rng_state(state["torch_rng"].cpu())
            if self.device.type == "cuda" and "cuda_rng" in state:
                torch.cuda.set_rng_state(state["cuda_rng"].cpu(), self.device)
            self.rng.bit_generator.state = meta["numpy_rng"]
            counters = meta["counters"]
            self.resume_episodes = checkpoint.tensors_to_arrays(state.get("episodes_in_progress"))
        except (KeyError, ValueError, RuntimeError, TypeError) as e:
            first = (str(e).strip().splitlines() or [""])[0]
            raise checkpoint.CheckpointError(f"{path} does not match this run's agent/config ({first})") from None
        self.env_steps, self.actor_steps = counters["env_steps"], counters["actor_steps"]
        self.episodes = counters["episodes"]

    def _write_relabelled(self, first_obs: np.ndarray, steps: list) -> None:
        """The agent's relabelled copies of a finished episode, into replay as whole episodes of their own stream
        (they never count as environment or actor steps)."""
        for first, rows in self.agent.relabel(first_obs, steps):
            if not rows or not rows[-1][5] or any(row[5] for row in rows[:-1]):
                raise RuntimeError("a relabelled episode must end (over) on its last row and only there")
            self.replay.start_episode(first, stream=RELABELLED_STREAM)
            for action, log_prob, reward, terminated, obs, over in rows:
                self.replay.add(action, log_prob, reward, terminated, obs, over, stream=RELABELLED_STREAM)

    def _log_episode(self, writer, episode_return: float, episode_length: int, info: dict) -> None:
        writer.add_scalar("train/episode_return", episode_return, self.env_steps)
        writer.add_scalar("train/episode_length", episode_length, self.env_steps)
        if "task" in info:  # multitask environments name the episode's task
            writer.add_scalar(f"train/episode_return/{info['task']}", episode_return, self.env_steps)
        if "fell" in info:  # bodies whose falls end episodes (the CMU humanoid): 1 for a fall
            writer.add_scalar("train/fell", float(info["fell"]), self.env_steps)
        for tag, value in info.get("episode_metrics", {}).items():  # the env's or a wrapper's statistics
            writer.add_scalar(tag, value, self.env_steps)

    # -- the loop --------------------------------------------------------------------------------------------
    def train(self, source=None) -> dict:
        """Run to ``run.steps``; ``source``: an experience source already started (``experience_source()``)."""
        from torch.utils.tensorboard import SummaryWriter

        # first: an unreachable Ray cluster leaves no run directory behind
        source = source if source is not None else self.experience_source()
        self.source = source
        try:
            self.lock.acquire()   # creates the run directory
            checkpoint.atomic_write_text(self.run_dir / "config.json", json.dumps(self.resolved_config(), indent=1))
            # purge_step drops events that a killed run logged after its checkpoint (the checkpoint's step stays)
            writer = SummaryWriter(str(self.run_dir), purge_step=self.env_steps + 1 if self.env_steps else None)
            with self._stop_on_signals():
                return self._train(writer, source, self.eval_env.metadata.get("render_fps", 30))
        finally:
            source.close()
            self.source = None
            self.lock.release()

    @contextlib.contextmanager
    def _stop_on_signals(self):
        """SIGINT and SIGTERM ask the loop to stop after its current step with a checkpoint (``RunInterrupted``);
        a second one stops at once (KeyboardInterrupt), the previous checkpoint intact."""
        self.stop_signal = None
        if threading.current_thread() is not threading.main_thread():   # signal handlers live in the main thread
            yield
            return

        def handler(signum, frame):
            if self.stop_signal is not None:
                raise KeyboardInterrupt
            self.stop_signal = signum

        previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for s, h in previous.items():
                signal.signal(s, h)

    def experience_source(self):
        """Acting in this process (``actors = 0``), or distributed actors on Ray (agents/actors.py)."""
        run = self.run
        make_env = functools.partial(make_run_env, run.env, run.action_repeat, run.agent, self.agent_config, "cpu")
        if run.actors == 0:
            # one env lives in this process (and may put a frozen decoder on the learner's device); workers use the CPU
            make_local = make_env if run.num_envs > 1 else functools.partial(
                make_run_env, run.env, run.action_repeat, run.agent, self.agent_config, str(self.device))
            return LocalActor(self.agent, EnvPool(make_local, self.training_seeds()), self.layout,
                              reset_seeds=[s + self.env_steps for s in self.training_seeds()],
                              resume=self.resume_episodes)
        seeds = self.training_seeds()
        per_actor = [seeds[a * run.num_envs:(a + 1) * run.num_envs] for a in range(run.actors)]
        # actors restarted on resume must not replay the same episodes: their seeds move with the step count
        per_actor = [[s + self.env_steps for s in group] for group in per_actor]
        return RayActors(make_env, per_actor, run.agent, self.agent_config, self.agent, run.address or None,
                         run.actor_chunk)

    def _train(self, writer, source, fps: int) -> dict:
        run = self.run
        # every stream starts a fresh episode, unless the source continues the checkpoint's episodes (exact resume)
        experience = source.start()
        bar = tqdm(total=run.steps, initial=self.env_steps, unit="step", dynamic_ncols=True, mininterval=1.0,
                   desc=f"{run.agent} {run.env}")
        try:   # the bar is closed before any message (an error, an interruption) reaches the terminal
            return self._loop(writer, source, fps, bar, experience)
        finally:
            bar.close()
            writer.close()

    def _loop(self, writer, source, fps: int, bar, experience) -> dict:
        run = self.run
        streams = run.num_envs * max(run.actors, 1)
        progress = self.resume_episodes if getattr(source, "resumed", False) else None
        self.episode_return = [float(r) for r in progress["returns"]] if progress else [0.0] * streams
        self.episode_length = [int(n) for n in progress["lengths"]] if progress else [0] * streams
        episode_return, episode_length = self.episode_return, self.episode_length   # updated in place
        # each stream's episode so far (first state, transitions), for agents that relabel finished episodes; an
        # episode continued from a checkpoint is not relabelled (its start is not kept)
        episodes: dict[int, tuple] = {}
        relabels = getattr(self.agent, "relabels", False)
        sums: dict[str, float] = {}
        count = 0
        updates_at_log, steps_at_log, time_at_log = self.agent.updates, self.env_steps, time.perf_counter()
        last_return = eval_return = float("nan")
        while self.env_steps < run.steps:
            seen = []  # the states that arrived, for the agent's running statistics (observation normalisation)
            for stream, flat in experience.starts:
                self.replay.start_episode(flat, stream=stream)
                episode_return[stream], episode_length[stream] = 0.0, 0
                seen.append(flat)
                if relabels:
                    episodes[stream] = (flat, [])
            previous, actor_before = self.env_steps, self.actor_steps
            # a wrapper whose one step runs several control steps of its own (priors.reuse.ClipChoiceActionEnv)
            # says how many; otherwise each transition is action_repeat of them
            taken = sum(int(t.info.get("control_steps", run.action_repeat)) for t in experience.transitions)
            self.env_steps += taken
            self.actor_steps += len(experience.transitions)
            bar.update(taken)
            for t in experience.transitions:
                if not math.isfinite(t.reward):
                    raise TrainingDiverged(f"environment {run.env} returned a non-finite reward {t.reward}")
                self.replay.add(t.action, t.log_prob, t.reward, t.terminated, t.obs, t.over, stream=t.stream)
                episode_return[t.stream] += t.reward
                episode_length[t.stream] += int(t.info.get("control_steps", 1))
                seen.append(t.obs)
                if relabels and t.stream in episodes:
                    episodes[t.stream][1].append(t)
                if t.over:
                    self.episodes += 1
                    last_return = episode_return[t.stream]
                    self._log_episode(writer, episode_return[t.stream], episode_length[t.stream], t.info)
                    if t.stream in episodes:
                        self._write_relabelled(*episodes.pop(t.stream))
                    self.replay.start_episode(t.reset_obs, stream=t.stream)
                    episode_return[t.stream], episode_length[t.stream] = 0.0, 0
                    seen.append(t.reset_obs)
                    if relabels:
                        episodes[t.stream] = (t.reset_obs, [])
            if seen:
                self.agent.observe(np.stack(seen))

            updates = self.schedule.updates_between(actor_before, self.actor_steps) if self.agent.learns else 0
            for _ in range(updates):
                metrics = self._update()
                for k, v in metrics.items():  # floats or 0-d tensors: summed without a host sync
                    sums[k] = sums.get(k, 0.0) + (v.detach() if torch.is_tensor(v) else v)
                count += 1
            if updates:
                for k, v in self.agent.refresh(self.replay, self.actor_steps).items():
                    writer.add_scalar(k, v, self.env_steps)
                source.publish(self.agent)

            done = self.env_steps >= run.steps
            checkpointing = _crossed(run.checkpoint_every, previous, self.env_steps) or done
            if _crossed(run.log_every, previous, self.env_steps) or checkpointing:
                # metrics are read (and checked) here, and always before a checkpoint is written
                means = {k: float(v) / count for k, v in sums.items()}
                bad = [k for k, v in means.items() if not math.isfinite(v)]
                if bad:
                    raise TrainingDiverged(
                        f"{', '.join(bad)} became non-finite before env step {self.env_steps}; lower the learning "
                        f"rates (the *lr keys of `train.py --list`) or set grad_clip; the last checkpoint is intact")
                now = time.perf_counter()
                elapsed = max(now - time_at_log, 1e-9)
                env_rate = (self.env_steps - steps_at_log) / elapsed
                writer.add_scalar("perf/env_steps_per_s", env_rate, self.env_steps)
                writer.add_scalar("perf/updates_per_s", (self.agent.updates - updates_at_log) / elapsed,
                                  self.env_steps)
                writer.add_scalar("replay/size", len(self.replay), self.env_steps)
                for k, v in means.items():
                    writer.add_scalar(k, v, self.env_steps)
                sums, count = {}, 0
                updates_at_log, steps_at_log, time_at_log = self.agent.updates, self.env_steps, now
                bar.set_postfix(ret=f"{last_return:.1f}", eval=f"{eval_return:.1f}", sps=f"{env_rate:.0f}")
            record = _crossed(run.video_every, previous, self.env_steps) or (done and run.video_every > 0)
            if _crossed(run.eval_every, previous, self.env_steps) or done or record:
                eval_return, frames, eval_metrics = evaluate(self.agent, self.eval_env, self.layout,
                                                             run.eval_episodes, seed=run.seed + 10_000, record=record)
                writer.add_scalar("eval/return", eval_return, self.env_steps)
                for tag, value in eval_metrics.items():
                    writer.add_scalar(f"eval/{tag}", value, self.env_steps)
                if record:
                    write_video(writer, self.run_dir, "eval/video", frames, self.env_steps, fps)
                bar.set_postfix(ret=f"{last_return:.1f}", eval=f"{eval_return:.1f}")
            if checkpointing:
                writer.flush()
                saved = self.save_checkpoint()
            if self.stop_signal is not None and not done:
                writer.flush()
                raise RunInterrupted(self.stop_signal, self.env_steps,
                                     saved if checkpointing else self.save_checkpoint())
            if not done:
                experience = source.collect()
        return {"env_steps": self.env_steps, "episodes": self.episodes, "eval_return": eval_return,
                "last_train_return": last_return}


def build_run(flags: dict, overrides: dict[str, str], resume: Path | None = None, logdir: str | None = None):
    """(run config, agent config, checkpoint to resume from or None): what ``train.py`` and the pipelines build runs
    with. ``flags`` are RunConfig fields (env, agent, steps, seed, ...); ``overrides`` are ``--set`` pairs: run
    fields, schedule fields (``batch_size`` or ``schedule.batch_size``) and agent fields (``section.key`` for a
    part's) alike; an unknown key is one error with the closest keys of all three. ``resume`` continues a saved run: only its steps, device, schedule and actor
    settings may change. A new run checks its environment builds and that ``logdir`` holds no other run, before
    anything is written."""
    if resume is not None:
        run, agent_config = load_run_config(resume)
        changed = [k for k in ("env", "agent", "seed", "action_repeat") if k in flags and flags[k] != getattr(run, k)]
        if changed or overrides:
            raise ConfigError(f"--resume continues the saved run; it cannot change {changed or list(overrides)} "
                              "(start a new run with --logdir instead)")
        changeable = {k: v for k, v in flags.items() if k not in ("env", "agent", "seed", "action_repeat")}
        # the run lives where it is now, even if it was moved or resumed from another working directory
        run = dataclasses.replace(run, **changeable, logdir=str(resume))
        return run, agent_config, checkpoint.latest(resume / "checkpoints")
    if not flags.get("env") or not flags.get("agent"):
        raise ConfigError("--env and --agent are required (or --resume RUN_DIR); see --list")
    run_fields = {f.name for f in dataclasses.fields(RunConfig)}
    valid = [*run_fields - {"schedule"}, *SCHEDULE_FIELDS, *settable_keys(agents.config_class(flags["agent"]))]
    for key in overrides:
        if key not in valid and key.removeprefix("schedule.") not in SCHEDULE_FIELDS \
                and not any(k.startswith(f"{key}.") for k in valid):   # a bare section name sets its kind
            close = difflib.get_close_matches(key, valid, n=3) or [k for k in valid if k.endswith(f".{key}")]
            hint = f" Did you mean {', '.join(close)}?" if close else " `train.py --list` shows every key."
            raise ConfigError(f"unknown setting {key!r} for --agent {flags['agent']}.{hint}")
    run_overrides = {k: v for k, v in overrides.items() if k in run_fields - {"schedule"}}
    agent_config, schedule = agents.resolve(flags["agent"], {k: v for k, v in overrides.items()
                                                             if k not in run_overrides})
    logdir = logdir or f"runs/{flags['env']}-{flags['agent']}-{flags.get('seed', 0)}-{time.strftime('%Y%m%d-%H%M%S')}"
    run = apply_overrides(RunConfig(**flags, logdir=logdir, schedule=schedule), run_overrides)
    if any((Path(run.logdir) / name).exists() for name in ("checkpoints", "config.json")):
        raise ConfigError(f"{run.logdir} already holds a run; continue it with --resume {run.logdir} "
                          "or pick another --logdir")
    # fail fast on a bad name or an unbuildable env, before any run directory
    envs.make(run.env, seed=0, **agents.agent_class(run.agent).env_options(agent_config)).close()
    return run, agent_config, None


def load_trained_agent(run_dir: Path | str, observation_space, action_space, device: torch.device | str = "cpu"
                       ) -> tuple[RunConfig, object, Agent, int]:
    """The agent of a run directory as its Trainer builds it, with the newest checkpoint's weights: (run config,
    agent config, agent, env steps at that checkpoint). The spaces are those of the run's environment."""
    run, agent_config = load_run_config(Path(run_dir))
    agent = agents.make(run.agent, observation_space, action_space, agent_config, torch.device(device))
    path = checkpoint.latest(Path(run_dir) / "checkpoints")
    meta, state, _ = checkpoint.load(path, device=device)
    try:
        agent.load_state_dict(state["agent"])
    except (KeyError, ValueError, RuntimeError, TypeError) as e:
        first = (str(e).strip().splitlines() or [""])[0]
        raise checkpoint.CheckpointError(f"{path} does not match the run's agent/config ({first})") from None
    return run, agent_config, agent, int(meta["counters"]["env_steps"])


def load_run_config(run_dir: Path) -> tuple[RunConfig, object]:
    """The resolved configs saved in a run directory (for ``--resume``)."""
    path = Path(run_dir) / "config.json"
    if not path.is_file():
        raise checkpoint.CheckpointError(f"{run_dir} is not a run directory (no config.json)")
    saved = checkpoint.read_json(path)
    try:
        if not isinstance(saved, dict) or not isinstance(saved.get("run"), dict) \
                or not isinstance(saved.get("agent"), dict):
            raise ConfigError("it must hold the objects 'run' and 'agent'")
        if "schedule" not in saved["run"]:   # saved before the run owned its schedule: the agent config held it
            moved = {k: saved["agent"].pop(k) for k in SCHEDULE_FIELDS if k in saved["agent"]}
            default = agents.agent_class(saved["run"].get("agent", "svg0")).schedule
            saved["run"]["schedule"] = {**dataclasses.asdict(default), **moved}
        run = from_dict(RunConfig, saved["run"])
        agent_config = from_dict(agents.config_class(run.agent), saved["agent"])
    except (KeyError, TypeError, ValueError) as e:   # ConfigError is a ValueError
        raise checkpoint.CheckpointError(f"{path} is corrupt ({e})") from None
    return run, agent_config
