"""NPMP training data from tracking experts: noisy-rollout BC data and LFPC data (seed 000 §8.2, eqs 8.4-8.9).

Seed 000_02c29175254ceb0c.txt, Ch 8.2 (transcribed in ../shared/research/seed000.md §8.2):
- the expert action is the *mean* of the expert's stochastic policy (§8.1). svg0 policies are tanh-squashed
  Gaussians (agents/distributions.py), so the mean action is tanh(mean(s)), in [-1, 1] (``Expert.mean_action``,
  what the expert's env steps with), and mu_E(s) is the walker's command for it (``Expert.mean_command``). Residual
  experts (``humanoid-track-residual``, a documented departure from the seed in envs/mocap/tracking.py) act through
  a feed-forward reference controller; their action here is the walker's command -- what the NPMP distils --
  mu_E(s, t) = clip(a_ref(t) + residual_scale tanh(mean(s)), -1, 1), with a_ref(t) the env's ``reference_action()``
  at that step (a function of time only, so d mu_E / d s goes through the policy and the clip);
- behavioural cloning from noisy rollouts ("a version of this is equivalent to DART"; eq 8.4): run the expert from
  the start of its clip executing a_t = clip(mu_E(s_t) + eta_t, -1, 1), eta_t ~ N(0, sigma^2 I), and log the
  expert's mean action mu_E(s_t) at the visited state -- never the executed noisy action (``rollout``);
- LFPC (eqs 8.5-8.8): one nominal trajectory {s*_t, a*_t = mu_E(s*_t)} run noise-free from s*_0, with the
  Jacobians J*_t = d mu_E / d s at s*_t (exact autodiff, ``torch.func.jacrev``; ``rollout(..., with_jacobians=True)``
  with sigma = 0). The linear-feedback policy (eq 8.6) is mu_FB(s) = a*_t + J*_t (s - s*_t);
- NPMP with LFPC (eq 8.9): states s*_t + delta_s_t, delta_s_t ~ Delta i.i.d. per step, with action targets
  a*_t + J*_t delta_s_t; the encoder sees the perturbed look-ahead x_t + delta_x_t (``NPMPDataset.sample_lfpc``).
  Eq 8.11's anti-pattern (targets mu_E(s* + delta_s)) is deliberately not offered.

Choices where the thesis is silent:
- action space and noise: all logged actions (mean, executed, LFPC targets) are walker commands in [-1, 1], and the
  noise eta is added there (i.i.d. per actuator, as the thesis's evaluation noise), then converted to the residual
  env's action (``Expert.env_action``); the executed action logged is the env's ``applied_action``;
- states: s is the ``proprio`` observation group (what the NPMP model reads, priors/npmp/model.py); the expert's
  other input, the time in the clip (``task``), is logged but never perturbed, and J* is d mu_E / d proprio only;
- rollouts start at the clip's first frame (``clip_start=True``): the nominal trajectory of eq 8.5 starts at s*_0
  and noisy rollouts share that start, so their states can be compared with the nominal ones time step by time step;
- Delta (a "fixed marginal perturbation distribution estimated from a few noisy trajectories and shared across
  clips", form not given): a zero-mean diagonal Gaussian N(0, diag(std^2)) whose per-dimension variance is the mean
  squared deviation s^eta_t - s*_t (noisy minus nominal state at the same time index t >= 1, over the steps both
  trajectories reached; t = 0 is the shared start and deviates by 0), pooled over the first
  ``perturbation_trajectories`` noisy rollouts of every expert. The mean of squares (not the variance about the
  deviations' own mean) is the maximum-likelihood variance of a zero-mean Gaussian;
- LFPC targets a* + J* delta_s are not clipped to [-1, 1] (eq 8.9 has no clipping; the NPMP decoder is unsquashed);
- per-expert seeds: ``collect`` gives expert i the seed ``seed + i``, so a Ray fan-out of ``collect_expert`` with
  the same seeds writes the same file; each rollout resets its env with a seed drawn from the numpy generator;
- Ray: ``collect_expert`` is a plain function of picklable arguments returning numpy arrays, and ``write_dataset``
  takes the list of its results (``delta_std`` None: ``estimate_delta_std`` of those results);
- mirroring (the thesis's bilateral-symmetry augmentation) is not done here: mirrored snippets (``<id>-mirror``) are
  snippets of their own, with their own experts;
- ``nominal_return`` etc. are the expert's noise-free return from the clip start (relative return: divide by
  ``max_step_reward`` times the snippet's full episode length, pipelines/npmp/experts.py ``reference_score``);
- sampling: subsequences are drawn with trajectories weighted by their number of valid steps and a start uniform
  over the positions that keep the window inside the trajectory where it is long enough; windows that run past a
  trajectory's end (experts that fell early) are zero-padded with mask 0. A step t is valid when s_{t..t+K} exist.

HDF5 layout (one file, written atomically: a temp file in the same directory, fsynced, then ``os.replace``)::

    /                      attrs: format="probctl-npmp-data", version, state_dim, action_dim, meta (JSON)
    /delta_std             [S] float32: Delta's per-dimension std
    /<snippet>/            attrs: expert_dir, env, expert_steps (env steps of the checkpoint), trajectories (N),
                                  action_noise_std,
                                  nominal_return, nominal_steps, nominal_terminated, bc_mean_return, bc_mean_steps,
                                  max_step_reward (tracking.MAX_COMIC_REWARD), seed
        bc/states          [sum_i (T_i + 1), S]  proprio states s_0..s_{T_i} of every noisy rollout, concatenated
        bc/task            [sum_i (T_i + 1), G]  the rest of the expert's observation (time in clip)
        bc/mean_actions    [sum_i T_i, A]        mu_E(s_t): the regression targets (eq 8.4)
        bc/actions         [sum_i T_i, A]        executed (noisy, clipped) actions
        bc/rewards         [sum_i T_i]
        bc/lengths         [N] int64             T_i (actions per rollout)
        bc/terminated      [N] bool              ended by early termination (fall), not by the clip's end
        bc/reference_actions [sum_i T_i, A]      a_ref(t) (residual experts only; nominal/ too)
        nominal/states, nominal/task, nominal/mean_actions, nominal/actions, nominal/rewards   (one trajectory)
        nominal/jacobians  [T, A, S]             J*_t = d mu_E / d s at s*_t
        nominal/lengths, nominal/terminated       [1]
        plan/physics_states [T + 1, X], plan/commands [T, A]   the planner's run an LQR law tracks (FeedbackExpert;
                                                  ``collect --expert-policy lqr`` only): MuJoCo full-physics states
        deviation_sq_sum   [S] float64, deviation_count (attr): the expert's share of Delta's estimate
"""
from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Sequence

import h5py
import numpy as np
import torch

import envs
from agents.config import ConfigError
from agents.loop import load_run_config, load_trained_agent
from agents.observations import ObsLayout
from envs import EnvError
from envs.mocap import tracking
from priors.io import fsync_path

FORMAT = "probctl-npmp-data"
VERSION = 1
LOOKAHEAD = 5  # K of the NPMP encoder (priors/npmp/model.py)
STATE_GROUP = "proprio"


