"""Kernel discrepancies: kernelised Stein discrepancy (KSD) and maximum mean discrepancy (MMD).

* KSD, seed 002_c38d9063238be78e.txt Sec. 3.1 (3.9)-(3.12); the seed gives no estimator, so we use the standard
  one of Liu, Lee and Jordan (2016), also seed 001_dc5bafdce3ec8872.txt (6.11)-(6.12), (A.4)-(A.6):
  KSD^2 = E_{x,x'~q}[u_p(x, x')], u_p = s^T k s' + s^T grad_{x'} k + grad_x k^T s' + tr(grad_x grad_{x'} k),
  s = grad log p.  For k = exp(-||r||^2 / h), r = x - x':
  u_p = k [ s.s' + (2/h)(s.r - r.s') + 2d/h - 4||r||^2/h^2 ].
  ``ksd(..., u_statistic=True)`` averages over i != j (unbiased); False averages over all pairs (V-statistic).
* MMD^2, seed 002 (3.20) (printed as a biased V-statistic; the middle term of (3.19) has an index typo) with
  k(x, y) = exp(-||x - y||^2 / (2 sigma^2)).  The seed's "bandwidth 0.5" does not say whether it is sigma or
  sigma^2; we read it as sigma = 0.5.  ``unbiased=True`` (default) drops the diagonals of Kxx and Kyy.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from .kernels import RBF, sq_dists


def ksd(samples: Tensor, score: Tensor, kernel: Optional[RBF] = None, u_statistic: bool = True) -> Tensor:
    """Squared KSD of samples [..., N, d] to the density whose score (at the samples) is ``score``."""
    if samples.ndim < 2 or score.shape != samples.shape:
        raise ValueError(f"ksd: samples and score must both be [..., N, d]; got {tuple(samples.shape)} and "
                         f"{tuple(score.shape)}")
    n, d = samples.shape[-2:]
    if u_statistic and n < 2:
        raise ValueError("ksd: the U-statistic needs at least 2 samples")
    kernel = RBF() if kernel is None else kernel
    x, s = samples.detach(), score.detach()
    h = kernel.h(x)[..., None, None]
    k = kernel(x, x, kernel.h(x))
    r2 = sq_dists(x, x)
    sx = (s * x).sum(-1)
    s_dot_r = sx.unsqueeze(-1) - s @ x.transpose(-1, -2)            # s_i . (x_i - x_j)
    r_dot_s = x @ s.transpose(-1, -2) - sx.unsqueeze(-2)            # (x_i - x_j) . s_j
    u = k * (s @ s.transpose(-1, -2) + (2 / h) * (s_dot_r - r_dot_s) + 2 * d / h - 4 * r2 / h ** 2)
    if u_statistic:
        return (u.sum((-1, -2)) - u.diagonal(dim1=-2, dim2=-1).sum(-1)) / (n * (n - 1))
    return u.mean((-1, -2))


def mmd2(x: Tensor, y: Tensor, sigma: float = 0.5, unbiased: bool = True) -> Tensor:
    """Squared MMD between samples x [..., N, d] and y [..., M, d] with an RBF kernel of width sigma."""
    if x.ndim < 2 or y.ndim < 2 or x.shape[-1] != y.shape[-1]:
        raise ValueError(f"mmd2: x and y must be [..., N, d] and [..., M, d]; got {tuple(x.shape)}, {tuple(y.shape)}")
    if not sigma > 0:
        raise ValueError(f"mmd2: sigma must be positive, got {sigma}")
    n, m = x.shape[-2], y.shape[-2]
    if unbiased and min(n, m) < 2:
        raise ValueError("mmd2: the unbiased estimate needs at least 2 samples on each side")
    kxx = torch.exp(-sq_dists(x, x) / (2 * sigma ** 2))
    kyy = torch.exp(-sq_dists(y, y) / (2 * sigma ** 2))
    kxy = torch.exp(-sq_dists(x, y) / (2 * sigma ** 2))
    if unbiased:
        txx = (kxx.sum((-1, -2)) - kxx.diagonal(dim1=-2, dim2=-1).sum(-1)) / (n * (n - 1))
        tyy = (kyy.sum((-1, -2)) - kyy.diagonal(dim1=-2, dim2=-1).sum(-1)) / (m * (m - 1))
    else:
        txx, tyy = kxx.mean((-1, -2)), kyy.mean((-1, -2))
    return txx + tyy - 2 * kxy.mean((-1, -2))
