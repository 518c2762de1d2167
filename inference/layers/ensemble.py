"""Ensembles with bootstrap masks and randomised prior functions, and the UCB action rule.

Seed: 004_22b7c09145613257.txt Sec. 4.2 (bootstrapped DQN: K heads, a head drawn uniformly per episode,
each trained on a bootstrap subset) and Sec. 4.3 (UCB over a Q-ensemble:
``a_t = argmax_a mu(s, a) + lambda sigma(s, a)`` with the ensemble's empirical mean and standard deviation).
Not in the seed (EXTERNAL, standard forms): bootstrap masks ``m_k ~ Bernoulli(p)`` stored per transition
(Osband et al. 2016); randomised prior functions ``Q_k = f_k + beta p_k`` with p_k a frozen, independently
initialised copy (Osband et al. 2018).  The empirical standard deviation uses the 1/K (population) form.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor, nn

__all__ = ["Ensemble", "bootstrap_mask", "fixed_bootstrap_mask", "masked_ensemble_loss", "ucb_action"]


class Ensemble(nn.Module):
    """K independently initialised members built by ``factory()``; ``forward`` stacks outputs to [K, ...].

    With ``prior_scale = beta > 0`` each member gets a frozen prior network (another ``factory()`` call,
    no gradients, never updated) and outputs ``f_k(x) + beta p_k(x)``.
    """

    def __init__(self, factory: Callable[[], nn.Module], size: int, prior_scale: float = 0.0):
        super().__init__()
        if size < 1:
            raise ValueError(f"ensemble size must be >= 1, got {size}.")
        if prior_scale < 0:
            raise ValueError(f"prior_scale must be >= 0, got {prior_scale}.")
        self.members = nn.ModuleList(factory() for _ in range(size))
        self.prior_scale = prior_scale
        self.priors = nn.ModuleList(factory() for _ in range(size)) if prior_scale > 0 else None
        if self.priors is not None:
            self.priors.requires_grad_(False)

    def __len__(self) -> int:
        return len(self.members)

    def train(self, mode: bool = True):
        super().train(mode)
        if self.priors is not None:
            self.priors.eval()      # priors are fixed functions (no dropout/noise changes)
        return self

    def forward(self, x: Tensor) -> Tensor:
        outs = [m(x) for m in self.members]
        if self.priors is not None:
            with torch.no_grad():
                prior_outs = [p(x) for p in self.priors]
            outs = [o + self.prior_scale * p for o, p in zip(outs, prior_outs)]
        return torch.stack(outs)

    def sample_member(self, generator: torch.Generator | None = None) -> int:
        """A member index drawn uniformly (bootstrapped DQN: once per episode)."""
        return int(torch.randint(len(self.members), (), generator=generator))


def bootstrap_mask(n: int, size: int, p: float = 0.5, generator: torch.Generator | None = None,
                   device: torch.device | str | None = None) -> Tensor:
    """[n, size] float mask with entries ~ Bernoulli(p): transition i trains member k iff mask[i, k] = 1."""
    if not 0.0 < p <= 1.0:
        raise ValueError(f"bootstrap probability must lie in (0, 1], got {p}.")
    if device is None:
        device = generator.device if generator is not None else "cpu"
    return (torch.rand(n, size, generator=generator, device=device) < p).float()


_MIX1, _MIX2, _GOLDEN = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB, 0x9E3779B97F4A7C15
_U64 = (1 << 64) - 1


def fixed_bootstrap_mask(ids: Tensor, size: int, p: float = 0.5, salt: int = 0) -> Tensor:
    """[*ids.shape, size] Bernoulli(p) masks that are a fixed function of each item's integer id (a splitmix64 hash
    of (salt, id, member)): a stored transition trains the same members every time it is sampled, as Osband et
    al. 2016's per-transition masks, without storing them."""
    if not 0.0 < p <= 1.0:
        raise ValueError(f"bootstrap probability must lie in (0, 1], got {p}.")
    x = ids.to(torch.int64).unsqueeze(-1) * size + torch.arange(size, device=ids.device)
    x = x + _signed((salt * _GOLDEN + _GOLDEN) & _U64)
    # splitmix64 finaliser on int64 (wrap-around arithmetic; logical right shifts emulated by masking)
    for shift, mult in ((30, _MIX1), (27, _MIX2)):
        x = (x ^ _logical_shift(x, shift)) * _signed(mult)
    x = x ^ _logical_shift(x, 31)
    uniform = _logical_shift(x, 11).to(torch.float64) / 2.0 ** 53
    return (uniform < p).float()


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _logical_shift(x: Tensor, shift: int) -> Tensor:
    return (x >> shift) & ((1 << (64 - shift)) - 1)


def masked_ensemble_loss(per_member_loss: Tensor, mask: Tensor) -> Tensor:
    """Average of ``per_member_loss`` [K, n] over the (transition, member) pairs the mask [n, K] selects."""
    if per_member_loss.dim() != 2 or mask.shape != per_member_loss.shape[::-1]:
        raise ValueError(f"need per_member_loss [K, n] and mask [n, K]; got {tuple(per_member_loss.shape)} "
                         f"and {tuple(mask.shape)}.")
    m = mask.t().to(per_member_loss.dtype)
    return (per_member_loss * m).sum() / m.sum().clamp_min(1.0)


def ucb_action(q_values: Tensor, lam: float) -> Tensor:
    """``argmax_a mean_k Q_k(s, a) + lam * std_k Q_k(s, a)`` for q_values [K, ..., A] -> indices [...]."""
    if q_values.dim() < 2:
        raise ValueError(f"q_values must have shape [K, ..., A], got {tuple(q_values.shape)}.")
    mean = q_values.mean(0)
    std = q_values.std(0, correction=0)
    return (mean + lam * std).argmax(-1)