class Expert:
    """A trained single-snippet tracking expert (an svg0 run directory), its newest checkpoint loaded and frozen."""

    def __init__(self, run_dir: Path | str, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32):
        self.run_dir = Path(run_dir)
        run, agent_config = load_run_config(self.run_dir)
        self.env_name, self.action_repeat = run.env, run.action_repeat
        if ":" not in run.env or not run.env.startswith(tracking.FAMILY):
            raise ConfigError(f"{self.run_dir} trains {run.env}, not a single-snippet mocap tracking expert "
                              f"({tracking.TIMED_FAMILY}:<snippet>)")
        self.snippet = run.env.split(":", 1)[1]
        self.device, self.dtype = torch.device(device), dtype
        env = self.make_env(seed=0)
        observation_space, action_space = env.observation_space, env.action_space
        # humanoid-track-residual experts act through a feed-forward reference controller (envs/mocap/tracking.py)
        self.residual_scale = getattr(env, "residual_scale", None)
        env.close()
        if self.residual_scale is not None and self.action_repeat != 1:
            raise ConfigError(f"{self.run_dir}: a residual expert with action_repeat {self.action_repeat} has no "
                              "single reference action per step (use action_repeat 1)")
        self.layout = ObsLayout(observation_space)
        if set(self.layout.groups) != {STATE_GROUP, "task"}:
            raise ConfigError(f"{self.run_dir}: expected observation groups proprio and task, got {self.layout.groups}")
        # the agent as the Trainer builds it, then the newest checkpoint's weights
        _, _, agent, steps = load_trained_agent(self.run_dir, observation_space, action_space, self.device)
        if not hasattr(agent, "policy"):
            raise ConfigError(f"{self.run_dir}: agent {run.agent} has no Gaussian policy to take the mean of")
        self.policy = agent.policy.to(dtype).eval().requires_grad_(False)  # eval: NoisyLinear runs on its means
        # the policy reads normalised observations when the expert was trained with obs_norm (svg0's default)
        self.obs_norm = getattr(agent, "obs_norm", None)
        self.steps = steps
        self.proprio = self.layout.slices[STATE_GROUP]
        self.task = self.layout.slices["task"]
        self.state_dim = self.proprio.stop - self.proprio.start
        self.action_dim = int(action_space.shape[0])

    def make_env(self, seed: int | None = None):
        """The expert's tracking env, every episode starting at the snippet's first frame."""
        try:
            return envs.make(self.env_name, seed=seed, action_repeat=self.action_repeat, clip_start=True)
        except EnvError as e:
            raise ConfigError(f"{self.run_dir}: cannot build its env ({e})") from None

    def flat_obs(self, states: np.ndarray, task: np.ndarray) -> np.ndarray:
        """The expert's flat observation from the proprio state and the task group (any leading dims)."""
        out = np.empty((*np.shape(states)[:-1], self.layout.dim), dtype=np.result_type(states, task))
        out[..., self.proprio], out[..., self.task] = states, task
        return out

    def _tensor(self, x) -> torch.Tensor:
        return torch.as_tensor(np.asarray(x), device=self.device).to(self.dtype)

    def _mean(self, obs: torch.Tensor, reference_action, command: bool) -> torch.Tensor:
        """tanh(mean(s)), the policy's mean action (§8.1); with ``command`` the walker's command for it."""
        policy_mean = torch.tanh(self.policy(self.obs_norm(obs) if self.obs_norm is not None else obs).mean)
        if not command or self.residual_scale is None:
            return policy_mean
        if reference_action is None:
            raise ValueError(f"{self.run_dir} is a residual expert: pass the env's reference_action()")
        return torch.clamp(self._tensor(reference_action) + self.residual_scale * policy_mean, -1.0, 1.0)

    def _mean_and_jacobian(self, flat_obs, reference_action, command: bool) -> tuple[np.ndarray, np.ndarray]:
        obs = self._tensor(flat_obs)
        if obs.shape != (self.layout.dim,):
            raise ValueError(f"expected one flat observation of size {self.layout.dim}, got shape {tuple(obs.shape)}")
        before, after = obs[:self.proprio.start], obs[self.proprio.stop:]

        def mean_of_state(state):
            mean = self._mean(torch.cat([before, state, after]), reference_action, command)
            return mean, mean.detach()

        jacobian, mean = torch.func.jacrev(mean_of_state, has_aux=True)(obs[self.proprio])
        return mean.cpu().numpy(), jacobian.cpu().numpy()

    @torch.no_grad()
    def mean_action(self, flat_obs: np.ndarray) -> np.ndarray:
        """The policy's mean action tanh(mean(s)) in [-1, 1] -- the expert's own action, what its env's ``step``
        takes; ``[..., D]`` -> ``[..., A]``."""
        return self._mean(self._tensor(flat_obs), None, command=False).cpu().numpy()

    def mean_action_and_jacobian(self, flat_obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(tanh(mean(s)) [A], its Jacobian d/ds [A, S]) at one flat observation; s = the proprio part only."""
        return self._mean_and_jacobian(flat_obs, None, command=False)

    @torch.no_grad()
    def mean_command(self, flat_obs: np.ndarray, reference_action: np.ndarray | None = None) -> np.ndarray:
        """mu_E(s): the walker's command for the mean action -- the mean action itself for a plain expert,
        clip(a_ref + residual_scale * tanh(mean(s)), -1, 1) for a residual one (``reference_action`` = the env's
        ``reference_action()`` at that step). This is what the data logs and the NPMP distils."""
        return self._mean(self._tensor(flat_obs), reference_action, command=True).cpu().numpy()

    def mean_command_and_jacobian(self, flat_obs: np.ndarray, reference_action: np.ndarray | None = None
                                  ) -> tuple[np.ndarray, np.ndarray]:
        """(a* [A], J* = d mu_E / d s [A, S]) at one flat observation (eq 8.5), s = the proprio part only; the
        residual composition's clip has derivative 0 where it clips (autodiff through ``clamp``)."""
        return self._mean_and_jacobian(flat_obs, reference_action, command=True)

    def begin_episode(self) -> None:
        pass   # a policy keeps nothing between episodes

    def env_action(self, command: np.ndarray, reference_action: np.ndarray | None = None) -> np.ndarray:
        """The action to pass to the expert's env so that the walker receives ``command`` (in [-1, 1])."""
        if self.residual_scale is None:
            return np.asarray(command, np.float32)
        return ((np.asarray(command) - reference_action) / self.residual_scale).astype(np.float32)


class PlannerExpert:
    """A tracking expert that plans with the simulator (agents/mpc.py ``TrackingPlanner``) on one snippet, with the
    interface ``rollout`` uses. Not the seed's expert (§8.1 trains RL policies; docs/npmp.md says why): mu_E(s) is
    the planner's command at the state the env's simulator is in, so the flat observation it is passed is not read.
    Its Jacobian for LFPC (eqs 8.5-8.9) is that of its servo feedback with the plan held fixed
    (``TrackingPlanner.feedback_jacobian``): a local linear feedback policy, which leaves out replanning."""

    residual_scale = None

    def __init__(self, snippet: str, config=None, mocap: str | None = None, env_options: dict | None = None):
        """``mocap``: the mocap file holding ``snippet`` (None: the shipped one), e.g. one with looped walks;
        ``env_options``: more options of the snippet's tracking env (e.g. ``termination_threshold``)."""
        from agents.mpc import MPCConfig

        self.snippet, self.config, self.mocap = snippet, config or MPCConfig(threads=1), mocap
        self.env_options = dict(env_options or {})
        self.config.validate()
        self.env_name, self.run_dir, self.steps = f"{tracking.TIMED_FAMILY}:{snippet}", f"mpc:{snippet}", 0
        env = self._env(seed=0)   # EnvError for an unknown snippet
        self.layout = ObsLayout(env.observation_space)
        self.proprio, self.task = self.layout.slices[STATE_GROUP], self.layout.slices["task"]
        self.state_dim = self.proprio.stop - self.proprio.start
        self.action_dim = int(env.action_space.shape[0])
        env.close()
        self.planner = None

    def _env(self, seed: int | None, **options):
        kwargs = {"ref_path": self.mocap} if self.mocap else {}
        return envs.make(self.env_name, seed=seed, clip_start=True, **kwargs, **{**self.env_options, **options})

    def make_env(self, seed: int | None = None):
        """The snippet's tracking env (episodes start at its first frame), with a planner bound to it."""
        from agents.mpc import TrackingPlanner

        env = self._env(seed)
        if self.planner is not None:
            self.planner.close()
        self.planner = TrackingPlanner(env, self.config)
        return env

    def begin_episode(self) -> None:
        self.planner.reset()

    def mean_command(self, flat_obs: np.ndarray, reference_action: np.ndarray | None = None) -> np.ndarray:
        return self.planner.act()

    def mean_command_and_jacobian(self, flat_obs, reference_action=None):
        """(the planner's command, the Jacobian of its feedback law with the plan held fixed): LFPC's J*_t."""
        if not self.config.feedback_gain:
            raise ConfigError(f"the MPC expert of {self.snippet} has no feedback (feedback_gain 0), so no "
                              "Jacobian for LFPC; collect noisy-rollout (BC) data from it")
        command = self.planner.act()
        return command, self.planner.feedback_jacobian(command)

    def env_action(self, command: np.ndarray, reference_action: np.ndarray | None = None) -> np.ndarray:
        return np.asarray(command, np.float32)


def require_whole_run(plan: dict, snippet: str, user: str) -> None:
    """``ConfigError`` if the saved planner run ``plan`` stopped early (a periodic law's plan covers only the loop's
    first strides, ``FeedbackExpert``): ``user`` reads the run at every step of the snippet."""
    stopped_at = int(plan.get("stopped_at", -1))
    if stopped_at >= 0:
        raise ConfigError(f"{snippet}: the saved planner run stops after {stopped_at} steps (planned for a periodic "
                          f"law); {user} needs the whole run: plan again without --plan-from, or use "
                          "--lqr-set periodic=true")


class AnchoredPlannerExpert(PlannerExpert):
    """The planner labelling with no memory of the episode it labels: at every state it refines the plan its own
    noise-free run of the snippet followed at the same clip time (``TrackingPlanner.knots_along``), not the plan it
    carried from the step before. Its label is then a function of the state and the clip time (up to the sampling
    of candidates), as the LQR law's is, and near that run it is the run's command; far from it the planner still
    plans. Why: a DAgger label from the planner's own warm start depends on the steps before, which the primitives
    cannot see (docs/npmp.md, "Walks longer than a clip"), and a plan from scratch is a worse command."""

    def __init__(self, snippet: str, config=None, plan: dict | None = None, mocap: str | None = None,
                 env_options: dict | None = None):
        super().__init__(snippet, config, mocap, env_options)
        self.plan, self.env = plan, None

    def make_env(self, seed: int | None = None):
        from agents.lqr import planned_nominal

        env = super().make_env(seed)
        if self.plan is None:
            states, commands, _ = planned_nominal(env, self.planner)
            self.plan = {"physics_states": states, "commands": commands}
        require_whole_run(self.plan, self.snippet, "the anchored planner")
        self.env = env
        return env

    def mean_command(self, flat_obs: np.ndarray, reference_action: np.ndarray | None = None) -> np.ndarray:
        warm_start = self.planner.knots_along(np.asarray(self.plan["physics_states"]),
                                              np.asarray(self.plan["commands"]), self.env.time_step)
        return self.planner.act(warm_start)

    def mean_command_and_jacobian(self, flat_obs, reference_action=None):
        command = self.mean_command(flat_obs, reference_action)
        return command, self.planner.feedback_jacobian(command)


class FeedbackExpert(PlannerExpert):
    """The planner's noise-free run of the snippet made into a smooth feedback policy (agents/lqr.py): mu_E(x_t) =
    u*_t + K_t (x_t - x*_t), with time-varying LQR gains around that run. A function of the simulator's state and
    the clip time only, cheap to query, so noisy rollouts and relabelling cost physics steps rather than plans;
    the planner runs once per snippet (``make_env``). With ``LQRConfig.periodic`` (looped snippets only) the law
    from the loop's first stride on is the periodic one around a limit cycle (``agents.lqr.find_limit_cycle``);
    ``cycle_report`` then says which candidates were tried and which was kept."""

    def __init__(self, snippet: str, config=None, lqr_config=None, plan: dict | None = None, mocap: str | None = None,
                 env_options: dict | None = None, branch: tuple[dict, int] | None = None):
        """``plan``: the planner's run saved with collected data (``plan`` arrays of ``collect_from``), used instead
        of planning again; ``branch``: (another snippet's saved run, frame): without ``plan``, that run is replayed
        up to the frame and the planner goes on from there (``agents.lqr.branched_nominal``)."""
        from agents.lqr import LQRConfig

        super().__init__(snippet, config, mocap, env_options)
        self.lqr_config = lqr_config or LQRConfig()
        self.lqr_config.validate()
        if branch is not None and self.lqr_config.periodic:
            raise ConfigError(f"{snippet}: a periodic law is found on its own run; it cannot branch from another's")
        self.tracker, self.env, self.plan, self.cycle_report, self.branch = None, None, plan, None, branch
        self.stride = looped_stride_of(snippet, mocap) if self.lqr_config.periodic else None

    def make_env(self, seed: int | None = None):
        from agents.lqr import (LinearFeedbackTracker, PeriodicFeedbackTracker, branched_nominal, cycle_plan_steps,
                                find_limit_cycle, planned_nominal)

        env = super().make_env(seed)
        if self.tracker is None:
            # a periodic law reads the planner's run only through the loop's third stride: plan that far, not the
            # whole looped walk (124 of 328 steps on looped 07_01-0, 10 s)
            steps = cycle_plan_steps(self.stride[1] - self.stride[0], self.stride[0]) if self.stride else None
            if self.plan is None and self.branch is not None:
                states, commands, _ = branched_nominal(env, self.planner, *self.branch)
                self.plan = {"physics_states": states, "commands": commands, "stopped_at": np.int64(-1),
                             "branched_at": np.int64(self.branch[1])}
            elif self.plan is None:
                states, commands, _ = planned_nominal(env, self.planner, steps)
                self.plan = {"physics_states": states, "commands": commands, "stopped_at": np.int64(steps or -1)}
            elif steps is None:
                require_whole_run(self.plan, self.snippet, "the time-indexed LQR law")
            tracker = LinearFeedbackTracker(env.physics.model.ptr, self.plan["physics_states"],
                                            self.plan["commands"], self.planner.substeps, self.lqr_config)
            if self.stride is not None:
                restored = PeriodicFeedbackTracker.restored(tracker, self.plan, self.planner.substeps)
                if restored is not None:   # found by the collection with these settings: no search
                    tracker = restored
                else:
                    start, end = self.stride
                    search_env = self._env(seed=0, ending="fall")   # candidates walk until they fall or finish
                    try:
                        tracker, self.cycle_report = find_limit_cycle(search_env, tracker, end - start, start,
                                                                      self.planner.substeps)
                    except ConfigError as e:
                        raise ConfigError(f"{self.snippet}: {e}") from None
                    finally:
                        search_env.close()
                    self.plan = {**self.plan, **tracker.saved()}   # stored with the data (``collect_from``)
            self.tracker = tracker
        self.env = env
        return env

    def begin_episode(self) -> None:
        pass   # the law reads the state and the clip time only: no planner warm start to reset

    def mean_command(self, flat_obs: np.ndarray, reference_action: np.ndarray | None = None) -> np.ndarray:
        from agents.lqr import get_state

        physics = self.env.physics
        state = get_state(physics.model.ptr, physics.data.ptr)
        return self.tracker.command(self.env.time_step, state).astype(np.float32)

    def mean_command_and_jacobian(self, flat_obs, reference_action=None):
        raise ConfigError(f"the feedback expert of {self.snippet} has gains on the simulator state, not on the "
                          "observation: collect noisy-rollout (BC) data from it")


def looped_stride_of(snippet: str, mocap: str | None) -> tuple[int, int]:
    """The stride [start, end) that looped ``snippet`` repeats (``ConfigError`` for one that is not looped: a
    periodic LQR law needs a reference that repeats)."""
    stride = tracking.looped_stride(snippet, mocap or tracking.DEFAULT_OUTPUT)
    if stride is None:
        raise ConfigError(f"a periodic LQR law (periodic=true) needs a looped snippet whose reference repeats a "
                          f"stride (<snippet-id>-loop<SECONDS>, docs/mocap.md); {snippet} is not one")
    return stride


def rollout(expert: Expert, env, action_noise_std: float, rng: np.random.Generator,
            with_jacobians: bool = False, actor=None, pushes: dict | None = None, labeller_share: float = 0.0
            ) -> dict:
    """One episode from the clip start executing clip(mu_E(s_t) + N(0, sigma^2), -1, 1) (§8.2); with ``actor``
    (``(t, proprio state) -> command``, e.g. the primitives: ``evaluate.primitives_actor``) the actor's command
    takes mu_E's place in the executed action while mu_E still labels every visited state (DAgger, Ross et al.
    2011: the expert relabels the student's own states). ``pushes`` (``envs.perturb.PerturbationModel``'s
    ``push_every``, ``push_duration`` and ``push_scale``): random forces on the walker's root body, drawn from
    ``rng``, during the steps they act (a departure from the seed: they move the body's height, speed and tilt,
    which the action noise barely does; docs/npmp.md, "A committee of students, and what they let drift").
    ``labeller_share`` beta (with ``actor``): the executed command is beta mu_E(s_t) + (1 - beta) actor's, the
    mixture policy of DAgger's rounds (Ross et al. 2011, pi_i = beta_i pi* + (1 - beta_i) pi_i-hat; blended per
    step here rather than drawn per step, so that the states visited lie between the expert's and the student's).

    Returns numpy arrays ``states [T+1, S]`` (proprio s_0..s_T, the final one included), ``task [T+1, G]``,
    ``mean_actions [T, A]`` (mu_E at each visited state), ``actions [T, A]`` (executed), ``rewards [T]``, and
    ``terminated`` (bool: ended by a fall rather than the clip's end); with ``with_jacobians`` also
    ``jacobians [T, A, S]``. With sigma = 0 and Jacobians this is the LFPC nominal trajectory (eqs 8.5-8.6)."""
    if not action_noise_std >= 0:
        raise ConfigError(f"action_noise_std must be >= 0, got {action_noise_std}")
    if not 0.0 <= labeller_share <= 1.0:
        raise ConfigError(f"labeller_share must lie in [0, 1], got {labeller_share}")
    obs, _ = env.reset(seed=int(rng.integers(2**31)))
    expert.begin_episode()
    flats, mean_actions, actions, rewards, jacobians = [expert.layout.flatten(obs)], [], [], [], []
    references = []
    push = pushed_steps(env, pushes, rng) if pushes else None
    terminated = truncated = False
    while not (terminated or truncated):
        if push is not None:
            push(len(mean_actions))
        reference = env.reference_action() if expert.residual_scale is not None else None
        if with_jacobians:
            mean, jacobian = expert.mean_command_and_jacobian(flats[-1], reference)
            jacobians.append(jacobian)
        else:
            mean = expert.mean_command(flats[-1], reference)
        driver = mean if actor is None else actor(len(mean_actions), flats[-1][expert.proprio])
        if labeller_share:
            driver = labeller_share * mean + (1.0 - labeller_share) * driver
        command = driver if action_noise_std == 0 else np.clip(
            driver + action_noise_std * rng.standard_normal(driver.shape), -1.0, 1.0)
        obs, reward, terminated, truncated, info = env.step(expert.env_action(command, reference))
        flats.append(expert.layout.flatten(obs))
        mean_actions.append(mean)
        actions.append(info.get("applied_action", command))  # what the walker received
        rewards.append(reward)
        references.append(reference)
    flat = np.stack(flats)
    result = {"states": flat[:, expert.proprio], "task": flat[:, expert.task],
              "mean_actions": np.asarray(mean_actions, np.float32), "actions": np.asarray(actions, np.float32),
              "rewards": np.asarray(rewards, np.float32), "terminated": bool(terminated)}
    if with_jacobians:
        result["jacobians"] = np.asarray(jacobians, np.float32)
    if expert.residual_scale is not None:
        result["reference_actions"] = np.asarray(references, np.float32)
    return result


PUSH_HORIZON = 600.0   # seconds of pushes drawn per episode: longer than any clip here


def pushes_model(pushes: dict):
    """The ``envs.perturb.PerturbationModel`` of ``pushes`` (its push fields; no initial perturbation), or a
    ConfigError naming the bad value."""
    from envs.perturb import PerturbationModel

    try:
        return PerturbationModel(init_noise=0.0, horizon=PUSH_HORIZON, **pushes)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"pushes {pushes}: {e}") from None


