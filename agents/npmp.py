"""Reuse of neural probabilistic motor primitives (seed 000 Ch 8, §8.4 "Reuse"; ../shared/research/seed000.md §8).

The frozen NPMP decoder pi(a_t | s_t, z_t) (priors/npmp) is the low-level controller; a new high-level policy
outputs z_t every step (every k-th with ``--action-repeat k``, below) and is trained by SVG(0) + Retrace
(agents/svg0.py, Alg 9) -- the thesis's setup, which gives no high-level architecture or hyperparameters, so svg0's
defaults apply. ``--agent npmp`` is svg0 acting through ``priors.reuse.LatentActionEnv``:
- z_t = ``latent_scale`` * (the policy's action in [-1, 1]); the AR(1) prior's marginal is N(0, I), so the default
  scale 3 (svg0's, shared with Ch 7's latent-space reuse) lets the policy reach +-3 standard deviations;
- the environment receives clip(decoder mean, -1, 1): the decoder was trained on actions in [-1, 1] without
  squashing (priors/npmp/model.py), so its mean is clipped, not tanh-squashed; the decoder's fixed-std noise is not
  added (the high-level policy explores);
- ``latent_mode=innovation``: the action is instead the AR(1) prior's innovation, z_t = alpha z_{t-1} +
  sqrt(1 - alpha^2) * latent_scale * action, and the policy observes z_{t-1} (a choice the thesis leaves open;
  docs/npmp.md measures both);
- ``--action-repeat k`` holds each high-level action for k control steps while the decoder acts on every one of them
  from the state it is in (the env's own repeat would hold the decoder's action open loop): the high-level policy
  decides every k-th step, z held (direct) or driven by the held innovation (innovation), the rewards summed;
- the decoder reads the observation groups it was trained on (the primitives' ``obs_groups``, the CMU humanoid's
  ``proprio``); the high-level policy sees every group of the environment (proprioception and the task);
- ``primitives`` (default: the primitives shipped in data/primitives/npmp) names the primitives directory; a
  relative path is taken from the current directory and stored resolved in the run's config.json. A missing,
  corrupt or foreign file, or primitives for another body, stop the run with one line (ConfigError).
- ``steer_walk`` (a departure from §8.4, off by default; docs/npmp.md, "Steering on `humanoid`"): the high-level
  action is instead one number, the yaw rate (times ``steer_max_rate`` deg/s) at which the walk ``steer_walk`` bends,
  and the primitives' own encoder reads that bent walk (``priors.reuse.YawRateActionEnv``). It needs primitives that
  read the reference's path (distilled with ``--path-offsets``), a mocap file ``steer_mocap`` holding the walk (looped
  to last the episode, ``envs.mocap.convert --loop``) and its arcs ``<walk>-left<R>``/``-right<R>`` at
  ``steer_arc_rate`` R (``-stepleft<R>``/``-stepright<R>`` with ``steer_arc_style=stepped``: arcs turned by the
  steps, ``envs.mocap.convert --curve-style stepped``), and a locomotion task: every episode then starts on the
  walk's first frame.
Everything else (replay, Retrace, entropy regularisation, checkpoints) is svg0's; its ``--set`` keys apply.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import torch

from agents.config import ConfigError
from agents.dqn import DQNAgent, DQNConfig, Exploration
from agents.hindsight import relabel_episode
from agents.schedule import Schedule
from agents.svg0 import SVG0Agent, SVG0Config
from envs.mocap.convert import CURVE_STYLES, curve_suffix
from priors.npmp import DEFAULT_PRIMITIVES, ModuleFileError, load_primitives
from priors.reuse import LATENT_MODES, ClipChoiceActionEnv, LatentActionEnv, YawRateActionEnv


@dataclasses.dataclass(frozen=True)
class NPMPAgentConfig(SVG0Config):
    primitives: str = str(DEFAULT_PRIMITIVES)  # a primitives directory (priors/npmp save_primitives)
    latent_mode: str = "direct"  # direct: z_t = latent_scale * action; innovation: the action is the AR(1) prior's
                                 # innovation and the policy observes z_{t-1} (priors/reuse.py)
    steer_walk: str = ""         # a looped walk in steer_mocap: the action is the yaw rate it bends at (module doc)
    steer_mocap: str = ""        # the mocap file with steer_walk and its arcs at steer_arc_rate
    steer_arc_rate: float = 15.0  # deg/s: the arcs' rate, as in their names (<walk>-left15)
    steer_max_rate: float = 15.0  # deg/s: the rate of the action 1
    steer_slew: float = 15.0      # deg/s per s: the most the walk's rate changes
    steer_arc_style: str = "pivot"  # how the arcs were bent (envs.mocap.convert --curve-style): pivot (<walk>-left15)
                                    # or stepped (<walk>-stepleft15)

    def __post_init__(self):
        for key in ("primitives", "steer_mocap"):   # resolved once, so that --resume from elsewhere finds the file
            if getattr(self, key):
                object.__setattr__(self, key, str(Path(getattr(self, key)).expanduser().resolve()))

    def validate(self) -> None:
        super().validate()
        if self.latent_mode not in LATENT_MODES:
            raise ConfigError(f"latent_mode must be one of {', '.join(LATENT_MODES)}, got {self.latent_mode!r}")
        if not self.primitives:
            raise ConfigError("primitives must name an NPMP primitives directory")
        if self.steer_walk:
            if not self.steer_mocap or not Path(self.steer_mocap).is_file():
                raise ConfigError(f"steer_walk needs steer_mocap, the mocap file holding it and its arcs "
                                  f"(envs.mocap.convert --loop --curve), got {self.steer_mocap or 'none'}")
            if self.latent_mode != "direct":
                raise ConfigError("steer_walk makes the action a yaw rate: latent_mode does not apply")
            if not (self.steer_arc_rate > 0 and self.steer_max_rate > 0 and self.steer_slew > 0):
                raise ConfigError("steer_arc_rate, steer_max_rate and steer_slew must be > 0")
            if self.steer_arc_style not in CURVE_STYLES:
                raise ConfigError(f"steer_arc_style must be one of {', '.join(CURVE_STYLES)}, got "
                                  f"{self.steer_arc_style!r}")
        if self.latent_controller:
            raise ConfigError("npmp acts through its primitives; latent_controller (svg0's Ch 7 latent prior) "
                              "cannot be combined with it")


class NPMPAgent(SVG0Agent):
    Config = NPMPAgentConfig

    @staticmethod
    def acts_through_controller(config: NPMPAgentConfig) -> bool:
        return True

    @staticmethod
    def env_options(config: NPMPAgentConfig) -> dict:
        """With ``steer_walk``, every episode starts on the walk's first frame."""
        return {"start_snippet": config.steer_walk, "ref_path": config.steer_mocap} if config.steer_walk else {}

    @staticmethod
    def wrap_env(env, config: NPMPAgentConfig, device, action_repeat: int = 1):
        """The environment as the high-level policy sees it: actions are the frozen decoder's latents, or with
        ``steer_walk`` the yaw rate of the walk its encoder reads."""
        try:
            model, meta = load_primitives(config.primitives, device)
            if config.steer_walk:
                return YawRateActionEnv(env, model, walk_references(config.steer_walk, config.steer_arc_rate,
                                                                   config.steer_mocap, device,
                                                                   config.steer_arc_style), meta["obs_groups"],
                                        config.steer_arc_rate, config.steer_max_rate, config.steer_slew,
                                        repeat=action_repeat)
            return LatentActionEnv(env, model.decode, model.config.latent_dim, meta["obs_groups"],
                                   config.latent_scale, device, mean_to_action="clip",
                                   action_dim=model.config.action_dim, latent_mode=config.latent_mode,
                                   ar_coef=model.config.ar_coef, repeat=action_repeat)
        except ModuleFileError as e:
            raise ConfigError(f"primitives: {e}") from None
        except ValueError as e:   # primitives that do not read the path
            raise ConfigError(f"primitives {config.primitives}: {e}") from None


