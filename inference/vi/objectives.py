"""Variational objectives: ELBO, IWAE, the variational Renyi (VR) bound and VR-max.

Seeds:
* 001_dc5bafdce3ec8872.txt (Y. Li, "Approximate Inference: New Visions", 2018):
  ELBO (2.7)-(2.9) and MC-VI (2.13)-(2.15); the VR bound (4.2) and its Monte Carlo form (4.3), defined
  for every alpha including alpha <= 0 (alpha = 0 is IWAE, alpha -> 1 the ELBO, alpha -> -inf VR-max);
  the unified reparameterised gradient (4.4)-(4.6) with self-normalised weights w_k ∝ (p/q)^(1-alpha);
  Algorithm 9 (single-sample backward pass / VR-max).
* 004_22b7c09145613257.txt (variational Bayes report): SGVB estimators L^A (Monte Carlo KL) and
  L^B (analytic KL), Sec. 3.2; minibatch KL re-weighting pi_i, Sec. 3.3.2.

Conventions: log-weights ``log_w = log p(x, z_k) - log q(z_k | x)`` carry the K samples along ``dim``
(default 0). All functions are differentiable and work for any device/dtype.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor
from torch.distributions import Distribution, kl_divergence

__all__ = [
    "elbo",
    "kl_term",
    "iwae_bound",
    "vr_bound",
    "vr_weights",
    "vr_surrogate",
    "minibatch_kl_weights",
]


def _check_log_w(log_w: Tensor, dim: int) -> int:
    if not torch.is_tensor(log_w) or log_w.dim() == 0:
        raise ValueError("log_w must be a tensor with a sample dimension (shape [K, ...]); "
                         "add one with log_w.unsqueeze(0) for a single sample.")
    if torch.isnan(log_w).any():
        raise ValueError("log_w contains NaN; check log p(x, z) and log q(z | x) for invalid values.")
    return log_w.shape[dim]


def _check_alpha(alpha: float) -> float:
    alpha = float(alpha)
    if math.isnan(alpha):
        raise ValueError("alpha must be a number (use float('-inf') for VR-max), got NaN.")
    return alpha


def kl_term(q: Distribution, prior: Distribution, z: Tensor | None = None) -> Tensor:
    """KL[q || prior]: analytic where torch.distributions has it, otherwise a Monte Carlo estimate.

    The Monte Carlo estimate averages ``log q(z) - log prior(z)`` over the leading sample dimension of
    ``z`` (samples from q, shape [K, *batch, *event]); it is required exactly when no analytic KL exists.
    """
    try:
        return kl_divergence(q, prior)
    except NotImplementedError:
        if z is None:
            raise ValueError(f"no analytic KL between {type(q).__name__} and {type(prior).__name__}; "
                             "pass samples z ~ q (shape [K, ...]) for a Monte Carlo estimate.") from None
        return (q.log_prob(z) - prior.log_prob(z)).mean(0)


def elbo(log_lik: Tensor, q: Distribution, prior: Distribution, z: Tensor | None = None,
         kl_weight: float = 1.0) -> Tensor:
    """ELBO (2.8) ``E_q[log p(x|z)] - KL[q || prior]``, SGVB estimator L^B when the KL is analytic.

    ``log_lik`` has shape [K, *batch] (K reparameterised samples, averaged); ``kl_weight`` scales the KL
    (KL annealing / minibatch weighting).  Falls back to L^A (Monte Carlo KL from ``z``) otherwise.
    """
    if log_lik.dim() == 0:
        raise ValueError("log_lik must have a leading sample dimension [K, ...]; use log_lik.unsqueeze(0).")
    return log_lik.mean(0) - kl_weight * kl_term(q, prior, z)


def vr_bound(log_w: Tensor, alpha: float, dim: int = 0) -> Tensor:
    """Monte Carlo VR bound (4.3): ``1/(1-alpha) log (1/K) sum_k w_k^(1-alpha)``.

    alpha = 1 gives the ELBO (mean of log w), alpha = 0 the IWAE bound, alpha = -inf VR-max (max log w),
    alpha = +inf min log w.  Negative alpha gives upper bounds of log p(x) for large K (Thm 4.1).
    """
    K = _check_log_w(log_w, dim)
    alpha = _check_alpha(alpha)
    if alpha == 1.0:
        return log_w.mean(dim)
    if alpha == -math.inf:
        return log_w.amax(dim)
    if alpha == math.inf:
        return log_w.amin(dim)
    return (torch.logsumexp((1.0 - alpha) * log_w, dim) - math.log(K)) / (1.0 - alpha)


def iwae_bound(log_w: Tensor, dim: int = 0) -> Tensor:
    """Importance-weighted bound: the VR bound at alpha = 0."""
    return vr_bound(log_w, 0.0, dim)


def vr_weights(log_w: Tensor, alpha: float, dim: int = 0) -> Tensor:
    """Self-normalised weights of (4.6): ``softmax((1-alpha) log w)`` (uniform at alpha=1, one-hot at -inf)."""
    _check_log_w(log_w, dim)
    alpha = _check_alpha(alpha)
    if alpha == -math.inf or alpha == math.inf:
        pick = log_w.argmax(dim, keepdim=True) if alpha < 0 else log_w.argmin(dim, keepdim=True)
        return torch.zeros_like(log_w).scatter_(dim, pick, 1.0)
    return torch.softmax((1.0 - alpha) * log_w, dim)


def vr_surrogate(log_w: Tensor, alpha: float, estimator: str = "full", dim: int = 0,
                 generator: torch.Generator | None = None) -> Tensor:
    """A scalar-per-datapoint surrogate whose gradient is a VR-alpha gradient estimate.

    * ``"full"``: the bound itself; its gradient is the weighted sum (4.6) over all K samples.
    * ``"sample"``: Algorithm 9 -- draw one index j with probability w_k^(1-alpha) (normalised) and
      return ``log w_j`` (one backward pass); for alpha = -inf it picks argmax, i.e. VR-max.  Its gradient is
      an unbiased estimate of the gradient of ``"full"``; its *value* is not the bound.
    * ``"max"``: VR-max, ``log w_j`` with j = argmax_k log w_k (equals ``"sample"`` at alpha = -inf).
    """
    _check_log_w(log_w, dim)
    alpha = _check_alpha(alpha)
    if estimator == "full":
        return vr_bound(log_w, alpha, dim)
    if estimator == "max" or (estimator == "sample" and alpha == -math.inf):
        return log_w.amax(dim)
    if estimator == "sample":
        probs = vr_weights(log_w.detach(), alpha, dim).movedim(dim, -1)
        flat = probs.reshape(-1, probs.shape[-1])
        j = torch.multinomial(flat, 1, generator=generator).reshape(probs.shape[:-1] + (1,))
        return log_w.movedim(dim, -1).gather(-1, j).squeeze(-1)
    raise ValueError(f"unknown estimator {estimator!r}; use 'full', 'sample' or 'max'.")


def minibatch_kl_weights(num_batches: int, scheme: str = "uniform",
                         dtype: torch.dtype = torch.float64) -> Tensor:
    """Weights pi_i (i = 1..M) of the KL term per minibatch; they sum to one over an epoch (Sec. 3.3.2).

    ``"uniform"``: Graves' pi_i = 1/M.  ``"blundell"``: pi_i = 2^(M-i) / (2^M - 1), front-loading the KL;
    computed in log space so large M does not overflow.
    """
    if int(num_batches) != num_batches or num_batches < 1:
        raise ValueError(f"num_batches must be a positive integer, got {num_batches!r}.")
    M = int(num_batches)
    if scheme == "uniform":
        return torch.full((M,), 1.0 / M, dtype=dtype)
    if scheme == "blundell":
        i = torch.arange(1, M + 1, dtype=dtype)
        # log(2^M - 1) = M log 2 + log(1 - 2^-M)
        log_norm = M * math.log(2.0) + math.log1p(-(2.0 ** -M))
        return torch.exp((M - i) * math.log(2.0) - log_norm)
    raise ValueError(f"unknown scheme {scheme!r}; use 'uniform' or 'blundell'.")