def pushed_steps(env, pushes: dict, rng: np.random.Generator):
    """``push(t)``: sets the force acting on the walker's root body during control step ``t`` (none between
    pushes), every push's three components drawn now from ``rng``."""
    from envs.perturb import dm_env_of

    model, dm = pushes_model(pushes), dm_env_of(env)
    layout = model.layout(dm, dm.control_timestep)
    x = rng.standard_normal(layout["dim"])
    return lambda t: model.set_force(dm, layout, model.force_at(layout, x, t))


def expert_rollout(expert: Expert, seed: int = 0, action_noise_std: float = 0.0, with_jacobians: bool = False
                   ) -> dict:
    """``rollout`` in a fresh env of the expert (noise-free by default: the expert's own trajectory)."""
    env = expert.make_env(seed)
    try:
        return rollout(expert, env, action_noise_std, np.random.default_rng(seed), with_jacobians)
    finally:
        env.close()


def _concatenate(trajectories: list[dict]) -> dict[str, np.ndarray]:
    out = {k: np.concatenate([t[k] for t in trajectories]).astype(np.float32) for k in trajectories[0]
           if k != "terminated"}
    out["lengths"] = np.array([len(t["actions"]) for t in trajectories], np.int64)
    out["terminated"] = np.array([t["terminated"] for t in trajectories], bool)
    return out


def state_deviations(noisy: list[dict], nominal: dict) -> np.ndarray:
    """s^eta_t - s*_t for t >= 1 over the steps both reached, stacked over ``noisy`` rollouts: [M, S] (Delta)."""
    parts = []
    for trajectory in noisy:
        n = min(len(trajectory["states"]), len(nominal["states"]))
        parts.append(trajectory["states"][1:n].astype(np.float64) - nominal["states"][1:n])
    return np.concatenate(parts) if parts else np.zeros((0, nominal["states"].shape[1]))


def collect_expert(expert_dir: Path | str, trajectories: int, action_noise_std: float,
                   perturbation_trajectories: int, seed: int, device: str = "cpu") -> dict:
    """Everything one svg0 expert contributes (picklable; a Ray task can run it): ``bc`` and ``nominal`` (dicts of
    concatenated numpy arrays as in the HDF5 layout, the nominal with LFPC Jacobians), ``deviation_sq_sum [S]``,
    ``deviation_count`` and ``attrs``."""
    return collect_from(Expert(expert_dir, device), trajectories, action_noise_std, perturbation_trajectories, seed,
                        with_jacobians=True)