MOCAP = Path(__file__).resolve().parents[1] / "data" / "mocap"
# the primitives taught the 16_27 walking turns and their chains (docs/npmp.md, "Targets through the clip primitives")
CLIP_PRIMITIVES = DEFAULT_PRIMITIVES.parent / "npmp-clips"


@dataclasses.dataclass(frozen=True)
class NPMPClipsConfig(DQNConfig):
    primitives: str = str(CLIP_PRIMITIVES)   # a primitives directory (priors/npmp save_primitives) taught the clips
    clips: str = "16_27-0,16_27-0-mirror"    # the choices, CLIP[:FRAMES] (parse_clip_choices); the first starts
                                             # every episode (its first start_frames frames walk before it turns)
    clip_mocap: str = str(MOCAP / "cmu_turns.h5")   # the files holding them, comma-separated
    start_frames: int = 20       # frames of the first clip before the first choice
    blend: int = 7               # frames over which each join fades in (ReferenceChain); the teacher's chains
                                 # (pipelines.npmp chain --blend) must have been blended the same way
    high_level_obs: str = "task,clip,plan"   # the observation groups the high level sees: the target, its last
                                             # choice and where the clips already chosen end (a choice acts only
                                             # after them: docs/npmp.md, "A high level that sees its plan");
                                             # "": all of them, the body too
    epsilon_decay_steps: int = 300      # decisions (about a second each), not control steps (exploration=epsilon)
    # bootstrapped heads (agents/dqn.py, seed 004 §4.2): greedy on 200 episodes 0.215-0.25 targets per episode over
    # 6 seeds against 0.19-0.23 epsilon-greedy, higher in every seed (docs/npmp.md, "A high level that sees its plan")
    exploration: Exploration = "bootstrap"
    hindsight_goals: int = 4     # relabelled copies of each finished episode, the target moved to where the walker
                                 # went (agents/hindsight.py; needs the task features in high_level_obs); 0: none

    def __post_init__(self):   # resolved once, so that --resume from elsewhere finds the files
        object.__setattr__(self, "primitives", str(Path(self.primitives).expanduser().resolve()))
        object.__setattr__(self, "clip_mocap", ",".join(str(Path(p).expanduser().resolve())
                                                        for p in self.clip_mocap.split(",") if p))

    def validate(self) -> None:
        super().validate()
        parse_clip_choices(self.clips.split(","))
        if not self.clip_mocap:
            raise ConfigError("clip_mocap must name the mocap files holding the clips")
        if self.start_frames < 3:
            raise ConfigError(f"start_frames must be >= 3, got {self.start_frames}")
        if self.blend < 0:
            raise ConfigError(f"blend must be >= 0 frames, got {self.blend}")
        if self.hindsight_goals < 0:
            raise ConfigError(f"hindsight_goals must be >= 0, got {self.hindsight_goals}")
        groups = [g for g in self.high_level_obs.split(",") if g]
        if self.hindsight_goals and groups and "task" not in groups:
            raise ConfigError("hindsight_goals relabels the task features: high_level_obs must include task")


