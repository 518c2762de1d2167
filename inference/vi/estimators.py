"""Gradient estimators for expectations ``E_q[f(z)]``: reparameterised (pathwise) and score-function.

Seeds: 004_22b7c09145613257.txt Sec. 3.2-3.3 (reparameterisation trick, Proposition 1 of Bayes by
Backprop) and 001_dc5bafdce3ec8872.txt (2.38) (pathwise MC gradients) and App. B.3 (leave-one-out
baselines as in VIMCO).  The score-function form ``E_q[(f(z) - b) grad log q(z)]`` is the standard
REINFORCE estimator; the seeds only cite it, so the standard form is used.

Both estimators return a *surrogate*: a tensor whose value is the Monte Carlo mean of f and whose
gradient is the estimator's gradient.  Samples z carry the leading K dimension.
"""
from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["reparam_surrogate", "score_function_surrogate", "RunningBaseline"]


def reparam_surrogate(f: Tensor) -> Tensor:
    """Pathwise estimator: ``f`` evaluated at reparameterised samples (``q.rsample``), averaged over K."""
    if f.dim() == 0:
        raise ValueError("f must have a leading sample dimension [K, ...].")
    return f.mean(0)


def score_function_surrogate(f: Tensor, log_q: Tensor, baseline: str | float | Tensor | None = "loo") -> Tensor:
    """Score-function (REINFORCE) surrogate for ``grad E_q[f(z)]``.

    ``f``: [K, ...] integrand values at samples z ~ q drawn *without* reparameterisation (z detached);
    gradients of f with respect to the parameters directly (e.g. through -log q in an ELBO) are kept.
    ``log_q``: [K, ...] ``q.log_prob(z)``, differentiable in q's parameters.
    ``baseline``: ``"loo"`` leave-one-out mean of the other K-1 samples (unbiased, needs K >= 2),
    a float/tensor broadcastable to f (e.g. a ``RunningBaseline`` value), or ``None``.
    """
    if f.shape != log_q.shape or f.dim() == 0:
        raise ValueError(f"f and log_q must both have shape [K, ...]; got {tuple(f.shape)} and {tuple(log_q.shape)}.")
    signal = f.detach()
    K = f.shape[0]
    if isinstance(baseline, str):
        if baseline != "loo":
            raise ValueError(f"unknown baseline {baseline!r}; use 'loo', a number, or None.")
        if K < 2:
            raise ValueError("the leave-one-out baseline needs K >= 2 samples.")
        b = (signal.sum(0, keepdim=True) - signal) / (K - 1)
    elif baseline is None:
        b = 0.0
    else:
        b = torch.as_tensor(baseline, dtype=f.dtype, device=f.device).detach()
    score_term = ((signal - b) * log_q).mean(0)
    # value = mean f; gradient = score term + any direct dependence of f on the parameters
    return f.mean(0) + score_term - score_term.detach()


class RunningBaseline:
    """Exponential moving average of the mean of f, a simple control variate across iterations."""

    def __init__(self, decay: float = 0.9):
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"decay must lie in [0, 1), got {decay}.")
        self.decay = decay
        self.value: Tensor | None = None

    def update(self, f: Tensor) -> Tensor:
        """Return the current baseline (before seeing ``f``), then fold ``f.mean()`` into it."""
        current = torch.zeros((), dtype=f.dtype, device=f.device) if self.value is None else self.value
        m = f.detach().mean()
        self.value = m if self.value is None else self.decay * self.value + (1 - self.decay) * m
        return current