def planner_expert(snippet: str, settings: dict | None = None, lqr: dict | None = None, plan: dict | None = None,
                   mocap: str | None = None, anchored: bool = False, env_options: dict | None = None,
                   branch: tuple[dict, int] | None = None) -> PlannerExpert:
    """The MPC expert of ``snippet`` (``settings``: agents.mpc.MPCConfig fields): the planner itself, with
    ``anchored`` the planner warm-started from its own noise-free run (``AnchoredPlannerExpert``), or with ``lqr``
    (agents.lqr.LQRConfig fields) the LQR law around that run (``FeedbackExpert``). ``plan``: that run, if it was
    saved. ``mocap``: the file holding the snippet (None: the shipped one); ``env_options``: more options of its
    tracking env (``ending="fall"``: rollouts end on a fall only); ``branch``: the law's run branches from another
    snippet's (``FeedbackExpert``)."""
    from agents.lqr import LQRConfig
    from agents.mpc import MPCConfig

    config = MPCConfig(**{"threads": 1, **(settings or {})})
    if anchored and lqr is not None:
        raise ConfigError("an anchored planner labels with the planner, not the LQR law: give one of them")
    if anchored:
        return AnchoredPlannerExpert(snippet, config, plan, mocap, env_options)
    if lqr is None:
        return PlannerExpert(snippet, config, mocap, env_options)
    return FeedbackExpert(snippet, config, LQRConfig(**lqr), plan, mocap, env_options, branch)


def collect_planner(snippet: str, trajectories: int, action_noise_std: float, perturbation_trajectories: int,
                    seed: int, settings: dict | None = None, lqr: dict | None = None, mocap: str | None = None,
                    plan: dict | None = None, env_options: dict | None = None,
                    branch: tuple[dict, int] | None = None) -> dict:
    """``collect_expert`` for an MPC expert (``planner_expert``) on one snippet: noisy-rollout BC data and a nominal
    trajectory, with the planner's feedback Jacobians when it has feedback (none for the LQR law, whose gains act
    on the simulator state). ``plan``: the planner's run of the snippet saved by an earlier LQR collection with
    the same settings (``plan_of``), so the law is rebuilt around it instead of planning again; ``branch``: or
    the run branches from another snippet's (``FeedbackExpert``)."""
    expert = planner_expert(snippet, settings, lqr, plan, mocap=mocap, env_options=env_options, branch=branch)
    return collect_from(expert, trajectories, action_noise_std, perturbation_trajectories, seed,
                        with_jacobians=lqr is None and expert.config.feedback_gain > 0)


def collect_from(expert, trajectories: int, action_noise_std: float, perturbation_trajectories: int, seed: int,
                 with_jacobians: bool) -> dict:
    if trajectories < 1 or not 1 <= perturbation_trajectories <= trajectories:
        raise ConfigError(f"need trajectories >= 1 and 1 <= perturbation_trajectories <= trajectories, got "
                          f"{trajectories} and {perturbation_trajectories}")
    env = expert.make_env(seed)
    rng = np.random.default_rng(seed)
    nominal = rollout(expert, env, 0.0, rng, with_jacobians=with_jacobians)
    noisy = [rollout(expert, env, action_noise_std, rng) for _ in range(trajectories)]
    env.close()
    deviations = state_deviations(noisy[:perturbation_trajectories], nominal)
    bc = _concatenate(noisy)
    attrs = {"expert_dir": str(expert.run_dir), "env": expert.env_name, "expert_steps": expert.steps,
             "trajectories": trajectories,
             "action_noise_std": float(action_noise_std), "seed": int(seed),
             "nominal_return": float(nominal["rewards"].sum()), "nominal_steps": len(nominal["actions"]),
             "nominal_terminated": nominal["terminated"],
             "bc_mean_return": float(bc["rewards"].sum() / trajectories),
             "bc_mean_steps": float(bc["lengths"].mean()), "max_step_reward": tracking.MAX_COMIC_REWARD,
             "deviation_count": len(deviations),
             # the snippet's mocap file when it is not the shipped one (looped walks): its reference is read there
             "mocap": getattr(expert, "mocap", None) or ""}
    if getattr(expert, "cycle_report", None):   # the periodic law's candidates (find_limit_cycle)
        attrs["periodic_law"] = json.dumps(expert.cycle_report)
    result = {"snippet": expert.snippet, "bc": bc, "nominal": _concatenate([nominal]),
              "deviation_sq_sum": (deviations**2).sum(0), "attrs": attrs}
    if getattr(expert, "plan", None) is not None:   # the planner's run under an LQR law: relabelling reuses it
        result["plan"] = {k: np.asarray(v) for k, v in expert.plan.items()}
    return result


def relabel_planner(snippet: str, primitives: str, trajectories: int, action_noise_std: float, seed: int,
                    settings: dict | None = None, lqr: dict | None = None, plan: dict | None = None,
                    mocap: str | None = None, anchored: bool = False, env_options: dict | None = None,
                    pushes: dict | None = None, labeller_share: float = 0.0) -> tuple[dict, dict | None]:
    """DAgger data for one snippet: ``trajectories`` episodes driven by the primitives (closed loop on the clip's
    reference, action noise ``action_noise_std``), every visited state labelled by the planner. A departure from
    the seed (its BC data, eq 8.4, visits only states of the noisy expert): the primitives' own mistakes take them
    to states the expert never visits, and these teach the next distillation what to do there. Returns the ``bc``
    arrays of ``collect_from`` (the executed actions are the primitives') and the planner's run the labeller used
    (None for the planner itself), with the periodic law it chose when it searched one, so the next round rebuilds
    that law instead of searching again. With ``lqr`` the labels are the LQR
    law's, with ``anchored`` the planner's warm-started from its own run (``planner_expert``); ``env_options`` as
    there (``ending="fall"``: the episodes end on a fall only, not where the walker strays from the reference's
    path); ``pushes`` as in ``rollout``. ``labeller_share`` (``rollout``): 1 has the labeller drive its own episodes
    instead of the primitives (pushed, its demonstrations of the way back from where the pushes leave it;
    ``primitives`` unused); between 0 and 1 the two drive together, each command their blend."""
    from pipelines.npmp.evaluate import primitives_actor
    from priors.npmp import load_primitives

    if trajectories < 1:
        raise ConfigError(f"need trajectories >= 1, got {trajectories}")
    model = None if labeller_share == 1.0 else load_primitives(primitives)[0]
    expert = planner_expert(snippet, settings, lqr, plan, mocap, anchored, env_options)
    env = expert.make_env(seed)
    rng = np.random.default_rng(seed)
    try:
        episodes = [rollout(expert, env, action_noise_std, rng, pushes=pushes, labeller_share=labeller_share,
                            actor=None if model is None else primitives_actor(model, snippet, ref_path=mocap))
                    for _ in range(trajectories)]
    finally:
        env.close()
    return _concatenate(episodes), getattr(expert, "plan", None)


def with_relabelled(result: dict, relabelled: dict) -> dict:
    """One snippet's collected data with DAgger trajectories appended to its BC rollouts."""
    bc = {k: np.concatenate([result["bc"][k], relabelled[k]]) for k in result["bc"]}
    attrs = {**result["attrs"], "relabelled_trajectories": int(result["attrs"].get("relabelled_trajectories", 0))
             + len(relabelled["lengths"])}
    return {**result, "bc": bc, "attrs": attrs}


def estimate_delta_std(per_expert_results: list[dict]) -> np.ndarray:
    """Delta's per-dimension std: sqrt of the mean squared state deviation pooled over all experts."""
    count = sum(r["attrs"]["deviation_count"] for r in per_expert_results)
    if count == 0:
        raise ConfigError("no state deviations to estimate Delta from (perturbation_trajectories = 0, or every "
                          "rollout ended at its first step)")
    return np.sqrt(sum(r["deviation_sq_sum"] for r in per_expert_results) / count).astype(np.float32)


def write_dataset(path: Path | str, per_expert_results: list[dict], delta_std: np.ndarray | None = None,
                  meta: dict | None = None) -> Path:
    """Write the HDF5 file (module docstring) atomically: readers see the old file or the complete new one.
    ``delta_std`` None: estimated from the results (``estimate_delta_std``). Arrays are gzip-compressed: the
    planners' feedback Jacobians are mostly zeros (they read the joint angles only) and shrink ~50-fold."""
    path = Path(path)
    if delta_std is None:
        delta_std = estimate_delta_std(per_expert_results)
    snippets = [r["snippet"] for r in per_expert_results]
    if not snippets or len(set(snippets)) != len(snippets):
        raise ConfigError(f"need at least one expert and one expert per snippet, got snippets {snippets}")
    with atomic_h5_file(path) as f:
        first = per_expert_results[0]["nominal"]
        f.attrs.update(format=FORMAT, version=VERSION, state_dim=first["states"].shape[1],
                       action_dim=first["actions"].shape[1], meta=json.dumps(meta or {}))
        f.create_dataset("delta_std", data=np.asarray(delta_std, np.float32))
        for result in per_expert_results:
            group = f.create_group(result["snippet"])
            group.attrs.update(result["attrs"])
            group.create_dataset("deviation_sq_sum", data=result["deviation_sq_sum"])
            for part in ("bc", "nominal", "plan"):
                for key, array in result.get(part, {}).items():
                    compress = {"compression": "gzip", "shuffle": True} if array.size > 1024 else {}
                    group.create_dataset(f"{part}/{key}", data=array, **compress)
    return path


