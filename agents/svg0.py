"""SVG(0) with Retrace: off-policy actor-critic on stored sequences.

Seed 000_02c29175254ceb0c.txt, Ch 6.1.2, Alg 9 (transcribed in ../shared/research/seed000.md §6):
  1. sample sequences tau = (s_1, a_1, mu(a_1|s_1), r_1, ..., s_{K+1}) from replay;
  2. Q^R = Retrace(tau, r, Q^T, mu, pi^T)            -- target critic and *target* policy (agents/retrace.py);
  3. L_Q = sum_t (Q^R_t - Q^O(s_t, a_t))^2           -- minimised w.r.t. the online critic;
  4. L_pi = sum_t E_{a~pi^O(.|s_t)} Q^T(s_t, a)      -- maximised by the reparameterisation trick, against the
                                                       *target* critic;
  5. every P learner steps: copy online -> target for every network.

Choices where the thesis is silent (documented defaults, all settable with ``--set``):
- policy: tanh-squashed diagonal Gaussian (agents/distributions.py), log-probs corrected for the tanh;
- E_pi Q^T(s', .) at the bootstrap and inside Retrace: the mean over ``action_samples`` reparameterised samples;
- entropy regularisation (objective 6.3, "SVG(0) with entropy regularisation"): added the way Alg 10 adds its KL,
  as a reward augmentation r~_t = r_t + alpha H[pi^T(.|s_t)] inside Retrace (H estimated by -log pi^T of the sampled
  actions) plus alpha E log pi^O(a|s_t) in the policy loss; alpha is fixed or auto-tuned towards a target entropy
  (default -|A|) by the usual dual gradient step on log alpha;
- gamma = 0.99, Retrace lambda = 1 (Munos et al.'s default), replay capacity 10^6 steps;
- from Ch 7.5: unroll K = 10, target period P = 100, Adam lr 3e-4 (in the thesis's 1e-4..5e-4 range); ReLU MLPs
  (activation unstated) of 2 x 256 instead of the thesis's 2 x 300: an update costs ~19 % less on one CPU thread
  (the critic's matmuls dominate), which the wall-clock target against SAC needs.
- schedule: the thesis's learner took 512 sequences per update, fed by 128 actors. Here one actor feeds one learner
  on a CPU core, where 512 x 10 transitions cost ~0.5 s per update; svg0's schedule (``SVG0Agent.schedule``, which
  the run owns: agents/schedule.py) is 16 sequences (160 transitions) at every actor step, chosen by measurement
  against 32 sequences every step or every second step (docs/benchmarks.md). ``--set batch_size=512`` restores the
  thesis's batch.

Learner options beyond the thesis (issue 12; defaults chosen by measurement, see docs/benchmarks.md):
- ``critics = H`` critic heads evaluated as one batched module (agents/networks.py ``Critic``, batched matmuls, no
  loop over heads); targets and the policy use the min over heads (clipped double Q, Fujimoto et al. 2018) or their
  mean (``critic_reduce``);
- ``critic_norm``: a LayerNorm after every hidden layer of the critic, or a pre-LayerNorm residual body (SimBa);
- ``obs_norm``: running observation mean/variance from the states the actor visits, applied to acting and to
  replayed batches (replay keeps raw observations), saved in checkpoints;
- ``target_tau > 0``: Polyak averaging at every update instead of Alg 9's hard copies every P updates;
  ``policy_critic=online``: the policy ascends the online critic instead of Alg 9's target critic.

Two parts, each with its own section of settings, called through a few hooks so that ``update`` reads as Alg 9:
- ``prior`` (agents/behaviour_prior.py): KL-regularised RL with a learned behaviour prior (seed 000 Ch 7, Alg 10/11;
  ``--set prior=mlp|lstm|latent``, ``--set prior.kl_coef=0.01``, ...): a KL penalty on Retrace's rewards and in the
  policy loss, and the prior's own distillation step. The entropy regularisation above stays as configured
  (Distral, eq 7.3, has both terms); ``--set entropy_coef=0 --set entropy_auto=false`` leaves Alg 10's KL alone.
  Multitask: one agent on a multitask environment (the task id is task information) trains one shared prior.
- ``exploration`` (agents/exploration.py): none | noisy | bootstrap | ucb (seed 004 §4, ``--set exploration=ucb``,
  ``--set exploration.ensemble_size=5``, ...): how the actor picks actions and how the critic is built.
- latent-space reuse (Fig 7.5): ``latent_controller=PATH`` (a saved latent prior) makes the policy's action the
  latent z of the frozen decoder pi_0(a|s, z) (priors/reuse.py).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch
from gymnasium import spaces

import priors
from agents import exploration
from agents.behaviour_prior import BehaviourPrior, PriorSection
from agents.config import ConfigError, box_action_dim
from agents.exploration import ExplorationSection
from agents.networks import GaussianPolicy, frozen_copy, gradient_step, hard_update, polyak_update
from agents.observations import ObsLayout, RunningNormalizer
from agents.protocol import AgentBase
from agents.replay import masked_mean
from agents.retrace import retrace_targets, truncated_importance_weights
from agents.schedule import Schedule
from inference.layers.batched import NORMS
from priors.reuse import LatentActionEnv

@dataclasses.dataclass(frozen=True)
class SVG0Config:
    hidden: tuple[int, ...] = (256, 256)  # thesis: 300 x 300; 256 cuts an update's time by ~19 % (measured)
    sequence_length: int = 10  # K, the unroll length
    target_period: int = 100  # P, learner updates between hard target copies
    policy_lr: float = 3e-4
    critic_lr: float = 3e-4
    discount: float = 0.99
    retrace_lambda: float = 1.0
    action_samples: int = 2  # samples for E_pi Q and the entropy estimate
    entropy_auto: bool = True
    entropy_coef: float = 0.1  # fixed alpha, or the initial alpha when auto-tuned
    target_entropy: float | None = None  # None: -|A|
    critics: int = 1  # critic heads in one batched module; 1: Alg 9's single critic (the ablation's choice), 2: twin
    critic_reduce: str = "min"  # how targets and the policy combine the heads: min (clipped double Q) | mean
    critic_norm: str = "layernorm"  # critic body: none | layernorm | residual (inference/layers/batched.py)
    critic_hidden: tuple[int, ...] = ()  # critic widths; () uses ``hidden``
    obs_norm: bool = True  # running observation normalisation (agents/observations.py), saved in checkpoints
    target_tau: float = 0.0  # 0: hard target copies every target_period updates (Alg 9 step 5); > 0: Polyak
    policy_critic: str = "target"  # the critic the policy ascends: target (Alg 9 step 4) | online
    grad_clip: float | None = None  # max gradient norm per network; None: no clipping
    # the two parts, each with its own section of settings (--set prior.kl_coef=0.1, --set exploration=ucb)
    prior: PriorSection = PriorSection()  # KL regularisation against a behaviour prior (agents/behaviour_prior.py)
    exploration: ExplorationSection = ExplorationSection()  # by weight uncertainty (agents/exploration.py)
    # latent-space reuse (Fig 7.5): act through a saved latent prior's frozen decoder
    latent_controller: str = ""  # a saved latent prior whose frozen decoder turns the policy's z into actions
    latent_scale: float = 3.0  # z = latent_scale * action

    # flat names of settings that now live in a section (configs saved before the sections)
    MOVED = {"prior": "prior.kind", "prior_obs": "prior.obs", "kl_coef": "prior.kl_coef", "prior_lr": "prior.lr",
             "prior_hidden": "prior.hidden", "kl_in_policy_loss": "prior.kl_in_policy_loss",
             "prior_init": "prior.init", "prior_trainable": "prior.trainable", "latent_dim": "prior.latent_dim",
             "latent_ar_coef": "prior.latent_ar_coef", "latent_lookahead": "prior.latent_lookahead",
             "exploration": "exploration.kind", "noise_sigma0": "exploration.noise_sigma0",
             "ensemble_size": "exploration.ensemble_size", "ensemble_prior_scale": "exploration.prior_scale",
             "mask_prob": "exploration.mask_prob", "ucb_lambda": "exploration.ucb_lambda",
             "candidate_actions": "exploration.candidate_actions"}

    @classmethod
    def upgrade_saved(cls, data: dict) -> dict:
        """A config saved with the flat layout (``prior=mlp``, ``kl_coef``, ``ensemble_size``, ...) in sections."""
        for old, new in cls.MOVED.items():   # "prior" and "exploration" first: they become the sections
            if old in data and not isinstance(data[old], dict):
                section, field = new.split(".")
                value = data.pop(old)
                data[section] = {**data.get(section, {}), field: value}
        return data

    def validate(self) -> None:
        checks = [
            (self.sequence_length >= 1, "sequence_length must be >= 1"),
            (self.target_period >= 1, "target_period must be >= 1"),
            (0.0 <= self.discount <= 1.0, "discount must be in [0, 1]"),
            (0.0 <= self.retrace_lambda <= 1.0, "retrace_lambda must be in [0, 1]"),
            (self.action_samples >= 1, "action_samples must be >= 1"),
            (self.critics >= 1, "critics must be >= 1"),
            (0.0 <= self.entropy_coef < math.inf, "entropy_coef must be finite and >= 0"),
            (not (self.entropy_auto and self.entropy_coef == 0.0),
             "entropy_coef is the initial alpha when entropy_auto=true and must be > 0 (or set entropy_auto=false)"),
            (self.target_entropy is None or math.isfinite(self.target_entropy), "target_entropy must be finite"),
            (self.grad_clip is None or self.grad_clip > 0, "grad_clip must be > 0 (or none)"),
            (0 < self.policy_lr < math.inf and 0 < self.critic_lr < math.inf, "learning rates must be finite and > 0"),
            (self.critic_reduce in ("min", "mean"), "critic_reduce must be min or mean"),
            (self.critic_norm in NORMS, f"critic_norm must be one of {', '.join(NORMS)}"),
            (not self.critic_hidden or min(self.critic_hidden) >= 1, "critic_hidden must list positive widths"),
            (self.critic_norm != "residual" or len(set(self.critic_hidden or self.hidden)) == 1,
             "critic_norm=residual needs equal critic widths (critic_hidden=256,256)"),
            (0.0 <= self.target_tau <= 1.0, "target_tau must be in [0, 1] (0: hard copies every target_period)"),
            (self.policy_critic in ("target", "online"), "policy_critic must be target or online"),
            (len(self.hidden) >= 1 and min(self.hidden) >= 1, "hidden must list positive layer widths"),
            (self.latent_scale > 0, "latent_scale must be > 0"),
        ]
        for ok, message in checks:
            if not ok:
                raise ConfigError(message)
        self.prior.validate()
        self.exploration.validate()



class SVG0Agent(AgentBase):
    Config = SVG0Config
    # the run's replay/update schedule unless --set changes it (agents/schedule.py): 16 sequences at every actor
    # step, chosen by measurement (docs/benchmarks.md; thesis: 512 sequences fed by 128 actors)
    schedule = Schedule(replay_capacity=1_000_000, learning_starts=500, update_every=1, updates_per_step=1,
                        batch_size=16)

    def __init__(self, observation_space: spaces.Dict, action_space: spaces.Space, config: SVG0Config,
                 device: torch.device | str = "cpu"):
        action_dim = box_action_dim("svg0", action_space)
        config.validate()
        self.config = config
        self.device = torch.device(device)
        self.layout = ObsLayout(observation_space)
        self.action_dim = action_dim
        obs_dim = self.layout.dim
        # the parts: an exploration strategy (how actions are chosen, how the critic is built) and an optional
        # behaviour prior (a KL regulariser on rewards and the policy loss)
        self.exploration = exploration.build(config.exploration)
        self.policy = GaussianPolicy(obs_dim, action_dim, config.hidden, linear=self.exploration.linear).to(self.device)
        self.critic = self.exploration.critic(obs_dim, action_dim, config.critic_hidden or config.hidden,
                                              config.critics, config.critic_norm).to(self.device)
        self.behaviour_prior = None if config.prior.kind == "none" else \
            BehaviourPrior(config.prior, self.layout, action_dim, self.device, config.grad_clip)
        self.obs_norm = RunningNormalizer(obs_dim).to(self.device) if config.obs_norm else None
        self.target_policy = frozen_copy(self.policy)
        self.target_critic = frozen_copy(self.critic)
        self.log_alpha = torch.tensor(math.log(max(config.entropy_coef, 1e-8)), device=self.device,
                                      requires_grad=config.entropy_auto)
        self.target_entropy = (-float(self.action_dim) if config.target_entropy is None
                               else config.target_entropy)
        self.policy_opt = torch.optim.Adam(self.policy.parameters(), lr=config.policy_lr)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=config.critic_lr)
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=config.policy_lr) if config.entropy_auto else None
        self.updates = 0

    @staticmethod
    def wrap_env(env, config: SVG0Config, device, action_repeat: int = 1):
        """Latent-space reuse: the policy acts through a saved latent prior's frozen decoder. The environment keeps
        the run's action repeat: a Ch 7 latent prior's decoder was learned at its source run's decision rate."""
        if not config.latent_controller:
            return env
        try:
            prior, meta = priors.load_prior(config.latent_controller, device)
        except priors.ModuleFileError as e:
            raise ConfigError(f"latent_controller: {e}") from None
        if not isinstance(prior, priors.LatentPrior):
            raise ConfigError(f"latent_controller: {config.latent_controller} holds a {prior.config.kind} prior; "
                              "only a latent prior has a latent space to act in")
        prior.requires_grad_(False)
        try:
            return LatentActionEnv(env, prior.decode, prior.config.latent_dim, meta["obs_groups"],
                                   config.latent_scale, device)
        except priors.ModuleFileError as e:
            raise ConfigError(f"latent_controller: {e}") from None

    def export_artifacts(self, run_dir) -> None:
        """Save the prior where ``prior.init`` / ``latent_controller`` of another run can load it."""
        if self.behaviour_prior is not None:
            self.behaviour_prior.export(run_dir, self.updates)

    # -- acting ----------------------------------------------------------------------------------------------
    def begin_episode(self) -> None:
        self.exploration.begin_episode()

    @torch.no_grad()
    def act(self, obs: np.ndarray, deterministic: bool = False) -> tuple[np.ndarray, float]:
        """Action in [-1, 1] for one flat observation, and its behaviour log-probability log mu(a|s)."""
        state = torch.as_tensor(obs, device=self.device).unsqueeze(0)
        if self.obs_norm is not None:  # statistics come from observe(): the states actors visited
            state = self.obs_norm(state)
        if deterministic:
            self.policy.eval()  # NoisyLinear layers run on their means
            mode = self.policy(state).mode[0]
            self.policy.train()
            return mode.cpu().numpy(), 0.0
        action, log_mu = self.exploration.act(self.policy, self.critic, state)
        return action.cpu().numpy(), log_mu

    def observe(self, states: np.ndarray) -> None:
        if self.obs_norm is not None:
            self.obs_norm.update(torch.as_tensor(states, device=self.device))

    def acting_state(self) -> dict:
        """The policy, the observation statistics and, where the strategy acts with it, the critic."""
        state = {"policy": self.policy.state_dict()}
        if self.exploration.acts_with_critic:
            state["critic"] = self.critic.state_dict()
        if self.obs_norm is not None:
            state["obs_norm"] = self.obs_norm.state_dict()
        return {k: {n: t.detach().cpu() for n, t in v.items()} for k, v in state.items()}

    def load_acting_state(self, state: dict) -> None:
        self.policy.load_state_dict(state["policy"])
        if self.exploration.acts_with_critic:
            self.critic.load_state_dict(state["critic"])
        if self.obs_norm is not None:
            self.obs_norm.load_state_dict(state["obs_norm"])

    @property
    def alpha(self) -> torch.Tensor:
        if self.config.entropy_coef == 0.0:  # validate() forbids this with entropy_auto: regularisation is off
            return torch.zeros((), device=self.device)
        return self.log_alpha.detach().exp()

    # -- learning (Alg 9) ------------------------------------------------------------------------------------
    def retrace_targets(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        """Step 2: Q^R from the target networks on rewards augmented by alpha H (and -kl_coef KL^T with a prior)."""
        cfg = self.config
        obs, action, mask = batch["obs"], batch["action"], batch["mask"]
        K = action.shape[1]
        with torch.no_grad():
            target_dist = self.target_policy(obs)  # over the K+1 states
            sampled, sampled_log_prob = target_dist.rsample_with_log_prob(cfg.action_samples)
            # [B, K+1, H]: E_pi^T Q^T(s, .) for each head targets are computed for (exploration.target_heads)
            value = self.exploration.target_heads(self.target_critic(obs, sampled), cfg.critic_reduce).mean(0)
            entropy = -sampled_log_prob.mean(0)  # [B, K+1]
            q_taken = self.exploration.target_heads(self.target_critic(obs[:, :K], action), cfg.critic_reduce)
            log_ratio = target_dist[:, :K].log_prob(action) - batch["behaviour_log_prob"]
            c = truncated_importance_weights(log_ratio, cfg.retrace_lambda)
            rewards = batch["reward"] + self.alpha * entropy[:, :K]
            metrics = {}
            if self.behaviour_prior is not None:
                penalty, metrics = self.behaviour_prior.reward_penalty(batch, self.policy(obs[:, :K]))
                rewards = rewards - penalty
            # every head's own Retrace targets: heads are folded into the batch dimension
            H, B = value.shape[-1], value.shape[0]
            fold = lambda x: x.movedim(-1, 0).reshape(H * B, -1)  # noqa: E731
            per_head = lambda x: x.repeat(H, 1)  # noqa: E731
            targets = retrace_targets(per_head(rewards), per_head(batch["discount"]), per_head(mask), fold(q_taken),
                                      fold(value[:, 1:]), per_head(c), cfg.discount)
            targets = targets.reshape(H, B, K).movedim(0, -1)  # [B, K, H]
        # metrics stay tensors: no host synchronisation inside the update (the loop reads them when it logs)
        head_mask = mask.unsqueeze(-1).expand_as(targets)
        target_mean = masked_mean(targets, head_mask)
        metrics.update({
            "q/retrace_target_mean": target_mean,
            "q/retrace_target_std": masked_mean((targets - target_mean).pow(2), head_mask).sqrt(),
            "retrace/mean_c": masked_mean(c, mask),
            "retrace/truncated_fraction": masked_mean((log_ratio > 0).float(), mask),  # min(1, ratio) clipped
        })
        return targets, metrics

    def critic_loss(self, batch: dict[str, torch.Tensor], targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Step 3: sum_t (Q^R_t - Q^O(s_t, a_t))^2 for every head (weighted per head by the exploration strategy)."""
        obs, action, mask = batch["obs"], batch["action"], batch["mask"]
        q = self.critic(obs[:, :action.shape[1]], action)  # [B, K, heads]
        squared = (targets - q).pow(2)
        weights = self.exploration.critic_weights(batch)
        if weights is not None:
            squared = squared * weights
        return 0.5 * masked_mean(squared.sum(-1), mask), q.detach()

    def policy_loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
        """Step 4: -E_pi^O Q^T by reparameterised actions, + alpha E log pi^O (+ kl_coef KL[pi^O || pi_0^T])."""
        obs, action, mask = batch["obs"], batch["action"], batch["mask"]
        dist = self.policy(obs[:, :action.shape[1]])
        new_action, log_prob = dist.rsample_with_log_prob()
        critic = self.target_critic if self.config.policy_critic == "target" else self.critic
        q_new = self.exploration.policy_value(critic(obs[:, :action.shape[1]], new_action), self.config.critic_reduce)
        per_step = self.alpha * log_prob - q_new
        metrics = {}
        if self.behaviour_prior is not None:
            penalty, metrics = self.behaviour_prior.policy_penalty(batch, dist)
            per_step = per_step + penalty
        return masked_mean(per_step, mask), log_prob, metrics

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """One learner step of Alg 9 on a batch of sequences; metrics as 0-d tensors (read them when logging)."""
        cfg = self.config
        if self.obs_norm is not None:  # replay keeps raw observations; normalise with the current statistics
            batch = {**batch, "obs": self.obs_norm(batch["obs"]), "raw_obs": batch["obs"]}
        self.exploration.before_update((self.policy, self.critic, self.target_policy, self.target_critic))
        targets, metrics = self.retrace_targets(batch)                       # step 2
        critic_loss, q = self.critic_loss(batch, targets)                    # step 3
        gradient_step(self.critic_opt, critic_loss, self.critic.parameters(), cfg.grad_clip)
        policy_loss, log_prob, policy_metrics = self.policy_loss(batch)     # step 4
        # with policy_critic=online this also leaves gradients on the critic; its next step zeroes them first
        gradient_step(self.policy_opt, policy_loss, self.policy.parameters(), cfg.grad_clip)
        metrics.update(policy_metrics)
        if self.behaviour_prior is not None:                                 # Alg 10: distil the policy into the prior
            metrics.update(self.behaviour_prior.update(batch, self.policy))
        mask = batch["mask"]
        if self.alpha_opt is not None:
            alpha_loss = -self.log_alpha * masked_mean(log_prob.detach() + self.target_entropy, mask)
            self.alpha_opt.zero_grad(set_to_none=True)
            alpha_loss.backward()
            self.alpha_opt.step()

        self.updates += 1                                                    # step 5: the targets
        pairs = [(self.target_policy, self.policy), (self.target_critic, self.critic)]
        if self.behaviour_prior is not None:
            pairs += self.behaviour_prior.target_pairs()
        if cfg.target_tau > 0:  # Polyak averaging at every update
            for target, online in pairs:
                polyak_update(target, online, cfg.target_tau)
        elif self.updates % cfg.target_period == 0:  # hard copies every P updates
            for target, online in pairs:
                hard_update(target, online)

        metrics.update({
            "loss/critic": critic_loss.detach(),
            "loss/policy": policy_loss.detach(),
            "q/mean": masked_mean(q, mask.unsqueeze(-1).expand_as(q)),
            "policy/entropy": -masked_mean(log_prob.detach(), mask),
            "policy/alpha": self.alpha,
            "replay/mean_sequence_length": mask.sum(1).mean(),
        })
        return metrics

    # -- checkpointing ---------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        state = {
            "policy": self.policy.state_dict(), "critic": self.critic.state_dict(),
            "target_policy": self.target_policy.state_dict(), "target_critic": self.target_critic.state_dict(),
            "log_alpha": self.log_alpha.detach().clone(),
            "policy_opt": self.policy_opt.state_dict(), "critic_opt": self.critic_opt.state_dict(),
            "updates": self.updates, **self.exploration.state_dict(),
        }
        if self.obs_norm is not None:
            state["obs_norm"] = self.obs_norm.state_dict()
        if self.alpha_opt is not None:
            state["alpha_opt"] = self.alpha_opt.state_dict()
        if self.behaviour_prior is not None:
            state.update(self.behaviour_prior.state_dict())
        return state

    def load_state_dict(self, state: dict) -> None:
        if not isinstance(self.exploration, exploration.NoisyNet) and \
                any(k.startswith(("heads.", "ensemble.")) for k in state["critic"]):
            raise ValueError("it holds svg0's critic from before the batched critic of issue 12, which this version "
                             "cannot load; start a new run")
        for name in ("policy", "critic", "target_policy", "target_critic"):
            getattr(self, name).load_state_dict(state[name])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        self.policy_opt.load_state_dict(state["policy_opt"])
        self.critic_opt.load_state_dict(state["critic_opt"])
        if self.alpha_opt is not None:
            self.alpha_opt.load_state_dict(state["alpha_opt"])
        if self.behaviour_prior is not None:
            self.behaviour_prior.load_state_dict(state)
        if self.obs_norm is not None:
            self.obs_norm.load_state_dict(state["obs_norm"])
        self.exploration.load_state_dict(state)
        self.updates = int(state["updates"])
