"""Soft Q-learning with an amortised-SVGD sampler policy (Haarnoja, Tang, Abbeel, Levine 2017, "Reinforcement
Learning with Deep Energy-Based Policies"; the sampler follows seed 002_c38d9063238be78e.txt Sec. 4.1, Alg. 4.1,
whose eq. 1.3 is this agent's policy; ../shared/research/seed002.md §5 item 6).

Maximum-entropy RL with temperature alpha. Equation numbers are the paper's:
- soft value (eq. 10), by importance sampling with a uniform proposal q_a' = U[-1, 1]^d (density 2^-d):
    V(s) = alpha log E_{a'~q}[exp(Q(s, a')/alpha) / q(a')]
         = alpha (logsumexp_j Q(s, a'_j)/alpha - log M + d log 2)              (M = ``value_particles``)
- soft Bellman regression (eq. 11): Q(s, a) <- reward_scale r + gamma (1 - terminal) V_target(s'), squared error,
  with V_target from the *target* Q network, hard-copied every ``target_period`` updates;
- policy pi(a|s) ∝ exp(Q(s, a)/alpha) on [-1, 1]^d (the paper's Theorem 1), represented by a sampler network
  a = tanh(f(s, xi)), xi ~ N(0, I) (``inference.stein.MLPSampler`` with the state as context), trained by
  amortised SVGD (eqs. 13-14 = seed 002 Alg. 4.1, eq. 4.3) with the repository's ``amortised_svgd_step``
  (``inference/stein/amortised.py``) and RBF kernel (``inference/stein/kernels.py``), one particle set of
  ``svgd_particles`` draws per replayed state, scores from the *online* Q network as in the paper.

Choices where the paper is silent or where this implementation differs, stated:
- SVGD runs in the pre-squash space u = f(s, xi), on the exact density of u when a = tanh(u) follows the target:
  log p(u|s) = Q(s, tanh u)/alpha + sum_k log(1 - tanh(u_k)^2). The authors' code applies SVGD to the squashed
  actions with log p = Q + sum log(1 - a^2), mixing the two coordinate systems; here the target is exact, and
  pi is exactly the Boltzmann density on the box whose normaliser eq. 10 estimates.
- The SVGD direction uses one set of particles for both sums of eq. 13 (``svgd_direction``); the authors' code
  splits the particles into a "fixed" half (the sum over j) and an "updated" half (the points moved).
- Kernel: RBF with the Liu & Wang median-heuristic bandwidth h = med^2 / log N (``RBF("liu2016")``); the
  authors' code also uses an adaptive (median-heuristic) isotropic Gaussian kernel.
- Defaults (``SQLConfig``) are the authors' multi-goal example (examples/multigoal_sql.py): 2 x 128 ReLU networks,
  Adam lr 3e-4 for both, batch 64, 16 value particles, 32 SVGD particles, target period 1000, gamma 0.99, one
  update per environment step after 100 steps, alpha = 1. Their example scales rewards by 0.1 (``reward_scale``),
  which is the same as alpha = 10 on the raw rewards; the default here is reward_scale = 1 (the environment's own
  units, as for svg0), and ``benchmarks/exploration_multigoal.py`` sets 0.1 as the authors did.
- Acting: ``act`` returns one sampler draw. The sampler has no tractable density, so the behaviour log-probability
  returned (and stored in replay) is 0.0; soft Q-learning is off-policy without importance weights and never reads
  it. Deterministic acting (the trainer's evaluation) draws ``eval_draws`` actions and returns the one the online Q
  ranks highest: the mode of exp(Q/alpha) among the sampler's proposals.
- Replay sequences of length K (``sequence_length``, default 1) are used as K independent transitions (masked).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch import nn

from agents.schedule import Schedule
from agents.protocol import AgentBase
from agents.config import ConfigError, box_action_dim
from agents.networks import QNetwork, frozen_copy, hard_update
from agents.observations import ObsLayout
from agents.replay import masked_mean
from inference.stein import RBF, MLPSampler, amortised_svgd_step


@dataclasses.dataclass(frozen=True)
class SQLConfig:
    hidden: tuple[int, ...] = (128, 128)  # Q network
    sampler_hidden: int = 128  # sampler f(s, xi): sampler_layers hidden layers of this width, ReLU
    sampler_layers: int = 2
    q_lr: float = 3e-4
    sampler_lr: float = 3e-4
    discount: float = 0.99
    alpha: float = 1.0  # temperature of pi ∝ exp(Q/alpha)
    reward_scale: float = 1.0  # the authors' multi-goal example uses 0.1
    value_particles: int = 16  # M in eq. 10 (uniform importance samples)
    svgd_particles: int = 32  # particles per state for the SVGD direction (eq. 13)
    kernel_bandwidth: Literal["liu2016", "seed002"] = "liu2016"
    eval_draws: int = 32  # deterministic act: best of this many sampler draws under Q
    target_period: int = 1000  # updates between hard copies of the target Q network
    sequence_length: int = 1

    def validate(self) -> None:
        checks = [
            (len(self.hidden) >= 1 and min(self.hidden) >= 1, "hidden must list positive layer widths"),
            (self.sampler_hidden >= 1 and self.sampler_layers >= 1, "sampler_hidden and sampler_layers must be >= 1"),
            (0 < self.q_lr < math.inf and 0 < self.sampler_lr < math.inf, "learning rates must be finite and > 0"),
            (0.0 <= self.discount <= 1.0, "discount must be in [0, 1]"),
            (0 < self.alpha < math.inf, "alpha (the temperature) must be finite and > 0"),
            (math.isfinite(self.reward_scale), "reward_scale must be finite"),
            (self.value_particles >= 1, "value_particles must be >= 1"),
            (self.svgd_particles >= 2, "svgd_particles must be >= 2 (SVGD needs a particle set)"),
            (self.kernel_bandwidth in ("liu2016", "seed002"), "kernel_bandwidth must be liu2016 or seed002"),
            (self.eval_draws >= 1, "eval_draws must be >= 1"),
            (self.target_period >= 1, "target_period must be >= 1"),
            (self.sequence_length >= 1, "sequence_length must be >= 1"),
        ]
        for ok, message in checks:
            if not ok:
                raise ConfigError(message)


def log_one_minus_tanh_sq(u: torch.Tensor) -> torch.Tensor:
    """log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)), stable for large |u|."""
    return 2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))


def soft_value(q_values: torch.Tensor, alpha: float, action_dim: int) -> torch.Tensor:
    """Eq. 10 with a uniform proposal on [-1, 1]^d: q_values [..., M] at M uniform actions -> V [...]."""
    m = q_values.shape[-1]
    return alpha * (torch.logsumexp(q_values / alpha, dim=-1) - math.log(m) + action_dim * math.log(2.0))


class SQLAgent(AgentBase):
    Config = SQLConfig
    # the run's replay/update schedule unless --set changes it (agents/schedule.py): the authors' example's
    schedule = Schedule(replay_capacity=1_000_000, learning_starts=100, update_every=1, updates_per_step=1,
                        batch_size=64)

    def __init__(self, observation_space: spaces.Dict, action_space: spaces.Space, config: SQLConfig,
                 device: torch.device | str = "cpu"):
        action_dim = box_action_dim("sql", action_space)
        config.validate()
        self.config = config
        self.device = torch.device(device)
        self.layout = ObsLayout(observation_space)
        self.action_dim = d = action_dim
        self.critic = QNetwork(self.layout.dim, d, config.hidden).to(self.device)
        self.target_critic = frozen_copy(self.critic)
        self.sampler = MLPSampler(d, d, config.sampler_hidden, config.sampler_layers, nn.ReLU,
                                  context_dim=self.layout.dim).to(self.device)
        self.kernel = RBF(config.kernel_bandwidth)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=config.q_lr)
        self.sampler_opt = torch.optim.Adam(self.sampler.parameters(), lr=config.sampler_lr)
        self.updates = 0

    # -- the policy ------------------------------------------------------------------------------------------
    def pre_squash(self, obs: torch.Tensor, draws: int) -> torch.Tensor:
        """u = f(s, xi) for ``draws`` noise draws per state: obs [..., D] -> [..., draws, d]."""
        noise = torch.randn(*obs.shape[:-1], draws, self.action_dim, device=self.device)
        return self.sampler(noise, obs)

    def sample(self, obs: torch.Tensor, draws: int) -> torch.Tensor:
        """Actions a = tanh(f(s, xi)) in [-1, 1]^d, [..., draws, d]."""
        return torch.tanh(self.pre_squash(obs, draws))

    def q(self, obs: torch.Tensor, action: torch.Tensor, target: bool = False) -> torch.Tensor:
        """Q(s, a) for obs [..., D] and action [..., N, d] -> [..., N] (obs broadcast over the N actions)."""
        net = self.target_critic if target else self.critic
        return net(obs.unsqueeze(-2), action)[..., 0]

    def log_target(self, obs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """log p(u|s) up to a constant, for u = pre-squash actions [..., N, d]: the Boltzmann policy mapped through
        tanh (module docstring)."""
        return self.q(obs, torch.tanh(u)) / self.config.alpha + log_one_minus_tanh_sq(u).sum(-1)

    def svgd_score(self, obs: torch.Tensor):
        """grad_u log p(u|s) for the particle sets of the states ``obs`` (the score ``amortised_svgd_step`` needs)."""
        def score(u: torch.Tensor) -> torch.Tensor:
            with torch.enable_grad():
                u = u.detach().requires_grad_(True)
                (grad,) = torch.autograd.grad(self.log_target(obs, u).sum(), u)
            return grad
        return score

    @torch.no_grad()
    def act(self, obs: np.ndarray, deterministic: bool = False) -> tuple[np.ndarray, float]:
        """One sampler draw (or the best of ``eval_draws`` under Q when deterministic); the behaviour log-prob is
        0.0 because the sampler has no tractable density and soft Q-learning does not use it."""
        state = torch.as_tensor(obs, device=self.device, dtype=torch.float32)
        if not deterministic:
            return self.sample(state, 1)[0].cpu().numpy(), 0.0
        actions = self.sample(state, self.config.eval_draws)
        return actions[self.q(state, actions).argmax()].cpu().numpy(), 0.0

    # -- learning --------------------------------------------------------------------------------------------
    def sampler_step(self, states: torch.Tensor) -> dict[str, float]:
        """Eqs. 13-14: move the sampler along the SVGD direction towards exp(Q(s, .)/alpha) at ``states`` [N, D],
        one set of ``svgd_particles`` draws per state (seed 002 Alg. 4.1 via ``amortised_svgd_step``)."""
        if states.shape[0] == 0:  # every replayed sequence was empty: nothing to move towards
            return {"loss": 0.0, "phi_norm": 0.0}
        noise = torch.randn(states.shape[0], self.config.svgd_particles, self.action_dim, device=self.device)
        return amortised_svgd_step(self.sampler, self.sampler_opt, self.svgd_score(states), noise, context=states,
                                   kernel=self.kernel)

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        cfg = self.config
        obs, action, mask = batch["obs"], batch["action"], batch["mask"]
        K = action.shape[1]
        state, next_state = obs[:, :K], obs[:, 1:]

        with torch.no_grad():  # eq. 10 at s' with the target network, eq. 11's target
            uniform = torch.rand(*next_state.shape[:-1], cfg.value_particles, self.action_dim,
                                 device=self.device) * 2.0 - 1.0
            next_value = soft_value(self.q(next_state, uniform, target=True), cfg.alpha, self.action_dim)
            targets = cfg.reward_scale * batch["reward"] + cfg.discount * batch["discount"] * next_value

        q = self.critic(state, action)[..., 0]  # [B, K]
        critic_loss = 0.5 * masked_mean((targets - q).pow(2), mask)
        self.critic_opt.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_opt.step()

        svgd = self.sampler_step(state[mask.bool()])

        self.updates += 1
        if self.updates % cfg.target_period == 0:
            hard_update(self.target_critic, self.critic)

        with torch.no_grad():
            valid = mask.bool()
            return {
                "loss/critic": critic_loss.item(),
                "loss/policy": svgd["loss"],
                "policy/svgd_direction_norm": svgd["phi_norm"],
                "q/mean": q.detach()[valid].mean().item(),
                "q/soft_value_target_mean": next_value[valid].mean().item(),
                "q/target_mean": targets[valid].mean().item(),
            }

    # -- checkpointing ---------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"critic": self.critic.state_dict(), "target_critic": self.target_critic.state_dict(),
                "sampler": self.sampler.state_dict(), "critic_opt": self.critic_opt.state_dict(),
                "sampler_opt": self.sampler_opt.state_dict(), "updates": self.updates}

    def load_state_dict(self, state: dict) -> None:
        for name in ("critic", "target_critic", "sampler"):
            getattr(self, name).load_state_dict(state[name])
        self.critic_opt.load_state_dict(state["critic_opt"])
        self.sampler_opt.load_state_dict(state["sampler_opt"])
        self.updates = int(state["updates"])
