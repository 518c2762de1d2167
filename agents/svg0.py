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
- batch: the thesis's learner took 512 sequences per update, fed by 128 actors. Here one actor feeds one learner
  on a CPU core, where 512 x 10 transitions cost ~0.5 s per update; the default is 16 sequences (160 transitions)
  at every actor step (chosen by measurement against 32 sequences every step or every second step, see
  docs/benchmarks.md). ``--set batch_size=512`` restores the thesis's batch.

Learner options beyond the thesis (issue 12; defaults chosen by measurement, see docs/benchmarks.md):
- ``critics = H`` critic heads evaluated as one batched module (agents/networks.py ``Critic``, batched matmuls, no
  loop over heads); targets and the policy use the min over heads (clipped double Q, Fujimoto et al. 2018) or their
  mean (``critic_reduce``);
- ``critic_norm``: a LayerNorm after every hidden layer of the critic, or a pre-LayerNorm residual body (SimBa);
- ``obs_norm``: running observation mean/variance from the states the actor visits, applied to acting and to
  replayed batches (replay keeps raw observations), saved in checkpoints;
- ``target_tau > 0``: Polyak averaging at every update instead of Alg 9's hard copies every P updates;
  ``policy_critic=online``: the policy ascends the online critic instead of Alg 9's target critic;
- ``updates_per_step`` updates every ``update_every`` actor steps (the update ratio), ``batch_size`` sequences.

KL-regularised RL with a learned behaviour prior (seed 000 Ch 7, Alg 10; Alg 11 for the latent prior), with
``--set prior=mlp|lstm|latent`` (priors/models.py):
- r~_t = r_t - kl_coef * KL[pi^O(.|s_t) || pi_0^T(.|s_t)] inside Retrace (the *target* prior; eq 7.2, alpha = 0.01);
- the prior minimises L_pi0 = sum_t KL[pi^O(.|s_t) || pi_0^O(.|s_t)] w.r.t. its own parameters only (the policy is
  detached: distillation); the latent prior's inference network is trained by the same loss and learning rate;
- Alg 10's listing leaves the current step's KL out of the policy loss, although objective 7.2 implies it (Q built
  from augmented rewards has no gradient for a KL that does not depend on a_t). ``kl_in_policy_loss`` (default on)
  adds kl_coef * KL[pi^O || pi_0^T] to the policy loss, differentiated w.r.t. the policy only; for the latent prior
  its action part is taken analytically given z ~ f^T (priors/models.py);
- information asymmetry (§7.4.2): the prior sees only the observation groups in ``prior_obs`` (default: proprio);
- the entropy regularisation above stays as configured (Distral, eq 7.3, has both terms);
  ``--set entropy_coef=0 --set entropy_auto=false`` leaves Alg 10's KL alone;
- every P updates pi_0^T <- pi_0^O with the other targets. Multitask: one agent on a multitask environment (the task
  id is task information) trains one shared prior.
- transfer: ``prior_init=PATH`` starts from a saved prior (a run exports its prior to ``<run>/prior`` at every
  checkpoint), ``prior_trainable=false`` keeps it fixed;
- latent-space reuse (Fig 7.5): ``latent_controller=PATH`` (a saved latent prior) makes the policy's action the
  latent z of the frozen decoder pi_0(a|s, z) (priors/reuse.py).

Exploration by weight uncertainty (seed 004 §4, issue #7), ``--set exploration=...``:
- ``noisy`` (NoisyNet, Fortunato et al. 2017, seed 004 eq 24): every linear layer of the policy and the critic is a
  factorised NoisyLinear (inference/layers/noisy.py). Noise is redrawn only (a) at the start of every learner
  update, independently for the online and target networks, and (b) in ``act`` before each stochastic action (the
  behaviour log-prob is that of the drawn network). ``act(..., deterministic=True)`` runs the noise-free mean
  network and redraws nothing.
- ``bootstrap`` (bootstrapped DQN, seed 004 §4.2, carried to continuous actions): the critic is an ensemble of
  ``ensemble_size`` heads with randomised prior functions (Q_k = f_k + beta p_k, p_k frozen; Osband et al. 2018),
  head k trained only on transitions whose fixed bootstrap mask m_k = 1 (a hash of the transition's replay id,
  inference/layers/ensemble.py), each head regressing its own Retrace targets. One head is drawn per episode
  (``begin_episode``); each step the actor draws ``candidate_actions`` actions from the policy and takes the one the
  episode's head values most (Thompson-style: the greedy choice of a sampled value function, over the policy's
  support). The policy ascends the heads' mean.