class NPMPClipsAgent(DQNAgent):
    """A high level that chooses which clip the frozen primitives imitate next (a departure from seed 000 §8.4,
    whose high level outputs z; docs/npmp.md, "A high level that chooses clips"): DQN (agents/dqn.py) over the
    choices of ``clips``, acting through ``priors.reuse.ClipChoiceActionEnv``; every episode starts on the first
    clip's first frame. One action lasts until the chosen clip's frames are nearly used up (about a second). By
    default it sees the target, its last choice and where the clips already chosen end (``plan``), explores with
    bootstrapped heads and learns from hindsight goals too (``NPMPClipsConfig``)."""

    Config = NPMPClipsConfig
    # counted in decisions (about a second each); what the measured runs used (docs/npmp.md, "A high level that
    # learns, in part"): DQN's own schedule, stated here so that a change to DQN's does not change this agent's
    schedule = Schedule(replay_capacity=10_000, learning_starts=128, update_every=1, updates_per_step=1,
                        batch_size=128)

    def __init__(self, observation_space, action_space, config: NPMPClipsConfig, device="cpu"):
        super().__init__(observation_space, action_space, config, device)
        self.relabels = config.hindsight_goals > 0
        if self.relabels and "task" not in self.layout.slices:
            raise ConfigError("hindsight_goals relabels the task features; this environment has none")
        # relabelling's own stream of goal draws, seeded from the run's (torch is seeded first)
        self.relabel_rng = np.random.default_rng(int(torch.randint(2**62, ())))

    def relabel(self, first_obs, steps):
        """Hindsight goals (agents/hindsight.py): ``hindsight_goals`` copies of the episode."""
        return relabel_episode(first_obs, steps, self.layout.slices["task"], self.config.hindsight_goals,
                               self.relabel_rng)

    @staticmethod
    def acts_through_controller(config: NPMPClipsConfig) -> bool:
        return True

    @staticmethod
    def env_options(config: NPMPClipsConfig) -> dict:
        clips, _ = parse_clip_choices(config.clips.split(","))
        where = clip_files(config.clip_mocap.split(","))
        if clips[0] not in where:
            raise ConfigError(f"{clips[0]} in none of {config.clip_mocap}")
        return {"start_snippet": clips[0], "ref_path": where[clips[0]]}

    @staticmethod
    def wrap_env(env, config: NPMPClipsConfig, device, action_repeat: int = 1):
        if action_repeat != 1:
            raise ConfigError("npmp-clips: one action already lasts a clip's segment; action_repeat must be 1")
        clips, frames = parse_clip_choices(config.clips.split(","))
        graph, _ = clip_graph(clips, config.clip_mocap.split(","))
        try:
            model, meta = load_primitives(config.primitives, device)
            groups = tuple(g for g in config.high_level_obs.split(",") if g) or None
            return ClipChoiceActionEnv(env, model, graph, clips, clips[0], meta["obs_groups"], config.start_frames,
                                       segment_frames=frames, blend=config.blend, high_level_groups=groups)
        except ModuleFileError as e:
            raise ConfigError(f"primitives: {e}") from None
        except ValueError as e:
            raise ConfigError(f"npmp-clips: {e}") from None


