"""Exploration by weight uncertainty for svg0: its ``exploration`` part (seed 004 §4, issue #7).

A strategy decides how the critic is built, how the actor picks an action, and what the learner does with noise and
heads; svg0 (agents/svg0.py) calls it through the hooks of ``Exploration``. ``exploration.kind``:
- ``none``: actions sampled from the policy, behaviour log-prob log pi(a|s); the critic is svg0's batched critic;
- ``noisy`` (NoisyNet, Fortunato et al. 2017, seed 004 eq 24): every linear layer of the policy and the critic is a
  factorised NoisyLinear (inference/layers/noisy.py). Noise is redrawn only (a) at the start of every learner
  update, independently for the online and target networks, and (b) in ``act`` before each stochastic action (the
  behaviour log-prob is that of the drawn network). Deterministic acting runs the noise-free mean network.
  (critic_norm does not apply: plain NoisyLinear MLP heads.)
- ``bootstrap`` (bootstrapped DQN, seed 004 §4.2, carried to continuous actions): the critic is an ensemble of
  ``ensemble_size`` heads with randomised prior functions (Q_k = f_k + beta p_k, p_k frozen; Osband et al. 2018),
  head k trained only on transitions whose fixed bootstrap mask m_k = 1 (a hash of the transition's replay id,
  inference/layers/ensemble.py), each head regressing its own Retrace targets. One head is drawn per episode; each
  step the actor draws ``candidate_actions`` actions from the policy and takes the one the episode's head values
  most (Thompson-style: the greedy choice of a sampled value function, over the policy's support). The policy
  ascends the heads' mean.
- ``ucb`` (seed 004 §4.3): the same ensemble; the actor takes the candidate maximising mean_k Q_k + ucb_lambda std_k.
For ``bootstrap``/``ucb`` the chosen action's behaviour density is intractable (a max over samples), so those
transitions store log mu = ``CUT_TRACES``: their traces are cut (c = 0) and Retrace falls back to one-step
expected-SARSA targets r + gamma E_pi Q(s', .), which need no behaviour density.
"""
from __future__ import annotations

import dataclasses
import functools

import torch

from agents.config import ConfigError
from agents.networks import Critic, QNetwork
from inference.layers import NoisyLinear, fixed_bootstrap_mask, reset_noise, ucb_action

KINDS = ("none", "noisy", "bootstrap", "ucb")
CUT_TRACES = 1e6  # stored as log mu(a|s) when mu is intractable: c = min(1, pi/mu) = 0 (finite, unlike +inf: masked
#                   replay steps multiply it by 0)