- ``ucb`` (seed 004 §4.3): the same ensemble; the actor takes the candidate maximising mean_k Q_k + ucb_lambda std_k Q_k.
- For ``bootstrap``/``ucb`` the chosen action's behaviour density is intractable (a max over samples), so those
  transitions store log mu = +inf: their traces are cut (c = 0) and Retrace falls back to one-step expected-SARSA
  targets r + gamma E_pi Q(s', .), which need no behaviour density. Deterministic evaluation uses the policy's mode.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from pathlib import Path

import numpy as np
import torch
from gymnasium import spaces

import priors
from agents.protocol import AgentBase
from agents.config import ConfigError, box_action_dim
from agents.networks import Critic, GaussianPolicy, QNetwork, frozen_copy, hard_update, polyak_update
from agents.observations import ObsLayout, RunningNormalizer
from agents.retrace import retrace_targets, truncated_importance_weights
from inference.layers import NoisyLinear, fixed_bootstrap_mask, reset_noise, ucb_action
from inference.layers.batched import NORMS
from priors.reuse import LatentActionEnv

EXPLORATION = ("none", "noisy", "bootstrap", "ucb")
CUT_TRACES = 1e6  # stored as log mu(a|s) when mu is intractable: c = min(1, pi/mu) = 0 (finite, unlike +inf: masked
#                   replay steps multiply it by 0)


@dataclasses.dataclass(frozen=True)
class SVG0Config:
    hidden: tuple[int, ...] = (256, 256)  # thesis: 300 x 300; 256 cuts an update's time by ~19 % (measured)
    sequence_length: int = 10  # K, the unroll length
    batch_size: int = 16  # sequences per learner update (thesis: 512, with 128 actors; see module docstring)
    target_period: int = 100  # P, learner updates between hard target copies
    policy_lr: float = 3e-4
    critic_lr: float = 3e-4
    discount: float = 0.99
    retrace_lambda: float = 1.0
    action_samples: int = 2  # samples for E_pi Q and the entropy estimate
    entropy_auto: bool = True
    entropy_coef: float = 0.1  # fixed alpha, or the initial alpha when auto-tuned
    target_entropy: float | None = None  # None: -|A|
    replay_capacity: int = 1_000_000
    learning_starts: int = 500  # actor steps before the first update
    update_every: int = 1  # actor steps per learner update
    updates_per_step: int = 1  # learner updates at each update point (update ratio = updates_per_step/update_every)
    critics: int = 2  # critic heads, one batched module; 1: Alg 9's single critic, 2: clipped double Q
    critic_reduce: str = "min"  # how targets and the policy combine the heads: min (clipped double Q) | mean
    critic_norm: str = "layernorm"  # critic body: none | layernorm | residual (inference/layers/batched.py)
    critic_hidden: tuple[int, ...] = ()  # critic widths; () uses ``hidden``
    obs_norm: bool = True  # running observation normalisation (agents/observations.py), saved in checkpoints
    target_tau: float = 0.0  # 0: hard target copies every target_period updates (Alg 9 step 5); > 0: Polyak
    policy_critic: str = "target"  # the critic the policy ascends: target (Alg 9 step 4) | online
    grad_clip: float | None = None  # max gradient norm per network; None: no clipping
    # behaviour prior (Ch 7; see the module docstring)
    prior: str = "none"  # none | mlp | lstm | latent
    prior_obs: tuple[str, ...] = ("proprio",)  # observation groups the prior sees (information asymmetry)
    kl_coef: float = 0.01  # alpha of eq 7.2
    prior_lr: float = 3e-4
    prior_hidden: tuple[int, ...] = (300, 300)
    kl_in_policy_loss: bool = True
    prior_init: str = ""  # a saved prior (or a run directory that exported one) to start from
    prior_trainable: bool = True
    latent_dim: int = 2
    latent_ar_coef: float = 0.95
    latent_lookahead: int = 3
    latent_controller: str = ""  # a saved latent prior whose frozen decoder turns the policy's z into actions
    latent_scale: float = 3.0  # z = latent_scale * action
    # exploration (seed 004 §4; see the module docstring)
    exploration: str = "none"  # none | noisy | bootstrap | ucb
    noise_sigma0: float = 0.5  # NoisyLinear's factorised sigma_0
    ensemble_size: int = 5  # critic heads for bootstrap / ucb
    ensemble_prior_scale: float = 3.0  # beta of the randomised prior functions
    mask_prob: float = 0.5  # bootstrap mask probability
    ucb_lambda: float = 1.0
    candidate_actions: int = 10  # policy samples the ensemble chooses among when acting

    def validate(self) -> None:
        checks = [
            (self.sequence_length >= 1, "sequence_length must be >= 1"),
            (self.batch_size >= 1, "batch_size must be >= 1"),
            (self.target_period >= 1, "target_period must be >= 1"),
            (0.0 <= self.discount <= 1.0, "discount must be in [0, 1]"),
            (0.0 <= self.retrace_lambda <= 1.0, "retrace_lambda must be in [0, 1]"),
            (self.action_samples >= 1, "action_samples must be >= 1"),
            (self.critics >= 1, "critics must be >= 1"),
            (0.0 <= self.entropy_coef < math.inf, "entropy_coef must be finite and >= 0"),
            (not (self.entropy_auto and self.entropy_coef == 0.0),
             "entropy_coef is the initial alpha when entropy_auto=true and must be > 0 (or set entropy_auto=false)"),
            (self.target_entropy is None or math.isfinite(self.target_entropy), "target_entropy must be finite"),
            (self.replay_capacity > self.sequence_length + 1, "replay_capacity must exceed sequence_length + 1"),
            (self.learning_starts >= 0, "learning_starts must be >= 0"),
            (self.grad_clip is None or self.grad_clip > 0, "grad_clip must be > 0 (or none)"),
            (0 < self.policy_lr < math.inf and 0 < self.critic_lr < math.inf, "learning rates must be finite and > 0"),
            (self.update_every >= 1, "update_every must be >= 1"),
            (self.updates_per_step >= 1, "updates_per_step must be >= 1"),
            (self.critic_reduce in ("min", "mean"), "critic_reduce must be min or mean"),
            (self.critic_norm in NORMS, f"critic_norm must be one of {', '.join(NORMS)}"),
            (not self.critic_hidden or min(self.critic_hidden) >= 1, "critic_hidden must list positive widths"),
            (self.critic_norm != "residual" or len(set(self.critic_hidden or self.hidden)) == 1,
             "critic_norm=residual needs equal critic widths (critic_hidden=256,256)"),
            (0.0 <= self.target_tau <= 1.0, "target_tau must be in [0, 1] (0: hard copies every target_period)"),
            (self.policy_critic in ("target", "online"), "policy_critic must be target or online"),
            (len(self.hidden) >= 1 and min(self.hidden) >= 1, "hidden must list positive layer widths"),
            (self.prior in ("none", *priors.KINDS), f"prior must be none, {', '.join(priors.KINDS)}"),
            (len(self.prior_obs) >= 1, "prior_obs must name at least one observation group"),
            (0.0 <= self.kl_coef < math.inf, "kl_coef must be finite and >= 0"),
            (0 < self.prior_lr < math.inf, "prior_lr must be finite and > 0"),
            (len(self.prior_hidden) >= 1 and min(self.prior_hidden) >= 1, "prior_hidden must list positive widths"),
            (self.prior != "none" or not self.prior_init, "prior_init needs a prior kind (--set prior=...)"),
            (self.latent_dim >= 1 and self.latent_lookahead >= 0, "latent_dim >= 1, latent_lookahead >= 0"),
            (0.0 <= self.latent_ar_coef < 1.0, "latent_ar_coef must be in [0, 1)"),
            (self.latent_scale > 0, "latent_scale must be > 0"),
            (self.exploration in EXPLORATION, f"exploration must be one of {', '.join(EXPLORATION)}"),
            (self.noise_sigma0 > 0 and self.ensemble_size >= 2 and self.ensemble_prior_scale >= 0,
             "noise_sigma0 > 0, ensemble_size >= 2 and ensemble_prior_scale >= 0 are required"),
            (0 < self.mask_prob <= 1 and self.ucb_lambda >= 0 and self.candidate_actions >= 1,
             "mask_prob in (0, 1], ucb_lambda >= 0 and candidate_actions >= 1 are required"),
        ]
        for ok, message in checks:
            if not ok:
                raise ConfigError(message)


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


class SVG0Agent(AgentBase):
    Config = SVG0Config

    def __init__(self, observation_space: spaces.Dict, action_space: spaces.Space, config: SVG0Config,
                 device: torch.device | str = "cpu"):
        action_dim = box_action_dim("svg0", action_space)
        config.validate()
        self.config = config
        self.device = torch.device(device)
        self.layout = ObsLayout(observation_space)
        self.action_dim = action_dim
        obs_dim = self.layout.dim
        self.ensemble = config.exploration in ("bootstrap", "ucb")
        self.noisy = config.exploration == "noisy"
        linear = functools.partial(NoisyLinear, sigma0=config.noise_sigma0) if self.noisy else torch.nn.Linear
        self.policy = GaussianPolicy(obs_dim, self.action_dim, config.hidden, linear=linear).to(self.device)
        critic_hidden = config.critic_hidden or config.hidden
        # exploration=noisy: plain NoisyLinear MLP heads (critic_norm does not apply; a loop over config.critics
        # heads); bootstrap/ucb: ensemble_size heads in place of config.critics
        if self.noisy:
            self.critic = QNetwork(obs_dim, self.action_dim, critic_hidden, config.critics, linear).to(self.device)
        elif self.ensemble:
            self.critic = Critic(obs_dim, self.action_dim, critic_hidden, config.ensemble_size, config.critic_norm,
                                 config.ensemble_prior_scale).to(self.device)
        else:
            self.critic = Critic(obs_dim, self.action_dim, critic_hidden, config.critics,
                                 config.critic_norm).to(self.device)
        self.obs_norm = RunningNormalizer(obs_dim).to(self.device) if config.obs_norm else None
        self.head = 0  # the ensemble head acting in this episode (bootstrap)
        self.mask_salt = int(torch.randint(2**31 - 1, ()))  # which heads a transition trains: fixed per agent
        self.target_policy = frozen_copy(self.policy)
        self.target_critic = frozen_copy(self.critic)
        self.log_alpha = torch.tensor(math.log(max(config.entropy_coef, 1e-8)), device=self.device,
                                      requires_grad=config.entropy_auto)
        self.target_entropy = (-float(self.action_dim) if config.target_entropy is None
                               else config.target_entropy)
        self.policy_opt = torch.optim.Adam(self.policy.parameters(), lr=config.policy_lr)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=config.critic_lr)
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=config.policy_lr) if config.entropy_auto else None
        self.prior = self.target_prior = self.prior_opt = None
        if config.prior != "none":
            self._build_prior(config)
        self.updates = 0

    def _build_prior(self, config: SVG0Config) -> None:
        try:
            self.prior_groups = self.layout.check_groups(config.prior_obs)
        except ValueError as e:
            raise ConfigError(f"prior_obs: {e}") from None
        self.prior_obs_sizes = {g: self.layout.size([g]) for g in self.layout.groups if g in self.prior_groups}
        if config.prior_init:
            try:
                prior, meta = priors.load_prior(config.prior_init, self.device)
            except priors.ModuleFileError as e:
                raise ConfigError(f"prior_init: {e}") from None
            if prior.config.kind != config.prior or prior.config.action_dim != self.action_dim:
                raise ConfigError(f"prior_init: {config.prior_init} holds a {prior.config.kind} prior for "
                                  f"{prior.config.action_dim} actions; this run needs a {config.prior} prior for "
                                  f"{self.action_dim}")
            if meta.get("obs_groups") != self.prior_obs_sizes:
                raise ConfigError(f"prior_init: the prior saw observation groups {meta.get('obs_groups')}, this run's "
                                  f"prior_obs give {self.prior_obs_sizes}")
            self.prior = prior
        else:
            self.prior = priors.build(priors.PriorConfig(
                config.prior, self.layout.size(self.prior_groups), self.action_dim, config.prior_hidden,
                config.latent_dim, config.latent_ar_coef, config.latent_lookahead)).to(self.device)
        self.target_prior = frozen_copy(self.prior)
        if config.prior_trainable:
            self.prior_opt = torch.optim.Adam(self.prior.parameters(), lr=config.prior_lr)
        else:
            self.prior.requires_grad_(False)

    @staticmethod
    def wrap_env(env, config: SVG0Config, device):
        """Latent-space reuse: the policy acts through a saved latent prior's frozen decoder."""
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
        """Save the prior where ``prior_init`` / ``latent_controller`` of another run can load it."""
        if self.prior is not None:
            priors.save_prior(self.prior, Path(run_dir) / "prior", self.prior_obs_sizes, updates=self.updates)

    # -- acting ----------------------------------------------------------------------------------------------
    def begin_episode(self) -> None:
        if self.config.exploration == "bootstrap":
            self.head = int(torch.randint(self.config.ensemble_size, ()))

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
        if self.noisy:
            reset_noise(self.policy)
        dist = self.policy(state)
        if self.ensemble:  # choose among policy samples by the ensemble; mu is intractable (module docstring)
            candidates, _ = dist.rsample_with_log_prob(self.config.candidate_actions)  # [M, 1, A]
            q = self.critic(state, candidates)[:, 0]  # [M, heads]
            best = q[:, self.head].argmax() if self.config.exploration == "bootstrap" else \
                ucb_action(q.T, self.config.ucb_lambda)
            return candidates[best, 0].cpu().numpy(), CUT_TRACES
        action, _ = dist.rsample_with_log_prob()
        # log-prob of the action as stored, through the same path the learner uses (see distributions.py)
        return action[0].cpu().numpy(), float(dist.log_prob(action)[0])

    def observe(self, states: np.ndarray) -> None:
        if self.obs_norm is not None:
            self.obs_norm.update(torch.as_tensor(states, device=self.device))

    def acting_state(self) -> dict:
        """The policy, the observation statistics and, for ensemble exploration, the critic that picks actions."""
        state = {"policy": self.policy.state_dict()}
        if self.ensemble:
            state["critic"] = self.critic.state_dict()
        if self.obs_norm is not None:
            state["obs_norm"] = self.obs_norm.state_dict()
        return {k: {n: t.detach().cpu() for n, t in v.items()} for k, v in state.items()}

    def load_acting_state(self, state: dict) -> None:
        self.policy.load_state_dict(state["policy"])
        if self.ensemble:
            self.critic.load_state_dict(state["critic"])
        if self.obs_norm is not None:
            self.obs_norm.load_state_dict(state["obs_norm"])

    @property
    def alpha(self) -> torch.Tensor:
        if self.config.entropy_coef == 0.0:  # validate() forbids this with entropy_auto: regularisation is off
            return torch.zeros((), device=self.device)
        return self.log_alpha.detach().exp()

    # -- learning --------------------------------------------------------------------------------------------
    def _prior_kl(self, prior, batch, dist, analytic: bool = False):
        """Per-step KL[pi(.|s_t) || prior(.|s_t)] [B, K] on the prior's observation groups (priors/models.py).

        The prior sees raw observations (``raw_obs``), never normalised ones: a saved prior is reused by runs with
        other statistics, or by ``latent_controller`` on raw environment observations."""
        action, mask = batch["action"], batch["mask"]
        prior_obs = self.layout.select(batch.get("raw_obs", batch["obs"])[:, :action.shape[1]], self.prior_groups)
        return prior.kl(prior_obs, dist.mean, dist.std, action, mask, analytic=analytic)

    def retrace_targets(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        """Q^R from the target networks (Alg 9 step 2) on rewards augmented by entropy and -kl_coef KL^T (Alg 10)."""
        cfg = self.config
        obs, action, mask = batch["obs"], batch["action"], batch["mask"]
        K = action.shape[1]
        with torch.no_grad():
            target_dist = self.target_policy(obs)  # over the K+1 states
            sampled, sampled_log_prob = target_dist.rsample_with_log_prob(cfg.action_samples)
            # [B, K+1, H]: E_pi^T Q^T(s, .) per ensemble head (H = heads), or the min over clipped double-Q heads
            value = self._critic_heads(self.target_critic(obs, sampled)).mean(0)
            entropy = -sampled_log_prob.mean(0)  # [B, K+1]
            q_taken = self._critic_heads(self.target_critic(obs[:, :K], action))  # [B, K, H]
            log_ratio = target_dist[:, :K].log_prob(action) - batch["behaviour_log_prob"]
            c = truncated_importance_weights(log_ratio, cfg.retrace_lambda)
            rewards = batch["reward"] + self.alpha * entropy[:, :K]
            metrics = {}
            if self.prior is not None:  # KL^T_t = KL[pi^O || pi_0^T], the online policy against the target prior
                kl_target, _ = self._prior_kl(self.target_prior, batch, self.policy(obs[:, :K]))
                rewards = rewards - cfg.kl_coef * kl_target
                metrics["prior/kl_target"] = masked_mean(kl_target, mask)
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

    def _critic_heads(self, q: torch.Tensor) -> torch.Tensor:
        """Q over heads [..., heads] -> the heads targets are computed for: every ensemble head its own, else one
        value from all heads (their min: clipped double Q, or their mean; ``critic_reduce``)."""
        if self.ensemble:
            return q
        return q.amin(-1, keepdim=True) if self.config.critic_reduce == "min" else q.mean(-1, keepdim=True)

    def policy_loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
        """Alg 9 step 4: -E_pi^O Q^T by reparameterised actions, + alpha E log pi^O, + kl_coef KL[pi^O || pi_0^T]."""
        obs, action, mask = batch["obs"], batch["action"], batch["mask"]
        K = action.shape[1]
        dist = self.policy(obs[:, :K])
        new_action, log_prob = dist.rsample_with_log_prob()
        critic = self.target_critic if self.config.policy_critic == "target" else self.critic
        q_new = critic(obs[:, :K], new_action)
        q_new = q_new.mean(-1) if self.ensemble else self._critic_heads(q_new)[..., 0]  # ensemble mean, or reduce
        per_step = self.alpha * log_prob - q_new
        metrics = {}
        if self.prior is not None and self.config.kl_in_policy_loss:
            kl, _ = self._prior_kl(self.target_prior, batch, dist, analytic=True)
            per_step = per_step + self.config.kl_coef * kl
            metrics["prior/kl_policy_term"] = masked_mean(kl.detach(), mask)
        return masked_mean(per_step, mask), log_prob, metrics

    def prior_loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        """L_pi0 = sum_t KL[pi^O || pi_0^O] w.r.t. the prior (and inference network) only: the policy is detached."""
        obs, action, mask = batch["obs"], batch["action"], batch["mask"]
        with torch.no_grad():
            dist = self.policy(obs[:, :action.shape[1]])
        kl, terms = self._prior_kl(self.prior, batch, dist)
        loss = masked_mean(kl, mask)
        return loss, {"prior/kl_online": loss.detach(), **{f"prior/bound_{k}": v for k, v in terms.items()}}

    def bootstrap_masks(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """[B, K, heads]: whether each stored transition trains each head, fixed by its replay write id."""
        return fixed_bootstrap_mask(batch["write_id"], self.config.ensemble_size, self.config.mask_prob,
                                    self.mask_salt).to(self.device)

    def _step(self, optimiser, loss, parameters) -> None:
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        if self.config.grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(parameters, self.config.grad_clip)
        optimiser.step()

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """One learner step of Alg 9 on a batch of sequences; metrics as 0-d tensors (read them when logging)."""
        cfg = self.config
        if self.obs_norm is not None:  # replay keeps raw observations; normalise with the current statistics
            batch = {**batch, "obs": self.obs_norm(batch["obs"]), "raw_obs": batch["obs"]}
        obs, action, mask = batch["obs"], batch["action"], batch["mask"]
        K = action.shape[1]
        if self.noisy:  # fresh, independent noise for the online and target networks at every update
            for network in (self.policy, self.critic, self.target_policy, self.target_critic):
                reset_noise(network)
        targets, metrics = self.retrace_targets(batch)

        # critic (step 3): every head regresses its targets, ensemble heads only on their bootstrap samples
        q = self.critic(obs[:, :K], action)  # [B, K, heads]
        squared = (targets - q).pow(2)
        if self.ensemble:
            squared = squared * self.bootstrap_masks(batch)
        critic_loss = 0.5 * masked_mean(squared.sum(-1), mask)
        self._step(self.critic_opt, critic_loss, self.critic.parameters())

        policy_loss, log_prob, policy_metrics = self.policy_loss(batch)
        # with policy_critic=online this also leaves gradients on the critic; its next step zeroes them first
        self._step(self.policy_opt, policy_loss, self.policy.parameters())
        metrics.update(policy_metrics)

        if self.prior_opt is not None:
            prior_loss, prior_metrics = self.prior_loss(batch)
            self._step(self.prior_opt, prior_loss, self.prior.parameters())
            metrics.update({"loss/prior": prior_loss.detach(), **prior_metrics})

        if self.alpha_opt is not None:
            alpha_loss = -self.log_alpha * masked_mean(log_prob.detach() + self.target_entropy, mask)
            self.alpha_opt.zero_grad(set_to_none=True)
            alpha_loss.backward()
            self.alpha_opt.step()

        self.updates += 1
        pairs = [(self.target_policy, self.policy), (self.target_critic, self.critic)]
        if self.prior is not None:
            pairs.append((self.target_prior, self.prior))
        if cfg.target_tau > 0:  # Polyak averaging at every update
            for target, online in pairs:
                polyak_update(target, online, cfg.target_tau)
        elif self.updates % cfg.target_period == 0:  # step 5: hard copies every P updates
            for target, online in pairs:
                hard_update(target, online)

        metrics.update({
            "loss/critic": critic_loss.detach(),
            "loss/policy": policy_loss.detach(),
            "q/mean": masked_mean(q.detach(), mask.unsqueeze(-1).expand_as(q)),
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
            "updates": self.updates, "mask_salt": torch.tensor(self.mask_salt),
        }
        if self.obs_norm is not None:
            state["obs_norm"] = self.obs_norm.state_dict()
        if self.alpha_opt is not None:
            state["alpha_opt"] = self.alpha_opt.state_dict()
        if self.prior is not None:
            state["prior"], state["target_prior"] = self.prior.state_dict(), self.target_prior.state_dict()
        if self.prior_opt is not None:
            state["prior_opt"] = self.prior_opt.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        if not self.noisy and any(k.startswith(("heads.", "ensemble.")) for k in state["critic"]):
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
        if self.prior is not None:
            self.prior.load_state_dict(state["prior"])
            self.target_prior.load_state_dict(state["target_prior"])
        if self.prior_opt is not None:
            self.prior_opt.load_state_dict(state["prior_opt"])
        if self.obs_norm is not None:
            self.obs_norm.load_state_dict(state["obs_norm"])
        self.updates = int(state["updates"])
        self.mask_salt = int(state["mask_salt"])
