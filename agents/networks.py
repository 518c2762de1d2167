"""Networks shared by the agents: MLPs, the squashed-Gaussian policy head and the state-action critic."""
from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from agents.distributions import SquashedGaussian
from inference.layers.ensemble import Ensemble
from inference.layers.mlp import bounded_log_std, mlp


class GaussianPolicy(nn.Module):
    """pi(a|s) = tanh(N(mean(s), std(s))).

    The log std is the network output softly clamped to [min, max] (identity in between, smooth at the edges), so
    the std starts near 1 -- broad exploration -- and can neither collapse to 0 nor explode. The seeds leave the
    parameterisation open.
    """

    def __init__(self, obs_dim: int, action_dim: int, hidden: Sequence[int],
                 log_std_bounds: tuple[float, float] = (-5.0, 2.0), linear: Callable = nn.Linear):
        super().__init__()
        self.net = mlp(obs_dim, hidden, 2 * action_dim, linear=linear)
        self.log_std_min, self.log_std_max = log_std_bounds

    def forward(self, obs: torch.Tensor) -> SquashedGaussian:
        mean, raw = self.net(obs).chunk(2, dim=-1)
        return SquashedGaussian(mean, bounded_log_std(raw, self.log_std_min, self.log_std_max).exp())


class QNetwork(nn.Module):
    """``heads`` independent critics Q_i(s, a) -> [..., heads]; broadcasts leading dims of ``obs`` against ``action``."""

    def __init__(self, obs_dim: int, action_dim: int, hidden: Sequence[int], heads: int = 1,
                 linear: Callable = nn.Linear):
        super().__init__()
        self.heads = nn.ModuleList(mlp(obs_dim + action_dim, hidden, 1, linear=linear) for _ in range(heads))

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        x = _state_action(obs, action)
        return torch.cat([head(x) for head in self.heads], dim=-1)


class EnsembleQNetwork(nn.Module):
    """A bootstrapped critic ensemble with randomised prior functions, Q_k = f_k + beta p_k (p_k frozen), built on
    inference/layers/ensemble.py; same interface as QNetwork: (obs, action) -> [..., K]."""

    def __init__(self, obs_dim: int, action_dim: int, hidden: Sequence[int], size: int, prior_scale: float):
        super().__init__()
        self.ensemble = Ensemble(lambda: mlp(obs_dim + action_dim, hidden, 1), size, prior_scale)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.ensemble(_state_action(obs, action)).squeeze(-1).movedim(0, -1)


def _state_action(obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    """[obs, action] with the leading dims of ``obs`` broadcast against ``action`` (e.g. several sampled actions)."""
    return torch.cat([obs.expand(*action.shape[:-1], obs.shape[-1]), action], dim=-1)


def hard_update(target: nn.Module, online: nn.Module) -> None:
    """theta_T <- theta_O (Alg 9, step 5: every P learner steps)."""
    with torch.no_grad():
        for t, o in zip(target.parameters(), online.parameters()):
            t.copy_(o)


def frozen_copy(module: nn.Module) -> nn.Module:
    import copy

    target = copy.deepcopy(module)
    target.requires_grad_(False)
    return target
