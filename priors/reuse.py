"""Reusing a latent space as an action space (seed 000 Fig 7.5; Ch 8 §8.4 reuses NPMP decoders the same way).

``LatentActionEnv`` wraps an environment so that a new policy's action is the latent z of a frozen decoder
pi_0(a | s, z): each step, z = scale * action (the policy's actions live in [-1, 1]; z has the AR(1) marginal
N(0, I), so scale 3 covers +-3 standard deviations), and the environment receives the decoder's mean for the
current observation, made an action by ``mean_to_action``: ``"tanh"`` for the Ch 7 latent prior, whose mean is
pre-squash, ``"clip"`` to [-1, 1] for NPMP decoders, whose mean is already an action (priors/npmp/model.py). The
low-level controller is deterministic: the high-level policy's own noise explores (a choice the thesis leaves
open). Observations, rewards and episode ends pass through unchanged (rewards summed over a ``repeat``, below).

``latent_mode="innovation"`` (``ar_coef`` alpha required) makes the action the innovation of the AR(1) prior the
primitives were distilled with (eq 8.2) instead of z itself: z_t = alpha z_{t-1} + sqrt(1 - alpha^2) * scale *
action, from z_{-1} = 0 at each reset, and the observation gains the group ``latent`` holding the z of the last step
(the policy's state must contain z_{t-1}). A policy whose actions are small and noisy then drives the decoder with
latents like the prior's samples, the neighbourhood the primitives were trained in and in which predictive sampling
over latents (benchmarks/npmp_prior_samples.py, ``planned``) finds controls that keep the humanoid up and reach
targets; with the default ``"direct"`` mode z_t = scale * action, whose noise is white from step to step.

``repeat = k`` holds each action for k control steps (a high-level policy that decides every k-th step): on each,
z is recomputed from the held action (held itself in direct mode, an AR(1) step with the held innovation in
innovation mode) and decoded against that step's observation, so the controller stays closed loop; the rewards are
summed and the repeat stops at the episode's end, as an environment's own action repeat does.

Diagnostics: ``info["latent"]`` is the step's z (with a repeat, that of its last control step); on an episode's
last step ``info["episode_metrics"]`` gains ``latent/abs_mean`` (mean |z| over steps and dimensions) and
``latent/std`` (the per-dimension std of z over the episode, averaged over dimensions: near 0 for a constant z, 1
for z drawn like the AR(1) marginal).

``get_state``/``set_state`` capture and restore the episode in progress (the wrapped environment's capture,
envs/dmc.py, with the observation the next latent is decoded against), so a planner can try latents with the
simulator itself and come back (benchmarks/npmp_prior_samples.py).
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from priors.io import ModuleFileError

MEAN_TO_ACTION = {"tanh": torch.tanh, "clip": lambda mean: mean.clamp(-1.0, 1.0)}
LATENT_MODES = ("direct", "innovation")
LATENT_OBS = "latent"   # the observation group of z_{t-1} in innovation mode


def check_fits(env: gym.Env, controller: str, obs_groups: dict[str, int], action_dim: int | None) -> None:
    """ModuleFileError unless ``env`` has the observation groups (name -> size) a frozen ``controller`` reads and
    takes the ``action_dim`` actions it outputs (None: not checked)."""
    spaces = env.observation_space.spaces
    actual = {g: int(np.prod(spaces[g].shape)) for g in obs_groups if g in spaces}
    if actual != dict(obs_groups):
        raise ModuleFileError(f"{controller} was trained on observation groups {dict(obs_groups)}, "
                              f"this environment has {({g: int(np.prod(s.shape)) for g, s in spaces.items()})}")
    if action_dim is not None and env.action_space.shape != (action_dim,):
        raise ModuleFileError(f"{controller} outputs {action_dim} actions, this environment takes "
                              f"{env.action_space.shape}")


class LatentActionEnv(gym.Wrapper):
    def __init__(self, env: gym.Env, decode, latent_dim: int, obs_groups: dict[str, int], scale: float = 3.0,
                 device: torch.device | str = "cpu", mean_to_action: str = "tanh", action_dim: int | None = None,
                 latent_mode: str = "direct", ar_coef: float | None = None, repeat: int = 1):
        super().__init__(env)
        spaces = env.observation_space.spaces
        check_fits(env, "the latent controller", obs_groups, action_dim)
        if mean_to_action not in MEAN_TO_ACTION:
            raise ValueError(f"mean_to_action must be one of {', '.join(MEAN_TO_ACTION)}, got {mean_to_action!r}")
        if latent_mode not in LATENT_MODES:
            raise ValueError(f"latent_mode must be one of {', '.join(LATENT_MODES)}, got {latent_mode!r}")
        if not isinstance(repeat, int) or repeat < 1:
            raise ValueError(f"repeat must be a positive integer, got {repeat!r}")
        if latent_mode == "innovation":
            if ar_coef is None or not 0.0 <= ar_coef < 1.0:
                raise ValueError(f"latent_mode=innovation needs the prior's ar_coef in [0, 1), got {ar_coef}")
            if LATENT_OBS in spaces:
                raise ValueError(f"the environment already has an observation group {LATENT_OBS!r}")
            self.observation_space = gym.spaces.Dict({**spaces, LATENT_OBS: gym.spaces.Box(
                -np.inf, np.inf, (latent_dim,), np.float32)})
        self.decode, self.groups, self.scale, self.device = decode, list(obs_groups), scale, torch.device(device)
        self.to_action = MEAN_TO_ACTION[mean_to_action]
        self.latent_mode, self.ar_coef, self.latent_dim = latent_mode, ar_coef, latent_dim
        self.action_space = gym.spaces.Box(-1.0, 1.0, (latent_dim,), np.float32)
        self.repeat = repeat
        if repeat > 1 and "render_fps" in env.metadata:   # one frame per decision in videos
            self.metadata = {**env.metadata, "render_fps": max(1, round(env.metadata["render_fps"] / repeat))}
        self._obs = None
        self._z = np.zeros(latent_dim, np.float32)   # z_{t-1}
        self._latents: list[np.ndarray] = []

    def _observe(self, obs):
        return {**obs, LATENT_OBS: self._z.copy()} if self.latent_mode == "innovation" else obs

    def reset(self, **kwargs):
        self._obs, info = self.env.reset(**kwargs)
        self._latents, self._z = [], np.zeros(self.latent_dim, np.float32)
        return self._observe(self._obs), info

    def latent(self, latent_action: np.ndarray) -> np.ndarray:
        """The z this step's action gives (in innovation mode, from the z of the last step)."""
        scaled = self.scale * np.asarray(latent_action, np.float32)
        if self.latent_mode == "direct":
            return scaled
        a = self.ar_coef
        return (a * self._z + np.sqrt(1.0 - a * a) * scaled).astype(np.float32)

    @torch.no_grad()
    def decoded_action(self, z: np.ndarray) -> np.ndarray:
        """The environment action of latent z at the current observation."""
        obs = np.concatenate([np.asarray(self._obs[g], np.float32).ravel() for g in self.groups])
        mean, _ = self.decode(torch.as_tensor(obs, device=self.device), torch.as_tensor(z, device=self.device))
        return self.to_action(mean).cpu().numpy()

    def low_level_action(self, latent_action: np.ndarray) -> np.ndarray:
        return self.decoded_action(self.latent(latent_action))

    def get_state(self) -> dict | None:
        """The episode in progress; None where the wrapped environment cannot capture its own."""
        capture = getattr(self.env.unwrapped, "get_state", None)
        inner = capture() if capture is not None else None
        return None if inner is None else {"env": inner, "obs": self._obs, "latents": list(self._latents),
                                           "z": self._z.copy()}

    def set_state(self, state: dict) -> None:
        """Continue the episode ``get_state`` captured."""
        self.env.unwrapped.set_state(state["env"])
        self._obs, self._latents, self._z = state["obs"], list(state["latents"]), state["z"].copy()

    def step(self, action):
        reward = 0.0
        for _ in range(self.repeat):
            z = self.latent(action)
            self._obs, r, terminated, truncated, info = self.env.step(self.decoded_action(z))
            reward += r
            self._z = z
            self._latents.append(z)
            if terminated or truncated:
                break
        info = {**info, "latent": z}
        if terminated or truncated:
            latents = np.stack(self._latents)
            info["episode_metrics"] = {**info.get("episode_metrics", {}),
                                       "latent/abs_mean": float(np.abs(latents).mean()),
                                       "latent/std": float(latents.std(axis=0).mean())}
        return self._observe(self._obs), reward, terminated, truncated, info


