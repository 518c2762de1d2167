"""Networks shared by the agents: MLPs, the squashed-Gaussian policy head and the state-action critic."""
from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from agents.distributions import SquashedGaussian
from inference.layers.batched import BatchedMLP
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


class Critic(nn.Module):
    """``heads`` critics Q_h(s, a) -> [..., heads], evaluated as one batched module (inference/layers/batched.py).

    ``norm``: none | layernorm | residual (the body of each head). ``prior_scale = beta > 0`` gives every head a
    frozen randomised prior function, Q_h = f_h + beta p_h (Osband et al. 2018; bootstrapped exploration)."""

    def __init__(self, obs_dim: int, action_dim: int, hidden: Sequence[int], heads: int = 1, norm: str = "none",
                 prior_scale: float = 0.0):
        super().__init__()
        self.body = BatchedMLP(heads, obs_dim + action_dim, hidden, 1, norm)
        self.prior_scale = prior_scale
        if prior_scale > 0:
            self.prior = BatchedMLP(heads, obs_dim + action_dim, hidden, 1, norm)
            self.prior.requires_grad_(False)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        x = _state_action(obs, action)
        q = self.body(x)
        if self.prior_scale > 0:
            with torch.no_grad():
                prior = self.prior(x)
            q = q + self.prior_scale * prior
        return q.squeeze(-1).movedim(0, -1)


def _state_action(obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    """[obs, action] with the leading dims of ``obs`` broadcast against ``action`` (e.g. several sampled actions)."""
    return torch.cat([obs.expand(*action.shape[:-1], obs.shape[-1]), action], dim=-1)


def gradient_step(optimiser: torch.optim.Optimizer, loss: torch.Tensor, parameters, max_norm: float | None) -> None:
    """One optimiser step on ``loss``, the gradient norm of ``parameters`` clipped to ``max_norm`` (None: not)."""
    optimiser.zero_grad(set_to_none=True)
    loss.backward()
    if max_norm is not None:
        torch.nn.utils.clip_grad_norm_(parameters, max_norm)
    optimiser.step()


def hard_update(target: nn.Module, online: nn.Module) -> None:
    """theta_T <- theta_O (Alg 9, step 5: every P learner steps)."""
    with torch.no_grad():
        for t, o in zip(target.parameters(), online.parameters()):
            t.copy_(o)


def polyak_update(target: nn.Module, online: nn.Module, tau: float) -> None:
    """theta_T <- (1 - tau) theta_T + tau theta_O, at every update (the alternative to hard copies)."""
    with torch.no_grad():
        torch._foreach_lerp_(list(target.parameters()), list(online.parameters()), tau)


def frozen_copy(module: nn.Module) -> nn.Module:
    import copy

    target = copy.deepcopy(module)
    target.requires_grad_(False)
    return target
