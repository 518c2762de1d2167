"""Score estimators from samples only, seed 001_dc5bafdce3ec8872.txt Ch. 6 (Li and Turner 2018).

Given samples x^1..x^K ~ q ([..., K, d]) they estimate G = (grad log q(x^1), ..., grad log q(x^K)).
The RBF kernel is k(x, y) = exp(-||x - y||^2 / (2 sigma^2)) as in the thesis's (A.8); sigma^2 defaults to
median(squared pairwise distance) / 2 (the thesis says "median heuristic" without the formula).
With <grad, K>_ij = sum_k d k(x^i, x^k) / d x^k_j = sum_k k_ik (x^i_j - x^k_j) / sigma^2:

* Stein gradient estimator, V-statistic (6.9):  G = -(K + eta I)^{-1} <grad, K>;
  U-statistic (A.7):                            G = -(K - diag(K) + eta I)^{-1} <grad, K>.
* KDE plug-in (6.14):                           G = -diag(K 1)^{-1} <grad, K>.
* Score matching (6.15)-(6.17): log q^(x) = sum_k a_k k(x, x^k) fitted by minimising the empirical Fisher
  objective (1/K) sum_i [ ||grad log q^(x^i)||^2 + 2 lap log q^(x^i) ] + eta ||a||^2.  The thesis gives
  closed forms for the Epanechnikov and Cauchy kernels; with the RBF kernel the same quadratic gives
  a = -(A + eta I)^{-1} b, A_kl = (1/K) sum_i grad k(x^i, x^k) . grad k(x^i, x^l),
  b_k = (1/K) sum_i lap k(x^i, x^k), with grad_x k(x, x^k) = -k (x - x^k)/sigma^2 and
  lap_x k(x, x^k) = k (||x - x^k||^2 / sigma^4 - d / sigma^2)  (derived here, not printed in the thesis).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from .kernels import median_sq_dist, sq_dists


def _setup(samples: Tensor, sigma2: Optional[float]) -> tuple[Tensor, Tensor, Tensor]:
    if samples.ndim < 2:
        raise ValueError(f"samples must be [..., K, d], got {tuple(samples.shape)}")
    x = samples.detach()
    if sigma2 is None:
        s2 = (median_sq_dist(x) / 2).clamp(min=1e-12)
    elif sigma2 > 0:
        s2 = x.new_full(x.shape[:-2], float(sigma2))
    else:
        raise ValueError(f"sigma2 must be positive, got {sigma2}")
    s2 = s2[..., None, None]
    k = torch.exp(-sq_dists(x, x) / (2 * s2))
    return x, k, s2


def _grad_k(x: Tensor, k: Tensor, s2: Tensor) -> Tensor:
    """<grad, K> of (6.9): row i = sum_k k_ik (x^i - x^k) / sigma^2."""
    return (x * k.sum(-1, keepdim=True) - k @ x) / s2


def stein_score(samples: Tensor, eta: float = 1.0, sigma2: Optional[float] = None,
                u_statistic: bool = False) -> Tensor:
    """Stein gradient estimator (6.9) (V-statistic) or (A.7) (U-statistic)."""
    if not eta > 0:
        raise ValueError(f"eta must be positive, got {eta}")
    x, k, s2 = _setup(samples, sigma2)
    grad_k = _grad_k(x, k, s2)                     # the diagonal of K contributes nothing here (x^i - x^i = 0)
    if u_statistic:
        k = k - torch.diag_embed(k.diagonal(dim1=-2, dim2=-1))
    eye = torch.eye(x.shape[-2], dtype=x.dtype, device=x.device)
    return -torch.linalg.solve(k + eta * eye, grad_k)


def kde_score(samples: Tensor, sigma2: Optional[float] = None) -> Tensor:
    """Gradient of the log of a Gaussian KDE at its own samples (6.14)."""
    x, k, s2 = _setup(samples, sigma2)
    return -_grad_k(x, k, s2) / k.sum(-1, keepdim=True)


def score_matching_score(samples: Tensor, eta: float = 1.0, sigma2: Optional[float] = None) -> Tensor:
    """Kernel score matching estimator (6.15)-(6.17) with the RBF kernel (see module docstring)."""
    if not eta > 0:
        raise ValueError(f"eta must be positive, got {eta}")
    x, k, s2 = _setup(samples, sigma2)
    n, d = x.shape[-2:]
    diff = x.unsqueeze(-2) - x.unsqueeze(-3)                         # [..., i, k, d] = x^i - x^k
    grad = -k.unsqueeze(-1) * diff / s2.unsqueeze(-1)                # grad_x k(x^i, x^k)
    lap = k * (sq_dists(x, x) / s2 ** 2 - d / s2)
    a_mat = torch.einsum("...ikd,...ild->...kl", grad, grad) / n
    b = lap.mean(-2)                                                 # (1/K) sum_i
    eye = torch.eye(n, dtype=x.dtype, device=x.device)
    a = -torch.linalg.solve(a_mat + eta * eye, b.unsqueeze(-1)).squeeze(-1)
    return torch.einsum("...k,...ikd->...id", a, grad)
