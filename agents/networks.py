"""Networks shared by the agents: MLPs, the squashed-Gaussian policy head and the state-action critic."""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from agents.distributions import SquashedGaussian
from inference.layers.mlp import bounded_log_std, mlp


class GaussianPolicy(nn.Module):
    """pi(a|s) = tanh(N(mean(s), std(s))).

    The log std is the network output softly clamped to [min, max] (identity in between, smooth at the edges), so
    the std starts near 1 -- broad exploration -- and can neither collapse to 0 nor explode. The seeds leave the
    parameterisation open.
    """

    def __init__(self, obs_dim: int, action_dim: int, hidden: Sequence[int],
                 log_std_bounds: tuple[float, float] = (-5.0, 2.0)):
        super().__init__()
        self.net = mlp(obs_dim, hidden, 2 * action_dim)
        self.log_std_min, self.log_std_max = log_std_bounds

    def forward(self, obs: torch.Tensor) -> SquashedGaussian:
        mean, raw = self.net(obs).chunk(2, dim=-1)
        return SquashedGaussian(mean, bounded_log_std(raw, self.log_std_min, self.log_std_max).exp())


class QNetwork(nn.Module):
    """``heads`` independent critics Q_i(s, a) -> [..., heads]; broadcasts leading dims of ``obs`` against ``action``."""

    def __init__(self, obs_dim: int, action_dim: int, hidden: Sequence[int], heads: int = 1):
        super().__init__()
        self.heads = nn.ModuleList(mlp(obs_dim + action_dim, hidden, 1) for _ in range(heads))

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        obs = obs.expand(*action.shape[:-1], obs.shape[-1])
        x = torch.cat([obs, action], dim=-1)
        return torch.cat([head(x) for head in self.heads], dim=-1)


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