@contextlib.contextmanager
def atomic_h5_file(path: Path):
    """An HDF5 file open for writing that replaces ``path`` only once complete: written to a temporary file in the
    same directory, fsynced, then renamed (readers see the old file or the whole new one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with h5py.File(tmp, "w") as f:
            yield f
        fsync_path(tmp)
        os.replace(tmp, path)
        fsync_path(path.parent)
    finally:
        tmp.unlink(missing_ok=True)


def read_meta(path: Path | str) -> dict:
    """The collection settings stored in a file ``write_dataset`` wrote, without loading its arrays."""
    path = Path(path)
    try:
        with h5py.File(path, "r") as f:
            if f.attrs.get("format") != FORMAT or f.attrs.get("version") != VERSION:
                raise ConfigError(f"{path} is not a {FORMAT} v{VERSION} file")
            return current_meta(json.loads(f.attrs["meta"]))
    except (OSError, KeyError, ValueError) as e:
        raise ConfigError(f"{path} is missing or corrupt ({e.__class__.__name__}: {e})") from None


def current_meta(meta: dict) -> dict:
    """A stored collection meta with its planner settings as they are named now (``agents.mpc.stored_settings``):
    runs kept before a setting was added compare equal to runs planned with its old value."""
    from agents.mpc import stored_settings

    return {**meta, "planner": stored_settings(meta["planner"])} if isinstance(meta.get("planner"), dict) else meta


def read_snippets(path: Path | str) -> list[str]:
    """The snippets in a file ``write_dataset`` wrote, without loading its arrays."""
    path = Path(path)
    read_meta(path)   # checks the format
    with h5py.File(path, "r") as f:
        return sorted(k for k in f.keys() if isinstance(f[k], h5py.Group))


def read_mocaps(path: Path | str) -> dict[str, str | None]:
    """Each snippet's mocap file (``snippet_mocap``) in a file ``write_dataset`` wrote, without loading its arrays."""
    read_meta(path)   # checks the format
    with h5py.File(path, "r") as f:
        return {k: snippet_mocap(dict(g.attrs)) for k, g in f.items() if isinstance(g, h5py.Group)}


def read_results(path: Path | str) -> tuple[list[dict], dict]:
    """The per-expert results (as ``collect_from`` returns them) and the meta of a file ``write_dataset`` wrote."""
    path = Path(path)
    try:
        with h5py.File(path, "r") as f:
            if f.attrs.get("format") != FORMAT or f.attrs.get("version") != VERSION:
                raise ConfigError(f"{path} is not a {FORMAT} v{VERSION} file")
            results = [{"snippet": snippet, "attrs": dict(group.attrs),
                        "deviation_sq_sum": group["deviation_sq_sum"][()],
                        **{part: {k: v[()] for k, v in group[part].items()} for part in ("bc", "nominal", "plan")
                           if part in group}}
                       for snippet, group in f.items() if isinstance(group, h5py.Group)]
            return results, current_meta(json.loads(f.attrs["meta"]))
    except (OSError, KeyError, ValueError) as e:
        raise ConfigError(f"{path} is missing or corrupt ({e.__class__.__name__}: {e})") from None


def snippet_law(attrs: dict, meta: dict) -> dict | None:
    """The LQR law's settings that label a collected snippet (its part's ``attrs``): its own, kept by a merge of
    collections with different laws (``merge_datasets(mixed_laws=True)``), else its file's ``meta``; None where the
    planner itself labels."""
    own = attrs.get("lqr")
    if own is None:
        return meta.get("lqr")
    return json.loads(own.decode() if isinstance(own, bytes) else own)


def read_laws(path: Path | str) -> dict[str, dict | None]:
    """Each snippet's LQR law settings (``snippet_law``) in a file ``write_dataset`` wrote, without its arrays."""
    meta = read_meta(path)
    with h5py.File(path, "r") as f:
        return {k: snippet_law(dict(g.attrs), meta) for k, g in f.items() if isinstance(g, h5py.Group)}


def snippet_mocap(attrs: dict) -> str | None:
    """The mocap file a collected snippet came from (its part's ``mocap`` attribute), or None for the shipped one."""
    mocap = attrs.get("mocap", "")
    mocap = mocap.decode() if isinstance(mocap, bytes) else str(mocap)
    if mocap and not Path(mocap).is_file():
        raise ConfigError(f"the snippet's mocap file {mocap} is missing (regenerate it with the command in "
                          "docs/mocap.md)")
    return mocap or None


@dataclass(frozen=True)
class CollectJob:
    """One snippet's share of a collection, written to its own file ``path`` (a "part") as soon as it is done, so a
    collection that stops (a killed worker or driver, a deadline) keeps every finished snippet and resumes with the
    rest. ``expert``: "mpc" (a planner on ``snippet`` with MPCConfig ``settings``; with ``lqr`` settings, the LQR
    law around its run, rebuilt from the run saved in the first of the ``plan_from`` files holding it, when given)
    or an svg0 expert run directory; ``env_options``: more options of the tracking env; ``meta`` is stored in the
    part and must match for the part to be reused."""
    snippet: str
    expert: str
    path: str
    seed: int
    trajectories: int
    action_noise_std: float
    perturbation_trajectories: int
    settings: dict | None = None
    meta: dict | None = None
    lqr: dict | None = None
    mocap: str | None = None
    plan_from: tuple[str, ...] | None = None
    env_options: dict | None = None
    branch: tuple[str, int] | None = None   # (parent snippet, frame): the law's run branches from the parent's
    # the parent's run may have been planned with other planner settings: its frames up to the branch point are taken
    # as they are and the rest is planned with ``settings`` (a run planned again from before where it went wrong)
    branch_across_settings: bool = False


def run_collect_job(job: CollectJob) -> str:
    """Collect ``job.snippet`` and write its part file (atomically); returns the part's path."""
    if job.expert == "mpc":
        plan, source = plan_of(job.plan_from, job.snippet, job.settings, job.mocap) if job.plan_from else (None, None)
        branch, parent_settings = None, None
        if job.branch is not None:
            parent, frame = job.branch
            if plan is not None and int(plan.get("branched_at", -1)) != frame:   # a run planned otherwise
                plan, source = None, None
            if plan is None:
                branch = (parent_run(job, parent, frame), frame)
                parent_settings = branch[0].pop("parent_settings", None)
        result = collect_planner(job.snippet, job.trajectories, job.action_noise_std, job.perturbation_trajectories,
                                 job.seed, job.settings, job.lqr, job.mocap, plan, job.env_options, branch)
        if job.lqr is not None:   # which saved run the law was built around ("": planned here)
            result["attrs"]["plan_from"] = source or ""
        if job.branch is not None:
            result["attrs"]["branch"] = f"{job.branch[0]}@{job.branch[1]}"
            if branch is not None and parent_settings is not None:   # the prefix's own planner, where it differs
                result["attrs"]["branch_planner"] = json.dumps(parent_settings, sort_keys=True)
    else:
        result = collect_expert(job.expert, job.trajectories, job.action_noise_std, job.perturbation_trajectories,
                                job.seed)
    return str(write_dataset(job.path, [result], meta=job.meta))


@dataclass(frozen=True)
class RelabelJob:
    """One snippet's DAgger round (``relabel_planner``): its data in ``data`` with ``trajectories`` episodes of the
    ``primitives`` appended, labelled by the planner with the collection's ``settings``, written as a part
    (``path``) like a ``CollectJob``'s."""
    snippet: str
    data: str
    primitives: str
    path: str
    seed: int
    trajectories: int
    action_noise_std: float
    settings: dict | None = None
    meta: dict | None = None
    lqr: dict | None = None
    mocap: str | None = None
    anchored: bool = False
    env_options: dict | None = None
    pushes: dict | None = None   # forces on the walker's root during the episodes (``rollout``)
    labeller_share: float = 0.0   # 1: the labeller's own episodes; between: blended with the primitives'


def run_relabel_job(job: RelabelJob) -> str:
    """Relabel ``job.snippet`` and write its part (the snippet's old data plus the new episodes), atomically."""
    (result,) = [r for r in read_results(job.data)[0] if r["snippet"] == job.snippet]
    relabelled, plan = relabel_planner(job.snippet, job.primitives, job.trajectories, job.action_noise_std, job.seed,
                                       job.settings, job.lqr, result.get("plan"), job.mocap, job.anchored,
                                       job.env_options, job.pushes, job.labeller_share)
    result = with_relabelled(result, relabelled)
    if plan is not None:   # the same run, plus the periodic law the labeller searched (agents/lqr.py ``saved``)
        result["plan"] = {k: np.asarray(v) for k, v in plan.items()}
    return str(write_dataset(job.path, [result], meta=job.meta))


def parent_run(job: CollectJob, parent: str, frame: int) -> dict:
    """The saved planner run that ``job``'s snippet branches from at ``frame``, checked to share that snippet's
    reference up to the frame (the proprio states and root poses of both clips played back). The parent may have been
    planned on another mocap file (a chain with one turn more, written to a file of its own, branches from its parent
    in the kept chains): the check compares the two references themselves."""
    from envs.mocap.tracking import reference_playback

    found, meta, _ = saved_run(job.plan_from or (), parent)
    if found is None:
        raise ConfigError(f"{job.snippet} branches from {parent}, whose planner run is in none of the --plan-from "
                          f"files ({', '.join(job.plan_from or ()) or 'none given'})")
    if not job.branch_across_settings:
        check_planner(meta, job.settings, parent)
    own = reference_playback(job.snippet, 0, job.mocap)
    other = reference_playback(parent, 0, snippet_mocap(found["attrs"]))
    if len(own.states) <= frame or len(other.states) <= frame:
        raise ConfigError(f"{job.snippet} and {parent} must both last past the branch point {frame}")
    gap = max(float(np.abs(own.states[:frame + 1] - other.states[:frame + 1]).max()),
              float(np.abs(own.root[:frame + 1] - other.root[:frame + 1]).max()))
    if gap > 1e-5:
        raise ConfigError(f"{job.snippet} and {parent} differ before the branch point {frame} (by up to {gap:.3g}); "
                          "branch where they part")
    if meta.get("planner") != job.settings:   # allowed only across settings (checked above)
        return {**found["plan"], "parent_settings": meta.get("planner")}
    return found["plan"]


def saved_run(paths: Sequence[Path | str], snippet: str) -> tuple[dict | None, dict | None, str | None]:
    """(result, collection meta, path): ``snippet``'s planner run in the first of the LQR collections ``paths``
    holding one, or (None, None, None)."""
    for path in paths:
        results, meta = read_results(path)
        found = [r for r in results if r["snippet"] == snippet and "plan" in r]
        if found:
            return found[0], meta, str(path)
    return None, None, None