def walk_references(walk: str, arc_rate: float, mocap: str, device="cpu", style: str = "pivot") -> dict:
    """The walk and its two arcs at ``arc_rate`` deg/s in ``mocap`` as the encoder reads them: ``{"straight",
    "left", "right"} -> Reference`` of (states, root) tensors on ``device`` (``YawRateActionEnv``'s
    ``references``); ConfigError where the file lacks one. ``style``: how the arcs were bent (their ids,
    ``envs.mocap.convert.curve_suffix``)."""
    from envs import EnvError
    from envs.mocap.tracking import Reference, reference_playback, snippet_ids

    left, right = curve_suffix(arc_rate, style=style)
    snippets = {"straight": walk, "left": walk + left, "right": walk + right}
    try:
        missing = sorted(set(snippets.values()) - set(snippet_ids(mocap, augmented=True)))
    except (EnvError, OSError) as e:
        raise ConfigError(f"steer_mocap {mocap}: {e}") from None
    if missing:
        raise ConfigError(f"steer_mocap {mocap} lacks {', '.join(missing)} (the walk and its arcs at "
                          f"{arc_rate:g} deg/s: envs.mocap.convert --loop --curve --curve-style {style})")
    references = {}
    for side, snippet in snippets.items():
        played = reference_playback(snippet, 0, mocap)
        references[side] = Reference(torch.as_tensor(played.states, device=device),
                                     torch.as_tensor(played.root, device=device))
    return references


def parse_clip_choices(clips: list[str]) -> tuple[list[str], dict[str, int]]:
    """``CLIP[:FRAMES]`` items -> (clip ids, clip -> FRAMES where given): a choice that follows a long clip (a looped
    walk) for at most FRAMES frames (``priors.reuse.ClipChoiceActionEnv``); ConfigError if malformed."""
    ids, frames = [], {}
    for item in clips:
        clip, _, count = item.partition(":")
        if not clip or (count and (not count.isdigit() or int(count) < 12)):
            raise ConfigError(f"clips are CLIP or CLIP:FRAMES with FRAMES a whole number >= 12, got {item!r}")
        ids.append(clip)
        if count:
            frames[clip] = int(count)
    if not ids or len(set(ids)) != len(ids):
        raise ConfigError(f"need one or more distinct clips, got {', '.join(clips) or 'none'}")
    return ids, frames


def clip_files(mocap: list[str]) -> dict[str, str]:
    """clip id -> the first of the mocap files ``mocap`` that holds it; ConfigError for a missing or bad file."""
    from envs import EnvError
    from envs.mocap.tracking import snippet_ids

    where = {}
    for path in mocap:
        try:
            for clip in snippet_ids(path, augmented=True):
                where.setdefault(clip, str(path))
        except (EnvError, OSError) as e:
            raise ConfigError(f"mocap file {path}: {str(e).splitlines()[0]}") from None
    return where


def clip_graph(clips: list[str], mocap: list[str], **graph_options):
    """(``priors.npmp.reference.ClipGraph`` of ``clips`` as the encoder reads them, clip -> its mocap file);
    ConfigError where a clip is in none of ``mocap``."""
    from envs.mocap.tracking import reference_playback
    from priors.npmp.reference import ClipGraph

    where = clip_files(mocap)
    missing = [c for c in clips if c not in where]
    if missing:
        raise ConfigError(f"{', '.join(missing)} in none of {', '.join(map(str, mocap))}")
    try:
        graph = ClipGraph({clip: reference_playback(clip, 0, where[clip]) for clip in clips}, **graph_options)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return graph, {clip: where[clip] for clip in clips}
