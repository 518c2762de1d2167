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
- from Ch 7.5: 2 x 300 ReLU MLPs (activation unstated in the thesis), unroll K = 10, target period P = 100, Adam
  lr 3e-4 (in the thesis's 1e-4..5e-4 range).
- batch: the thesis's learner took 512 sequences per update, fed by 128 actors. Here one actor feeds one learner
  on a CPU core, where 512 x 10 transitions cost ~0.5 s per update; the default is 32 sequences (320 transitions)
  every ``update_every = 2`` actor steps, i.e. 160 replayed transitions per actor step.
  ``--set batch_size=512 --set update_every=1`` restores the thesis's batch.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch
from gymnasium import spaces

from agents.config import ConfigError
from agents.networks import GaussianPolicy, QNetwork, frozen_copy, hard_update
from agents.observations import ObsLayout
from agents.retrace import retrace_targets, truncated_importance_weights


@dataclasses.dataclass(frozen=True)
class SVG0Config:
    hidden: tuple[int, ...] = (300, 300)
    sequence_length: int = 10  # K, the unroll length
    batch_size: int = 32  # sequences per learner update (thesis: 512, with 128 actors; see module docstring)
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
    update_every: int = 2  # actor steps per learner update
    critics: int = 1  # 1: Alg 9's single critic; 2: clipped double Q (min over heads) against overestimation
    grad_clip: float | None = None  # max gradient norm per network; None: no clipping

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
            (len(self.hidden) >= 1 and min(self.hidden) >= 1, "hidden must list positive layer widths"),
        ]
        for ok, message in checks:
            if not ok:
                raise ConfigError(message)


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


class SVG0Agent:
    Config = SVG0Config

    def __init__(self, observation_space: spaces.Dict, action_space: spaces.Space, config: SVG0Config,
                 device: torch.device | str = "cpu"):
        if not (isinstance(action_space, spaces.Box) and action_space.shape and len(action_space.shape) == 1):
            raise ConfigError(f"svg0 needs a continuous (Box) action space, this environment has {action_space}")
        config.validate()
        self.config = config
        self.device = torch.device(device)
        self.layout = ObsLayout(observation_space)
        self.action_dim = action_space.shape[0]
        obs_dim = self.layout.dim
        self.policy = GaussianPolicy(obs_dim, self.action_dim, config.hidden).to(self.device)
        self.critic = QNetwork(obs_dim, self.action_dim, config.hidden, config.critics).to(self.device)
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

    # -- acting ----------------------------------------------------------------------------------------------
    @torch.no_grad()
    def act(self, obs: np.ndarray, deterministic: bool = False) -> tuple[np.ndarray, float]:
        """Action in [-1, 1] for one flat observation, and its behaviour log-probability log mu(a|s)."""
        dist = self.policy(torch.as_tensor(obs, device=self.device).unsqueeze(0))
        if deterministic:
            return dist.mode[0].cpu().numpy(), 0.0
        action, _ = dist.rsample_with_log_prob()
        # log-prob of the action as stored, through the same path the learner uses (see distributions.py)
        return action[0].cpu().numpy(), float(dist.log_prob(action)[0])

    @property
    def alpha(self) -> torch.Tensor:
        if self.config.entropy_coef == 0.0:  # validate() forbids this with entropy_auto: regularisation is off
            return torch.zeros((), device=self.device)
        return self.log_alpha.detach().exp()

    # -- learning --------------------------------------------------------------------------------------------
    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        cfg = self.config
        obs, action, mask = batch["obs"], batch["action"], batch["mask"]
        K = action.shape[1]
        alpha = self.alpha

        with torch.no_grad():  # Retrace targets from the target networks (Alg 9, step 2)
            target_dist = self.target_policy(obs)  # over the K+1 states
            sampled, sampled_log_prob = target_dist.rsample_with_log_prob(cfg.action_samples)
            value = self.target_critic(obs, sampled).amin(-1).mean(0)  # E_pi^T Q^T(s, .)  [B, K+1]
            entropy = -sampled_log_prob.mean(0)  # [B, K+1]
            q_taken = self.target_critic(obs[:, :K], action).amin(-1)
            target_log_prob = target_dist[:, :K].log_prob(action)
            log_ratio = target_log_prob - batch["behaviour_log_prob"]
            c = truncated_importance_weights(log_ratio, cfg.retrace_lambda)
            rewards = batch["reward"] + alpha * entropy[:, :K]
            targets = retrace_targets(rewards, batch["discount"], mask, q_taken, value[:, 1:], c, cfg.discount)

        # critic (step 3)
        q = self.critic(obs[:, :K], action)  # [B, K, heads], every head regresses the same targets
        critic_loss = 0.5 * masked_mean((targets.unsqueeze(-1) - q).pow(2).sum(-1), mask)
        self.critic_opt.zero_grad(set_to_none=True)
        critic_loss.backward()
        if cfg.grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(self.critic.parameters(), cfg.grad_clip)
        self.critic_opt.step()

        # policy (step 4): reparameterised actions through the target critic, plus the entropy term
        dist = self.policy(obs[:, :K])
        new_action, log_prob = dist.rsample_with_log_prob()
        q_new = self.target_critic(obs[:, :K], new_action).amin(-1)
        policy_loss = masked_mean(alpha * log_prob - q_new, mask)
        self.policy_opt.zero_grad(set_to_none=True)
        policy_loss.backward()
        if cfg.grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(self.policy.parameters(), cfg.grad_clip)
        self.policy_opt.step()

        if self.alpha_opt is not None:
            alpha_loss = -self.log_alpha * masked_mean(log_prob.detach() + self.target_entropy, mask)
            self.alpha_opt.zero_grad(set_to_none=True)
            alpha_loss.backward()
            self.alpha_opt.step()

        self.updates += 1
        if self.updates % cfg.target_period == 0:  # step 5
            hard_update(self.target_policy, self.policy)
            hard_update(self.target_critic, self.critic)

        with torch.no_grad():
            valid = mask.bool()
            return {
                "loss/critic": critic_loss.item(),
                "loss/policy": policy_loss.item(),
                "q/mean": q.detach()[valid].mean().item(),
                "q/retrace_target_mean": targets[valid].mean().item(),
                "q/retrace_target_std": targets[valid].std().item() if valid.sum() > 1 else 0.0,
                "retrace/mean_c": c[valid].mean().item(),
                "retrace/truncated_fraction": (log_ratio[valid] > 0).float().mean().item(),  # min(1, ratio) clipped
                "policy/entropy": -log_prob.detach()[valid].mean().item(),
                "policy/alpha": alpha.item(),
                "replay/mean_sequence_length": mask.sum(1).mean().item(),
            }

    # -- checkpointing ---------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        state = {
            "policy": self.policy.state_dict(), "critic": self.critic.state_dict(),
            "target_policy": self.target_policy.state_dict(), "target_critic": self.target_critic.state_dict(),
            "log_alpha": self.log_alpha.detach().clone(),
            "policy_opt": self.policy_opt.state_dict(), "critic_opt": self.critic_opt.state_dict(),
            "updates": self.updates,
        }
        if self.alpha_opt is not None:
            state["alpha_opt"] = self.alpha_opt.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        for name in ("policy", "critic", "target_policy", "target_critic"):
            getattr(self, name).load_state_dict(state[name])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        self.policy_opt.load_state_dict(state["policy_opt"])
        self.critic_opt.load_state_dict(state["critic_opt"])
        if self.alpha_opt is not None:
            self.alpha_opt.load_state_dict(state["alpha_opt"])
        self.updates = int(state["updates"])