def check_planner(meta: dict, settings: dict | None, snippet: str) -> None:
    """ConfigError unless the collection ``meta`` planned ``snippet`` with ``settings`` (a run planned otherwise is
    another nominal)."""
    if settings is not None and meta.get("planner") != settings:
        raise ConfigError(f"{snippet}'s planner run was made with other settings ({meta.get('planner')}) than these "
                          f"({settings})")


def plan_of(paths: Sequence[Path | str], snippet: str, settings: dict | None, mocap: str | None
            ) -> tuple[dict | None, str | None]:
    """(run, path): the planner's run of ``snippet`` saved in the first of the LQR collections ``paths`` holding one
    (None, None if none does: the snippet is planned), checked to come from a planner with ``settings`` on the same
    mocap file (a run planned otherwise is another nominal)."""
    found, meta, path = saved_run(paths, snippet)
    if found is None:
        print(f"{snippet}: no planner run saved in {', '.join(map(str, paths))}; planning it", flush=True)
        return None, None
    check_planner(meta, settings, snippet)
    if snippet_mocap(found["attrs"]) != mocap:
        raise ConfigError(f"{path} planned {snippet} on {snippet_mocap(found['attrs']) or 'the shipped mocap'}, "
                          f"not on {mocap or 'the shipped mocap'}")
    return found["plan"], path


def finished_part(job: CollectJob | RelabelJob) -> bool:
    """Whether ``job``'s part exists and was collected with the same settings (``ConfigError`` if it differs or
    is unreadable: the user decides whether to delete it)."""
    if not Path(job.path).is_file():
        return False
    results, meta = read_results(job.path)
    if [r["snippet"] for r in results] != [job.snippet] or meta != job.meta:
        raise ConfigError(f"{job.path} was collected with other settings ({meta}); delete it to collect "
                          f"{job.snippet} again with these ({job.meta})")
    return True


def merge_parts(paths: list[Path | str], out_path: Path | str, meta: dict) -> Path:
    """One dataset from part files (snippets in the order given; Delta re-estimated over all of them)."""
    return write_dataset(out_path, [r for p in paths for r in read_results(p)[0]], meta=meta)


# what a collection's size and DAgger rounds set, not how its labels are made: ``merge_datasets(mixed_rounds=True)``
# merges collections that differ only in these (e.g. a new snippet's collection into a file after its rounds); where a
# law's run came from (``plan_from``, ``branches``) also travels with each snippet's own attrs
ROUND_SETTINGS = ("trajectories", "action_noise_std", "perturbation_trajectories", "plan_from", "branches",
                  "branch_across_settings", "relabelled")


def merge_datasets(paths: list[Path | str], out_path: Path | str, mixed_planners: bool = False,
                   mixed_rounds: bool = False, mixed_laws: bool = False, overlay: bool = False) -> Path:
    """One dataset from data files collected with the same settings (snippets split between machines or runs);
    only the seeds may differ, with ``mixed_planners`` also the planner's settings (the merged meta's ``planner``
    is the first input's), with ``mixed_rounds`` the collections' sizes, noise and DAgger rounds
    (``ROUND_SETTINGS``; the merged meta keeps none of them at its top level), and with ``mixed_laws`` the LQR
    laws' settings (e.g. periodic laws on straight walks and time-indexed ones on arcs): each snippet then keeps
    its own law's settings (``snippet_law``), which relabelling uses. Each input's differing settings are kept in
    the meta's ``merged_from``. Each snippet may appear once, or with ``overlay`` it is taken from the first input
    holding it (e.g. some snippets' parts of a DAgger round over the data the round started from; the meta's
    ``overlaid`` names the inputs whose copies were left out); Delta is re-estimated over all of them."""
    loaded = [read_results(path) for path in paths]
    if mixed_laws:   # the law travels with its snippet, not with the merged file
        loaded = [([{**r, "attrs": {**r["attrs"], "lqr": json.dumps(snippet_law(r["attrs"], meta))}}
                    for r in results], meta) for results, meta in loaded]
    mixed = ((("planner",) if mixed_planners else ()) + (ROUND_SETTINGS if mixed_rounds else ())
             + (("lqr",) if mixed_laws else ()))
    ignored = ("seed", "merged_from", "overlaid", *mixed)   # where an input's snippets came from is not a setting
    settings = [{k: v for k, v in meta.items() if k not in ignored} for _, meta in loaded]
    for path, other in zip(paths[1:], settings[1:]):
        if other != settings[0]:
            differ = sorted(k for k in {*other, *settings[0]} if other.get(k) != settings[0].get(k))
            flags = {"planner": "--mixed-planners", "lqr": "--mixed-laws", **dict.fromkeys(ROUND_SETTINGS,
                                                                                        "--mixed-rounds")}
            needed = sorted({flags[k] for k in differ if k in flags})
            hint = f" ({' '.join(needed)} merges them anyway)" if needed and all(k in flags for k in differ) else ""
            raise ConfigError(f"{path} was collected with other settings than {paths[0]} (they differ in "
                              f"{', '.join(differ)}); merge only collections made with the same settings{hint}")
    seen: dict[str, Path | str] = {}
    kept, overlaid = [], {}
    for path, (results, _) in zip(paths, loaded):
        for result in results:
            snippet = result["snippet"]
            if snippet in seen:
                if not overlay:
                    raise ConfigError(f"{snippet} is in both {seen[snippet]} and {path}; merge each snippet once "
                                      "(or --overlay: the first input holding it wins)")
                overlaid.setdefault(snippet, []).append(str(path))
                continue
            seen[snippet] = path
            kept.append(result)
    metas = [meta for _, meta in loaded]
    dropped = (ROUND_SETTINGS if mixed_rounds else ()) + (("lqr",) if mixed_laws else ()) + ("overlaid",)
    meta = {**{k: v for k, v in metas[0].items() if k not in dropped},
            "merged_from": [{"path": str(p), "seed": m.get("seed"),
                             **{k: m[k] for k in (*mixed, "overlaid") if k in m}} for p, m in zip(paths, metas)],
            **({"overlaid": overlaid} if overlaid else {})}
    return write_dataset(out_path, kept, meta=meta)


def same_snippet(mocap: Path | str, other: Path | str, snippet: str) -> bool:
    """Whether ``snippet`` is the same motion in both mocap files: every array of its group equal."""
    def arrays(path):
        with h5py.File(path, "r") as f:
            if snippet not in f:
                return None
            found = {}
            f[snippet].visititems(lambda name, obj: found.__setitem__(name, obj[()])
                                  if isinstance(obj, h5py.Dataset) else None)
            return found
    a, b = arrays(mocap), arrays(other)
    return a is not None and b is not None and a.keys() == b.keys() and all(
        np.array_equal(a[k], b[k]) for k in a)


def teacher_runs(paths: list[Path | str], out_path: Path | str, mocap: Path | str,
                 snippets: list[str] | None = None, overlay: bool = False) -> Path:
    """The planner's runs of LQR collections (``collect --expert-policy lqr``) without their rollouts: what
    ``collect --plan-from`` rebuilds each law from, small enough to keep in the repository (a chain's run is about
    0.55 MB; the collection holding it 7 MB), so that the hours of planning are not repeated on every machine
    (issue 13; pipelines/npmp/recipes/clip_teachers_shaped.sh). The runs must come from one planner and one law,
    and their snippets' motion in ``mocap`` must be the one they were planned on (checked array by array): the
    written runs name ``mocap`` as their mocap file, so a mocap file written again elsewhere may replace a lost
    one. ``snippets``: only these runs are kept (each must be in some input); with ``overlay`` a snippet planned in
    several inputs is taken from the first that holds it (a run planned again, put before the file it replaces)."""
    loaded = [read_results(path) for path in paths]
    first = loaded[0][1]
    kept, sources, seen = [], [], set()
    for path, (results, meta) in zip(paths, loaded):
        for key in ("planner", "lqr"):
            if meta.get(key) != first.get(key):
                raise ConfigError(f"{path}'s {key} settings ({meta.get(key)}) differ from {paths[0]}'s "
                                  f"({first.get(key)}); keep runs of one planner and one law together")
        runs = [r for r in results if "plan" in r]
        if not runs:
            raise ConfigError(f"{path} holds no planner run (an LQR collection made with --experts mpc "
                              "--expert-policy lqr has one per snippet)")
        for run in runs:
            if (snippets is not None and run["snippet"] not in snippets) or (overlay and run["snippet"] in seen):
                continue
            snippet, planned_on = run["snippet"], snippet_mocap(run["attrs"])
            if planned_on is None or not same_snippet(planned_on, mocap, snippet):
                raise ConfigError(f"{snippet} in {mocap} is not the motion {path} planned it on "
                                  f"({planned_on or 'the shipped mocap'})")
            if snippet in seen:
                raise ConfigError(f"{snippet} is planned in more than one of {', '.join(map(str, paths))}")
            kept.append({**{k: v for k, v in run.items() if k != "bc"},
                         "attrs": {**run["attrs"], "mocap": str(mocap)}})
            seen.add(snippet)
        sources.append({"path": str(path), **{k: meta[k] for k in ("seed", "plan_from", "branches") if k in meta}})
    missing = sorted(set(snippets or ()) - seen)
    if missing:
        raise ConfigError(f"no planner run of {', '.join(missing)} in {', '.join(map(str, paths))}")
    meta = {"planner": first.get("planner"), "lqr": first.get("lqr"), "teacher_runs_from": sources}
    return write_dataset(out_path, kept, meta=meta)


def collect(expert_dirs: list[Path | str], out_path: Path | str, trajectories_per_expert: int = 100,
            action_noise_std: float = 0.1, perturbation_trajectories: int = 5, seed: int = 0) -> Path:
    """Collect every expert in turn (expert i with seed ``seed + i``), estimate Delta, write ``out_path``."""
    results = [collect_expert(d, trajectories_per_expert, action_noise_std, perturbation_trajectories, seed + i)
               for i, d in enumerate(expert_dirs)]
    meta = {"trajectories_per_expert": trajectories_per_expert, "action_noise_std": action_noise_std,
            "perturbation_trajectories": perturbation_trajectories, "seed": seed}
    return write_dataset(out_path, results, estimate_delta_std(results), meta)