STEER_OBS = "steer"   # the observation group of the yaw rate the reference is bent at (YawRateActionEnv)


@torch.no_grad()
def imitation_step(model, obs: dict, groups: list[str], z: torch.Tensor, reference_input: torch.Tensor):
    """(z_t, the environment's action) of frozen primitives imitating a reference: z_t = the encoder's mean given
    z_{t-1} = ``z``, the state (``groups`` of ``obs``) and what it reads of the reference; the action is
    clip(decoder mean, -1, 1)."""
    state = torch.as_tensor(np.concatenate([np.asarray(obs[g], np.float32).ravel() for g in groups]), device=z.device)
    z, _ = model.encode_step(z, torch.cat([state, reference_input]))
    mean, _ = model.decode(state, z)
    return z, mean.clamp(-1.0, 1.0).cpu().numpy()


class YawRateActionEnv(gym.Wrapper):
    """A policy that steers a walk: its action (one number in [-1, 1]) times ``max_rate`` is the yaw rate (deg/s)
    at which the walk the primitives follow bends (issue 13; docs/npmp.md, "Steering on `humanoid`"). A departure
    from seed 000 §8.4, whose high level outputs the latent z: here it chooses the reference, and the frozen
    primitives' own encoder turns that into z (``priors.npmp.reference.bent_reference_input``), as when they
    imitate a clip they are shown.

    On every control step the rate the reference bends at moves toward the wanted one by at most ``slew`` deg/s
    per s (a reference that turns gradually, as the arcs they were trained on do; a jump between arcs brought the
    students down) and is held at 0 for the first ``hold_seconds`` (the walk's lead-in strides, its own frames);
    z_t = the encoder's mean given z_{t-1}, the proprio state s_t and the walk's frame t bent at that rate; the
    environment receives clip(decoder mean, -1, 1). The episode must start on the walk's first frame
    (``envs.locomotion`` ``start_snippet``), so that frame t is where the walker is. ``references``: the walk and its
    arcs at ``arc_rate`` deg/s, ``{"straight", "left", "right"} -> (states, root)`` tensors on the model's device
    (``envs.mocap.tracking.reference_playback``), lasting at least the episode (a looped walk,
    ``envs.mocap.convert --loop``); past their end the last frame repeats.

    The observation gains the group ``steer``: the current rate over ``max_rate``, the rest of the policy's state.
    ``repeat = k`` holds each action for k control steps (rewards summed), as ``LatentActionEnv`` does. On an
    episode's last step ``info["episode_metrics"]`` gains ``steer/mean_abs_rate`` (deg/s)."""

    def __init__(self, env: gym.Env, model, references: dict, obs_groups: dict[str, int], arc_rate: float,
                 max_rate: float | None = None, slew: float = 15.0, hold_seconds: float = 2.0, repeat: int = 1):
        from priors.npmp.reference import CONTROL_STEP_SECONDS, bent_reference_input

        super().__init__(env)
        spaces = env.observation_space.spaces
        check_fits(env, "the primitives' decoder", obs_groups, model.config.action_dim)
        max_rate = arc_rate if max_rate is None else max_rate
        if not (arc_rate > 0 and max_rate > 0 and slew > 0 and hold_seconds >= 0):
            raise ValueError(f"need arc_rate > 0, max_rate > 0, slew > 0 and hold_seconds >= 0, got {arc_rate}, "
                             f"{max_rate}, {slew}, {hold_seconds}")
        if not isinstance(repeat, int) or repeat < 1:
            raise ValueError(f"repeat must be a positive integer, got {repeat!r}")
        if STEER_OBS in spaces:
            raise ValueError(f"the environment already has an observation group {STEER_OBS!r}")
        self.model, self.groups, self.repeat = model, list(obs_groups), repeat
        self.device = next(model.parameters()).device
        self.read = bent_reference_input(model, references, arc_rate)
        self.max_rate, self.slew_per_step = float(max_rate), float(slew) * CONTROL_STEP_SECONDS
        self.hold_steps = round(hold_seconds / CONTROL_STEP_SECONDS)
        self.observation_space = gym.spaces.Dict({**spaces, STEER_OBS: gym.spaces.Box(-np.inf, np.inf, (1,),
                                                                                      np.float32)})
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        if repeat > 1 and "render_fps" in env.metadata:   # one frame per decision in videos
            self.metadata = {**env.metadata, "render_fps": max(1, round(env.metadata["render_fps"] / repeat))}
        self._obs, self._t, self._rate, self._z, self._abs_rate_sum = None, 0, 0.0, None, 0.0

    def _observe(self, obs):
        return {**obs, STEER_OBS: np.array([self._rate / self.max_rate], np.float32)}

    def reset(self, **kwargs):
        self._obs, info = self.env.reset(**kwargs)
        self._t, self._rate, self._abs_rate_sum = 0, 0.0, 0.0
        self._z = torch.zeros(self.model.config.latent_dim, device=self.device)
        return self._observe(self._obs), info

    @torch.no_grad()
    def low_level_action(self, wanted_rate: float) -> np.ndarray:
        """This step's rate (moved toward ``wanted_rate``, module rules) and the environment action it gives."""
        wanted = float(np.clip(wanted_rate, -self.max_rate, self.max_rate)) if self._t >= self.hold_steps else 0.0
        self._rate += float(np.clip(wanted - self._rate, -self.slew_per_step, self.slew_per_step))
        self._z, action = imitation_step(self.model, self._obs, self.groups, self._z, self.read(self._t, self._rate))
        return action

    def get_state(self) -> dict | None:
        """The episode in progress; None where the wrapped environment cannot capture its own."""
        capture = getattr(self.env.unwrapped, "get_state", None)
        inner = capture() if capture is not None else None
        return None if inner is None else {"env": inner, "obs": self._obs, "t": self._t, "rate": self._rate,
                                           "z": self._z.clone(), "abs_rate_sum": self._abs_rate_sum}

    def set_state(self, state: dict) -> None:
        """Continue the episode ``get_state`` captured."""
        self.env.unwrapped.set_state(state["env"])
        self._obs, self._t, self._rate = state["obs"], state["t"], state["rate"]
        self._z, self._abs_rate_sum = state["z"].clone(), state["abs_rate_sum"]

    def step(self, action):
        wanted = float(np.asarray(action, np.float32).reshape(-1)[0]) * self.max_rate
        reward = 0.0
        for _ in range(self.repeat):
            self._obs, r, terminated, truncated, info = self.env.step(self.low_level_action(wanted))
            self._t += 1
            self._abs_rate_sum += abs(self._rate)
            reward += r
            if terminated or truncated:
                break
        info = {**info, "yaw_rate": self._rate}
        if terminated or truncated:
            info["episode_metrics"] = {**info.get("episode_metrics", {}),
                                       "steer/mean_abs_rate": self._abs_rate_sum / self._t}
        return self._observe(self._obs), reward, terminated, truncated, info