@dataclasses.dataclass(frozen=True)
class ExplorationSection:
    kind: str = "none"  # none | noisy | bootstrap | ucb
    noise_sigma0: float = 0.5  # NoisyLinear's factorised sigma_0
    ensemble_size: int = 5  # critic heads for bootstrap / ucb
    prior_scale: float = 3.0  # beta of the ensemble's randomised prior functions
    mask_prob: float = 0.5  # bootstrap mask probability
    ucb_lambda: float = 1.0
    candidate_actions: int = 10  # policy samples the ensemble chooses among when acting

    def validate(self) -> None:
        if self.kind not in KINDS:
            raise ConfigError(f"exploration.kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if not (self.noise_sigma0 > 0 and self.ensemble_size >= 2 and self.prior_scale >= 0):
            raise ConfigError("exploration.noise_sigma0 > 0, exploration.ensemble_size >= 2 and "
                              "exploration.prior_scale >= 0 are required")
        if not (0 < self.mask_prob <= 1 and self.ucb_lambda >= 0 and self.candidate_actions >= 1):
            raise ConfigError("exploration.mask_prob in (0, 1], exploration.ucb_lambda >= 0 and "
                              "exploration.candidate_actions >= 1 are required")


def reduce_heads(q: torch.Tensor, how: str) -> torch.Tensor:
    """[..., heads] -> [..., 1]: the min over critic heads (clipped double Q) or their mean."""
    return q.amin(-1, keepdim=True) if how == "min" else q.mean(-1, keepdim=True)


class Exploration:
    """``none``: the policy's own samples; every hook the others override."""

    linear = torch.nn.Linear   # the policy's layers
    acts_with_critic = False   # whether distributed actors need the critic to act

    def __init__(self, section: ExplorationSection):
        self.section = section

    def critic(self, obs_dim: int, action_dim: int, hidden, critics: int, norm: str) -> torch.nn.Module:
        return Critic(obs_dim, action_dim, hidden, critics, norm)

    def begin_episode(self) -> None:
        pass

    def act(self, policy, critic, state: torch.Tensor) -> tuple[torch.Tensor, float]:
        """A stochastic action [A] for one state [1, D] and its behaviour log-probability."""
        dist = policy(state)
        action, _ = dist.rsample_with_log_prob()
        # log-prob of the action as stored, through the same path the learner uses (see distributions.py)
        return action[0], float(dist.log_prob(action)[0])

    def before_update(self, networks) -> None:
        pass

    def target_heads(self, q: torch.Tensor, reduce: str) -> torch.Tensor:
        """Q [..., heads] -> the heads Retrace targets are computed for: one value from all heads."""
        return reduce_heads(q, reduce)

    def policy_value(self, q: torch.Tensor, reduce: str) -> torch.Tensor:
        """Q [..., heads] -> the value the policy ascends [...]."""
        return reduce_heads(q, reduce)[..., 0]

    def critic_weights(self, batch: dict) -> torch.Tensor | None:
        """[B, K, heads] weights of each transition in each head's loss, or None (all ones)."""
        return None

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


class NoisyNet(Exploration):
    def __init__(self, section: ExplorationSection):
        super().__init__(section)
        self.linear = functools.partial(NoisyLinear, sigma0=section.noise_sigma0)

    def critic(self, obs_dim, action_dim, hidden, critics, norm):
        return QNetwork(obs_dim, action_dim, hidden, critics, self.linear)

    def act(self, policy, critic, state):
        reset_noise(policy)
        return super().act(policy, critic, state)

    def before_update(self, networks) -> None:
        for network in networks:  # fresh, independent noise for the online and target networks at every update
            reset_noise(network)


class Ensemble(Exploration):
    """``bootstrap`` (a head per episode) or ``ucb`` (mean + lambda std over heads)."""

    acts_with_critic = True

    def __init__(self, section: ExplorationSection):
        super().__init__(section)
        self.head = 0  # the head acting in this episode (bootstrap)
        self.mask_salt = int(torch.randint(2**31 - 1, ()))  # which heads a transition trains: fixed per agent

    def critic(self, obs_dim, action_dim, hidden, critics, norm):
        return Critic(obs_dim, action_dim, hidden, self.section.ensemble_size, norm, self.section.prior_scale)

    def begin_episode(self) -> None:
        if self.section.kind == "bootstrap":
            self.head = int(torch.randint(self.section.ensemble_size, ()))

    def act(self, policy, critic, state):
        candidates, _ = policy(state).rsample_with_log_prob(self.section.candidate_actions)  # [M, 1, A]
        q = critic(state, candidates)[:, 0]  # [M, heads]
        best = q[:, self.head].argmax() if self.section.kind == "bootstrap" else \
            ucb_action(q.T, self.section.ucb_lambda)
        return candidates[best, 0], CUT_TRACES

    def target_heads(self, q, reduce):
        return q   # every head its own targets

    def policy_value(self, q, reduce):
        return q.mean(-1)

    def critic_weights(self, batch):
        """Whether each stored transition trains each head, fixed by its replay write id."""
        return fixed_bootstrap_mask(batch["write_id"], self.section.ensemble_size, self.section.mask_prob,
                                    self.mask_salt).to(batch["mask"].device)

    def state_dict(self) -> dict:
        return {"mask_salt": torch.tensor(self.mask_salt)}

    def load_state_dict(self, state: dict) -> None:
        self.mask_salt = int(state["mask_salt"])


def build(section: ExplorationSection) -> Exploration:
    return {"none": Exploration, "noisy": NoisyNet}.get(section.kind, Ensemble)(section)