class Windows(NamedTuple):
    """Subsequence windows into a ``_Trajectories`` store: indices [B, L+K] / [B, L], validity, the trajectory each
    window comes from [B] and its time indices t [B, L+K] (steps since the clip's first frame)."""
    state_index: torch.Tensor
    action_index: torch.Tensor
    state_ok: torch.Tensor
    mask: torch.Tensor
    which: torch.Tensor
    time: torch.Tensor


class Batch(NamedTuple):
    """One distillation batch: states [B, L+K, S], target actions [B, L, A], mask [B, L], the encoder's
    look-ahead source [B, L+K, S] (the clip's reference states; None when it is the states themselves) and the
    reference's far states and path [B, L+K, C] (``priors.npmp.model.reference_context``; None without
    ``far_offsets`` or ``path_offsets``), and the weights of the action error [B, L, A, A]
    (``pipelines.npmp.weights``; None: every dimension alike)."""
    states: torch.Tensor
    actions: torch.Tensor
    mask: torch.Tensor
    lookahead: torch.Tensor | None = None
    context: torch.Tensor | None = None
    action_weights: torch.Tensor | None = None


class _Trajectories:
    """Variable-length trajectories stored concatenated on a device, and subsequence windows drawn from them."""

    def __init__(self, arrays: dict[str, list[np.ndarray]], device: torch.device):
        # arrays[k] holds one array per snippet; ``owner``: the snippet (its index) of each trajectory
        self.owner = torch.cat([torch.full((len(n),), i, dtype=torch.long) for i, n in enumerate(arrays["lengths"])])
        self.lengths = torch.as_tensor(np.concatenate(arrays["lengths"]), dtype=torch.long)
        self.action_offsets = torch.cumsum(self.lengths, 0) - self.lengths
        self.state_offsets = self.action_offsets + torch.arange(len(self.lengths))  # T_i + 1 states each
        self.data = {k: torch.as_tensor(np.concatenate(v), device=device) for k, v in arrays.items()
                     if k != "lengths"}
        self.device = device

    def windows(self, batch: int, length: int, generator: torch.Generator | None,
                per_snippet: bool = False, weights: torch.Tensor | None = None) -> Windows:
        """Gather [B, length + K] states, [B, length] per-step arrays and the mask (module docstring). Windows start
        at any valid step with the same probability, or with ``per_snippet`` each snippet's windows are drawn
        equally often (a few snippets with little data, e.g. arcs beside walks with many DAgger rounds).
        ``weights`` [trajectories]: each trajectory's steps drawn that many times as often (within its snippet,
        with ``per_snippet``)."""
        if batch < 1 or length < 1:
            raise ConfigError(f"batch and length must be >= 1, got {batch} and {length}")
        valid = (self.lengths - LOOKAHEAD + 1).clamp(min=0)  # steps t with s_{t..t+K} in the trajectory
        if valid.sum() == 0:
            raise ConfigError(f"no trajectory has more than lookahead = {LOOKAHEAD} steps")
        weights = valid.double() * (1.0 if weights is None else weights.double().cpu())
        if per_snippet:
            per_owner = torch.zeros(int(self.owner.max()) + 1, dtype=torch.double).index_add_(0, self.owner, weights)
            weights = weights / per_owner[self.owner].clamp(min=1.0)
        gen_device = generator.device if generator is not None else torch.device("cpu")
        which = torch.multinomial(weights.to(gen_device), batch, replacement=True, generator=generator).cpu()
        last_start = (valid[which] - length).clamp(min=0)
        start = (torch.rand(batch, generator=generator, device=gen_device).cpu() * (last_start + 1)).long()
        t = start[:, None] + torch.arange(length + LOOKAHEAD)  # [B, L+K] time indices
        state_ok = t <= self.lengths[which, None]
        mask = (t[:, :length] < valid[which, None]).float()
        state_index = self.state_offsets[which, None] + t.clamp(max=self.lengths[which, None])
        action_index = self.action_offsets[which, None] + t[:, :length].clamp(max=self.lengths[which, None] - 1)
        to = lambda x: x.to(self.device)  # noqa: E731
        return Windows(to(state_index), to(action_index), to(state_ok), to(mask), which, t)


def reference_extension(snippet: str, reference, mocap: Path):
    """``snippet``'s reference played from ``mocap``, where it must go on past ``reference`` (the data's own) and equal
    it until the last ``chain_blend`` frames before the join it adds (ConfigError otherwise)."""
    from pipelines.npmp.evaluate import reference_playback

    try:
        with h5py.File(mocap, "r") as f:
            blend = int(f.attrs.get("chain_blend", 0))
        longer = reference_playback(snippet, ref_path=mocap)
    except (OSError, KeyError, ValueError) as e:
        raise ConfigError(f"--reference-mocap {mocap}: no reference of {snippet} there "
                          f"({str(e).splitlines()[0]})") from None
    same = len(reference.states) - blend - 1
    if len(longer.states) <= len(reference.states) or not np.allclose(
            longer.states[:same], reference.states[:same], atol=1e-4):
        raise ConfigError(f"--reference-mocap {mocap}: its {snippet} ({len(longer.states)} frames) does not go on "
                          f"from the data's ({len(reference.states)} frames, equal up to its last {blend + 1})")
    return longer


class StepTable:
    """Per-snippet arrays indexed by a step's time, concatenated on one device (the clips' reference states, the laws'
    commands and weights): ``at(snippet [B], time [B, L])`` gathers each row's snippet at each time index, the
    snippet's last entry past its end."""

    def __init__(self, tables: Sequence[torch.Tensor], device: torch.device):
        self.last = torch.as_tensor([len(table) - 1 for table in tables])
        self.offsets = torch.cumsum(self.last + 1, 0) - self.last - 1
        self.values = torch.cat(list(tables)).to(device)

    def to(self, device: torch.device) -> "StepTable":
        self.values = self.values.to(device)
        return self

    def at(self, snippet: torch.Tensor, time: torch.Tensor) -> torch.Tensor:
        index = self.offsets[snippet, None] + torch.minimum(time, self.last[snippet, None])
        return self.values[index.to(self.values.device)]