CLIP_OBS = "clip"   # the observation group of the clip being followed (ClipChoiceActionEnv)
PLAN_OBS = "plan"   # ... and of where the clips already chosen will take the walker (ClipChoiceActionEnv)


def plan_features(root_poses: np.ndarray, t: int) -> np.ndarray:
    """Where a chain's end lies from its frame ``t`` (``ReferenceChain.root_poses``: x, y, heading): the end's
    position (m) ahead of and to the left of the walking direction at ``t`` (the CMU humanoid walks along its
    heading frame's -y), and the sine and cosine of the turn between them (counter-clockwise, to the left, positive).
    Laid from the walker's pose (as the primitives follow it), this is where the chain already chosen leaves the
    walker."""
    from priors.npmp.reference import move_poses

    t = min(int(t), len(root_poses) - 1)
    x, y, turn = move_poses(np.asarray(root_poses[-1:], np.float64), root_poses[t], np.zeros(3))[0]
    return np.array([-y, x, np.sin(turn), np.cos(turn)], np.float32)


class ClipChoiceActionEnv(gym.Wrapper):
    """A policy that chooses which clip the primitives imitate next (issue 13; docs/npmp.md, "A high level that
    chooses clips"). A departure from seed 000 §8.4, whose high level outputs z: the action is an index into
    ``choices`` (clip ids of ``graph``, ``priors.npmp.reference.ClipGraph``); the chain of clips the walker follows
    (``ReferenceChain``) is continued with that clip from its best-matching entry to its end (or for
    ``segment_frames[clip]`` frames: a long looped walk taken a stride or two at a time), and the frozen
    primitives' own encoder reads the chain, as when they imitate a clip they are shown: z_t = the encoder's mean
    given z_{t-1}, the proprio state and the chain's frames t+1..t+K; the environment receives clip(decoder mean,
    -1, 1). One step of this environment runs until ``lead`` frames of the chain are left (the next choice is then
    made while the walker still has frames to follow, and every frame the encoder reads, far states included, is one
    already chosen), or the episode ends; rewards are summed. ``blend`` (< ``lead``) fades each join in over that
    many frames (``ReferenceChain``).

    Every episode starts on the first frame of ``start_clip`` (``envs.locomotion`` ``start_snippet``): the chain
    begins with its first ``start_frames`` frames. The observation gains the groups ``clip``: the one-hot of the last
    choice (zeros before the first), and ``plan``: where the frames already chosen end, from where the walker is now
    (``plan_features``). A choice takes effect only after them: ``lead`` frames (about 2 s for primitives that read
    60 frames ahead, two choices' worth), so without ``plan`` the high level cannot tell what it has already set in
    motion. ``high_level_groups``, when given, keeps only those groups of it (what the high level sees, e.g.
    ``("task", "clip", "plan")``: where the target is, what it chose last and where that leaves the walker; the
    primitives still read the whole body). ``info``: ``clip``, ``entry`` (the frame it was entered at), ``match`` (the
    entry's distance, ``ClipGraph.entry``), ``control_steps`` (control steps run: the training loop counts
    these as environment steps) and, where the environment reports ``root_pose`` (envs/locomotion.py),
    ``start_pose`` (the pose the segment started from) and ``root_path`` (the root's xyz after each of its control
    steps; hindsight relabelling, agents/hindsight.py); on an episode's last step ``info["episode_metrics"]``
    gains ``clips/segments`` and ``clips/mean_match``. ``observer``, when set, is called with (the unwrapped environment, steps so far)
    after every control step (to draw an episode at the control rate)."""

    def __init__(self, env: gym.Env, model, graph, choices: list[str], start_clip: str, obs_groups: dict[str, int],
                 start_frames: int = 30, lead: int | None = None, segment_frames: dict[str, int] | None = None,
                 blend: int = 0, high_level_groups: tuple[str, ...] | None = None):
        super().__init__(env)
        spaces = env.observation_space.spaces
        check_fits(env, "the primitives' decoder", obs_groups, model.config.action_dim)
        unknown = [c for c in [*choices, start_clip] if c not in graph.references]
        if not choices or unknown:
            raise ValueError(f"choices must be clips of the graph ({', '.join(graph.references)}); got "
                             f"{', '.join(choices) or 'none'}")
        taken = [g for g in (CLIP_OBS, PLAN_OBS) if g in spaces]
        if taken:
            raise ValueError(f"the environment already has an observation group {taken[0]!r}")
        # the furthest frame the encoder reads must be one the high level has chosen already
        reach = max(model.config.read_offsets)
        self.lead = reach + 3 if lead is None else int(lead)
        if self.lead < reach:
            raise ValueError(f"lead must be at least as far as the primitives read ahead ({reach} frames), got "
                             f"{self.lead}")
        if not 0 <= blend < self.lead:
            raise ValueError(f"blend must lie in [0, lead = {self.lead}): the blended frames must lie ahead of the "
                             f"walker; got {blend}")
        self.model, self.graph, self.choices, self.groups = model, graph, list(choices), list(obs_groups)
        self.blend = int(blend)
        self.start_clip, self.start_frames = start_clip, start_frames
        self.segment_frames = dict(segment_frames or {})
        if any(n <= self.lead for n in self.segment_frames.values()):
            raise ValueError(f"segment_frames must each exceed lead ({self.lead}), got {self.segment_frames}")
        self.device = next(model.parameters()).device
        seen = {**spaces, CLIP_OBS: gym.spaces.Box(0.0, 1.0, (len(choices),), np.float32),
                PLAN_OBS: gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)}
        self.high_level_groups = list(seen) if high_level_groups is None else list(high_level_groups)
        unknown = [g for g in self.high_level_groups if g not in seen]
        if unknown or not self.high_level_groups:
            raise ValueError(f"the high level's observation groups must be among {', '.join(seen)}; got "
                             f"{', '.join(self.high_level_groups) or 'none'}")
        self.observation_space = gym.spaces.Dict({g: seen[g] for g in self.high_level_groups})
        self.action_space = gym.spaces.Discrete(len(choices))
        self._obs, self._t, self._z, self.chain, self._choice, self._matches = None, 0, None, None, None, []
        self._pose = None   # the walker's root pose (info["root_pose"]) where the next segment starts
        self.observer = None   # called with (the unwrapped environment, steps so far) after every control step

    def _observe(self, obs):
        onehot = np.zeros(len(self.choices), np.float32)
        if self._choice is not None:
            onehot[self._choice] = 1.0
        seen = {**obs, CLIP_OBS: onehot}
        if PLAN_OBS in self.high_level_groups:
            seen[PLAN_OBS] = plan_features(self.chain.root_poses(), self._t)
        return {g: seen[g] for g in self.high_level_groups}

    def reset(self, **kwargs):
        from priors.npmp.reference import ReferenceChain

        self._obs, info = self.env.reset(**kwargs)
        self.chain = ReferenceChain(self.model, self.graph, self.start_clip, self.start_frames, self.blend)
        self._t, self._choice, self._matches, self._pose = 0, None, [], info.get("root_pose")
        self._z = torch.zeros(self.model.config.latent_dim, device=self.device)
        return self._observe(self._obs), info

    def low_level_action(self) -> np.ndarray:
        self._z, action = imitation_step(self.model, self._obs, self.groups, self._z, self.chain.read(self._t))
        return action

    def get_state(self) -> dict | None:
        """The episode in progress; None where the wrapped environment cannot capture its own."""
        capture = getattr(self.env.unwrapped, "get_state", None)
        inner = capture() if capture is not None else None
        return None if inner is None else {"env": inner, "obs": self._obs, "t": self._t, "z": self._z.clone(),
                                           "segments": [list(s) for s in self.chain.segments],
                                           "choice": self._choice, "matches": list(self._matches),
                                           "pose": self._pose}

    def set_state(self, state: dict) -> None:
        """Continue the episode ``get_state`` captured."""
        from priors.npmp.reference import ReferenceChain

        self.env.unwrapped.set_state(state["env"])
        self._obs, self._t, self._z = state["obs"], state["t"], state["z"].clone()
        self.chain = ReferenceChain.from_segments(self.model, self.graph, state["segments"], self.blend)
        self._choice, self._matches, self._pose = state["choice"], list(state["matches"]), state.get("pose")

    def step(self, action):
        choice = int(np.asarray(action).reshape(-1)[0])
        if not 0 <= choice < len(self.choices):
            raise ValueError(f"action must be a choice index in [0, {len(self.choices)}), got {action!r}")
        entry, match = self.chain.append(self.choices[choice], self.segment_frames.get(self.choices[choice]))
        self._choice = choice
        self._matches.append(match)
        reward, steps, terminated, truncated, info = 0.0, 0, False, False, {}
        start_pose, path = self._pose, []
        while len(self.chain) - self._t > self.lead:
            self._obs, r, terminated, truncated, info = self.env.step(self.low_level_action())
            self._t += 1
            steps += 1
            reward += r
            if "root_pose" in info:
                path.append(info["root_pose"][:3])
            if self.observer is not None:
                self.observer(self.env.unwrapped, self._t)
            if terminated or truncated:
                break
        info = {**info, "clip": self.choices[choice], "entry": entry, "match": match, "control_steps": steps}
        if start_pose is not None:   # where the walker went during the segment (hindsight relabelling)
            self._pose = info.get("root_pose", start_pose)   # a choice that ran no step left it where it was
            info = {**info, "start_pose": start_pose, "root_pose": self._pose,
                    "root_path": np.array(path, np.float32).reshape(-1, 3)}
        if terminated or truncated:
            info["episode_metrics"] = {**info.get("episode_metrics", {}), "clips/segments": len(self._matches),
                                       "clips/mean_match": float(np.mean(self._matches))}
        return self._observe(self._obs), reward, terminated, truncated, info
