"""Gradient estimators for expectations ``E_q[f(z)]``: reparameterised (pathwise) and score-function.

Seeds: 004_22b7c09145613257.txt Sec. 3.2-3.3 (reparameterisation trick, Proposition 1 of Bayes by
Backprop) and 001_dc5bafdce3ec8872.txt (2.38) (pathwise MC gradients) and App. B.3 (leave-one-out
baselines as in VIMCO).  The score-function form ``E_q[(f(z) - b) grad log q(z)]`` is the standard
REINFORCE estimator; the seeds only cite it, so the standard form is used.

``vr_score_function_surrogate`` is the VR-bound version for non-reparameterisable (e.g. discrete) latents,
seed 001 App. B.3 (B.24): each sample j gets the leave-one-out learning signal
``Delta_-j = L_alpha,K(all) - 1/(1-alpha) log (1/(K-1)) sum_{k != j} w_k^(1-alpha)``.

Both estimators return a *surrogate*: a tensor whose value is the Monte Carlo mean of f and whose
gradient is the estimator's gradient.  Samples z carry the leading K dimension.
"""
from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["reparam_surrogate", "score_function_surrogate", "vr_score_function_surrogate", "RunningBaseline"]


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


def vr_score_function_surrogate(log_w: Tensor, log_q: Tensor, alpha: float) -> Tensor:
    """Score-function surrogate for the MC VR bound (4.3) with the leave-one-out signal of (B.24).

    ``log_w``: [K, ...] ``log p(x, z_k) - log q(z_k)`` at samples z_k ~ q drawn without reparameterisation
    (differentiable in the parameters of p and q for fixed z); ``log_q``: [K, ...] ``q.log_prob(z_k)``.
    Value: the bound.  Gradient: ``grad L(fixed z) + sum_j Delta_-j grad log q(z_j)``, unbiased because
    the baseline of sample j does not depend on z_j.  Needs K >= 2 (alpha = 1 gives the mean of log w,
    alpha = -inf the max, as in ``vr_bound``).
    """
    from inference.vi.objectives import vr_bound

    if log_w.shape != log_q.shape or log_w.dim() == 0 or log_w.shape[0] < 2:
        raise ValueError(f"log_w and log_q must both have shape [K, ...] with K >= 2; got "
                         f"{tuple(log_w.shape)} and {tuple(log_q.shape)}.")
    bound = vr_bound(log_w, alpha)
    lw = log_w.detach()
    K = lw.shape[0]
    # leave-one-out bounds: the k-th slice of `others` drops sample k
    idx = torch.arange(K, device=lw.device)
    keep = idx[None, :] != idx[:, None]                                      # [K, K]
    others = lw.unsqueeze(0).expand((K,) + lw.shape)[keep].reshape((K, K - 1) + lw.shape[1:])
    loo = vr_bound(others, alpha, dim=1)                                     # [K, ...]
    signal = bound.detach().unsqueeze(0) - loo
    score_term = (signal * log_q).sum(0)
    return bound + score_term - score_term.detach()


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