class NPMPDataset:
    """The HDF5 file of ``collect``, restricted to ``snippets`` (None: all; hold clips out by leaving them out)."""

    def __init__(self, path: Path | str, snippets: list[str] | None = None, device: torch.device | str = "cpu",
                 lookahead_source: str = "trajectory", path_offsets: tuple[int, ...] = (),
                 far_offsets: tuple[int, ...] = (), reference_mocap: Path | str | None = None,
                 action_weights: dict[str, np.ndarray] | None = None):
        """``lookahead_source`` "reference": batches also carry each window's reference states (the clip's
        kinematic playback at the same time indices: priors/npmp/model.py), computed here from the shipped clips;
        ``path_offsets``, ``far_offsets``: and the reference's path and states at those offsets
        (``reference_context``). ``reference_mocap``: read the reference from this mocap file instead of the one
        the data was collected on, where each snippet goes on past its end (chains written again with more turns:
        the far states near a chain's end then show the walk going on, as a high level that chains clips shows
        them, instead of the last frame repeated); its frames must equal the data's up to its blend before the
        added join (``reference_extension``). ``action_weights``: snippet -> W [T, A, A], the weights of each
        step's action error by the time index of its law (``pipelines.npmp.weights``; past T the last), for every
        chosen snippet."""
        self.file, self.device = Path(path), torch.device(device)
        try:
            with h5py.File(self.file, "r") as f:
                if f.attrs.get("format") != FORMAT or f.attrs.get("version") != VERSION:
                    raise ConfigError(f"{self.file} is not a {FORMAT} v{VERSION} file")
                available = sorted(k for k in f.keys() if isinstance(f[k], h5py.Group))
                chosen = available if snippets is None else list(snippets)
                unknown = sorted(set(chosen) - set(available))
                if unknown or not chosen:
                    raise ConfigError(f"snippets {unknown or chosen} are not in {self.file} (it has {available})")
                self.snippets = chosen
                self.meta = json.loads(f.attrs["meta"])
                self.delta_std = torch.as_tensor(f["delta_std"][()], device=self.device)
                self.attrs = {s: dict(f[s].attrs) for s in chosen}
                # keys every chosen snippet has (reference_actions: residual experts only)
                keys = {part: set.intersection(*(set(f[s][part].keys()) for s in chosen)) for part in ("bc", "nominal")}
                parts = {part: {k: [f[s][part][k][()] for s in chosen] for k in sorted(keys[part])}
                         for part in ("bc", "nominal")}
        except (OSError, KeyError) as e:
            raise ConfigError(f"{self.file} is missing or corrupt ({e.__class__.__name__}: {e})") from None
        # index of each snippet's first trajectory in the concatenated store
        self._first = {part: dict(zip(chosen, np.cumsum([0] + [len(n) for n in arrays["lengths"][:-1]])))
                       for part, arrays in parts.items()}
        self.bc = _Trajectories(parts["bc"], self.device)
        self.nominal = _Trajectories(parts["nominal"], self.device)
        self.state_dim = int(self.delta_std.shape[0])
        self.action_dim = int(self.bc.data["mean_actions"].shape[1])
        self.reference = self.context = None
        self._relabelled: torch.Tensor | None = None   # relabelled(), read on every batch when weighed
        self._law_commands: StepTable | None = None   # law_commands(), read on every batch when the feedback is scaled
        if reference_mocap is not None and lookahead_source != "reference":
            raise ConfigError("a reference mocap file (--reference-mocap) needs the reference look-ahead "
                              "(lookahead_source 'reference')")
        self.path_offsets, self.far_offsets = tuple(path_offsets), tuple(far_offsets)
        self.action_weights = None
        if action_weights is not None:
            missing = [s for s in chosen if s not in action_weights]
            if missing:
                raise ConfigError(f"no action weights for {missing}")
            self.action_weights = StepTable([torch.as_tensor(np.asarray(action_weights[s], np.float32))
                                             for s in chosen], self.device)
        if lookahead_source == "reference":
            from pipelines.npmp.evaluate import reference_playback
            from priors.npmp.model import NPMPConfig, reference_context

            clips = [reference_playback(s, ref_path=snippet_mocap(self.attrs[s])) for s in chosen]
            if reference_mocap is not None:
                clips = [reference_extension(s, clip, Path(reference_mocap)) for s, clip in zip(chosen, clips)]
            self.reference = StepTable([torch.as_tensor(c.states) for c in clips], self.device)
            if self.path_offsets or self.far_offsets:
                reads = NPMPConfig(self.state_dim, self.action_dim, lookahead=LOOKAHEAD, lookahead_source="reference",
                                   path_offsets=self.path_offsets, far_offsets=self.far_offsets)
                self.context = StepTable([reference_context(reads, torch.as_tensor(c.states), torch.as_tensor(c.root))
                                          for c in clips], self.device)
        elif lookahead_source != "trajectory":
            raise ConfigError(f"lookahead_source must be 'trajectory' or 'reference', got {lookahead_source!r}")
        elif self.path_offsets or self.far_offsets:
            raise ConfigError("path_offsets and far_offsets need the reference look-ahead (lookahead_source "
                              "'reference')")

    @property
    def path_table(self) -> torch.Tensor | None:
        """The reference path of every frame of every clip (the context's last part; None without
        ``path_offsets``): what a path's normalisation is fitted to."""
        return self.context.values[:, len(self.far_offsets) * self.state_dim:] if self.path_offsets else None

    def _reference_windows(self, store: _Trajectories, w: Windows) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """The reference states [B, L+K, S] and context (far states and path) [B, L+K, C] at the windows' time
        indices (zero where the window is padding; None where the dataset has none)."""
        if self.reference is None:
            return None, None
        snippet = store.owner[w.which]
        context = None if self.context is None else self.context.at(snippet, w.time) * w.state_ok[..., None]
        return self.reference.at(snippet, w.time) * w.state_ok[..., None], context

    def to(self, device: torch.device | str) -> "NPMPDataset":
        """Keep the data on ``device`` (batches are gathered where the data lives)."""
        device = torch.device(device)
        if device != self.device:
            self.device = self.bc.device = self.nominal.device = device
            self.delta_std = self.delta_std.to(device)
            for store in (self.bc, self.nominal):
                store.data = {k: v.to(device) for k, v in store.data.items()}
            for table in (self.reference, self.context, self.action_weights, self._law_commands):
                if table is not None:
                    table.to(device)
        return self

    def sample_bc(self, batch: int, length: int, generator: torch.Generator | None = None,
                  device: torch.device | str | None = None, per_snippet: bool = False,
                  relabelled_weight: float = 1.0, feedback_scale: float = 1.0) -> Batch:
        """Noisy-rollout subsequences (eq 8.4 inside eq 8.3): states [B, length + K, S], the expert's mean actions
        [B, length, A] and mask [B, length]; positions past a trajectory's end are zeros with mask 0. ``device``:
        where the tensors go (the data moves there once); the generator may live on the CPU or that device;
        ``per_snippet`` as in ``_Trajectories.windows``; ``relabelled_weight``: the steps of the episodes DAgger
        rounds appended (the student's own states, relabelled) are drawn that many times as often as the
        expert's. ``feedback_scale``: on LQR-law data, the targets u*_t + feedback_scale (label - u*_t), u*_t the
        law's command on its planner run at the step's time index (``law_commands``): students reproduce about
        0.79 of the law's feedback on its own rollouts (docs/npmp.md, "A loss that weighs what the law holds")."""
        if device is not None:
            self.to(device)
        weights = None if relabelled_weight == 1.0 else 1.0 + (relabelled_weight - 1.0) * self.relabelled().double()
        w = self.bc.windows(batch, length, generator, per_snippet, weights)
        states = self.bc.data["states"][w.state_index] * w.state_ok[..., None]
        actions = self.bc.data["mean_actions"][w.action_index] * w.mask[..., None]
        snippet, time = self.bc.owner[w.which], w.time[:, :length]   # each step's law at its time index
        if feedback_scale != 1.0:
            nominal = self.law_commands().at(snippet, time)
            actions = (nominal + feedback_scale * (actions - nominal)) * w.mask[..., None]
        weights = None if self.action_weights is None else self.action_weights.at(snippet, time)
        return Batch(states, actions, w.mask, *self._reference_windows(self.bc, w), action_weights=weights)

    def sample_lfpc(self, batch: int, length: int, perturbations: int, generator: torch.Generator | None = None,
                    device: torch.device | str | None = None) -> Batch:
        """LFPC subsequences of the nominal trajectories (eq 8.9), each repeated ``perturbations`` times with
        i.i.d. delta_s ~ Delta per step: states s* + delta_s [B*P, length + K, S] (the look-ahead perturbed too),
        targets a* + J* delta_s [B*P, length, A], mask [B*P, length]; the reference look-ahead (when the dataset
        has one) is not perturbed: it is the clip. ``device`` as in ``sample_bc``."""
        if device is not None:
            self.to(device)
        if perturbations < 1:
            raise ConfigError(f"perturbations must be >= 1, got {perturbations}")
        if "jacobians" not in self.nominal.data:
            raise ConfigError(f"{self.file} has no LFPC Jacobians (its experts were planners without feedback); "
                              "distil it with --scheme bc")
        w = self.nominal.windows(batch, length, generator)
        state_index, action_index, state_ok, mask = w.state_index, w.action_index, w.state_ok, w.mask
        P, K = perturbations, LOOKAHEAD
        gen_device = generator.device if generator is not None else torch.device("cpu")
        noise = torch.randn((batch, P, length + K, self.state_dim), generator=generator, device=gen_device)
        ok = state_ok[:, None, :, None]  # padding stays zero
        delta = noise.to(self.device) * self.delta_std * ok  # [B, P, L+K, S]
        states = (self.nominal.data["states"][state_index][:, None] + delta) * ok
        # J* gathered once per subsequence, not per perturbation: [B, L, A, S] is the large array here
        feedback = torch.einsum("blas,bpls->bpla", self.nominal.data["jacobians"][action_index], delta[:, :, :length])
        targets = (self.nominal.data["mean_actions"][action_index][:, None] + feedback) * mask[:, None, :, None]
        repeat = lambda x: None if x is None else x.repeat_interleave(P, dim=0)  # noqa: E731
        return Batch(states.flatten(0, 1), targets.flatten(0, 1), mask.repeat_interleave(P, dim=0),
                     *(repeat(x) for x in self._reference_windows(self.nominal, w)))

    def law_commands(self) -> StepTable:
        """The commands u*_t [T, A] of each chosen snippet's planner run, the nominal its LQR law feeds back around
        (ConfigError without one)."""
        if self._law_commands is None:
            try:
                with h5py.File(self.file, "r") as f:
                    missing = [s for s in self.snippets if "plan" not in f[s] or snippet_law(self.attrs[s], self.meta)
                               is None]
                    if missing:
                        raise ConfigError(f"{missing} in {self.file} have no LQR law's planner run: their labels "
                                          "are not a law's feedback around one")
                    for s in self.snippets:   # a periodic law feeds back around its cycle, not around the run
                        if snippet_law(self.attrs[s], self.meta).get("periodic"):
                            raise ConfigError(f"{s}'s law in {self.file} is periodic: its nominal is the cycle's")
                        plan = f[s]["plan"]
                        require_whole_run({"stopped_at": plan["stopped_at"][()]} if "stopped_at" in plan else {}, s,
                                          "the law's nominal commands")
                    runs = [torch.as_tensor(f[s]["plan"]["commands"][()], dtype=torch.float32) for s in self.snippets]
            except (OSError, KeyError) as e:
                raise ConfigError(f"{self.file} is missing or corrupt ({e.__class__.__name__}: {e})") from None
            self._law_commands = StepTable(runs, self.device)
        return self._law_commands

    def relabelled(self) -> torch.Tensor:
        """[bc trajectories] bool: True for the episodes DAgger rounds appended (each snippet's last
        ``relabelled_trajectories``), in the store's order."""
        if self._relabelled is None:
            flags = []
            for snippet in self.snippets:
                relabelled = int(self.attrs[snippet].get("relabelled_trajectories", 0))
                flags += [False] * (self.bc_trajectories(snippet) - relabelled) + [True] * relabelled
            self._relabelled = torch.as_tensor(flags, dtype=torch.bool)
        return self._relabelled

    def bc_trajectories(self, snippet: str) -> int:
        """How many bc trajectories ``snippet`` has: the expert's noisy rollouts, then the episodes DAgger rounds
        appended (``relabelled_trajectories``, the last ones)."""
        attrs = self.attrs[snippet]
        return int(attrs["trajectories"]) + int(attrs.get("relabelled_trajectories", 0))

    def trajectory(self, snippet: str, part: str = "nominal", index: int = 0) -> dict[str, np.ndarray]:
        """One stored trajectory as numpy arrays (e.g. the nominal states for one-shot imitation)."""
        if snippet not in self.snippets or part not in ("bc", "nominal"):
            raise ConfigError(f"no {part} trajectories for {snippet!r} (snippets: {self.snippets})")
        store = getattr(self, part)
        count = self.bc_trajectories(snippet) if part == "bc" else 1
        if not 0 <= index < count:
            raise ConfigError(f"{snippet} has {count} {part} trajectories; index {index} is out of range")
        number = self._first[part][snippet] + index
        steps, states, actions = (int(store.lengths[number]), int(store.state_offsets[number]),
                                  int(store.action_offsets[number]))
        out = {k: store.data[k][states:states + steps + 1].cpu().numpy() for k in ("states", "task")}
        for key in ("mean_actions", "actions", "rewards", "jacobians", "reference_actions"):
            if key in store.data:
                out[key] = store.data[key][actions:actions + steps].cpu().numpy()
        out["terminated"] = bool(store.data["terminated"][number])
        return out
