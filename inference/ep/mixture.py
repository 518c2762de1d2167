"""EP, SEP and ADF for a latent-variable model: clustering with a mixture of Gaussians (seed 001 §3.2.4 and §3.4.2).

Extraction ``../shared/research/seed001.md`` §4 and §5.3(e). Model: K component means mu_h ~ N(m0, V0) a priori,
assignments z_n uniform over the K components, x_n | z_n = h ~ N(mu_h, sigma^2 I); the mixture weights and sigma are
known. Inference is over the means, with each assignment summed out inside its data point's factor:

    p(mu | X) ∝ prod_h N(mu_h; m0, V0) prod_n f_n(mu),   f_n(mu) = sum_h (1 / K) N(x_n; mu_h, sigma^2 I).

q(mu) = prod_h N(mu_h; m_h, V_h) (full covariance per component). Each data point's site is a product over the
components of Gaussian factors in natural parameters. The tilted distribution q_{-n}(mu) f_n(mu) is a mixture: with
weight w_h ∝ N(x_n; m_h, V_h + sigma^2 I), component h's mean takes the Gaussian update
m_h + V_h (V_h + sigma^2 I)^{-1} (x_n - m_h), and otherwise it keeps the cavity. Its moments are therefore in closed
form, so no z_n is ever stored. This is the seed's "SEP for latent variables" with untied, non-stored g_n.

- EP (Alg 1) stores N sites; SEP (Alg 5) one tied site with q ∝ p0 f^N; ADF takes the cavity as q itself.
- A site update that would leave a cavity or a tilted covariance non-positive-definite is skipped, as in ``glm``.
- The model is symmetric in the components, so q's means start apart (``init_means``, e.g. K data points). Otherwise
  every component would receive identical updates forever.

The seed's claim (Fig 3.8, qualitative): SEP ≈ EP, and ADF collapses to a point over passes.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from inference.ep.expfam import FullGaussian, add

__all__ = ["MixtureResult", "fit", "log_posterior", "METHODS"]

METHODS = ("ep", "sep", "adf")
Pair = tuple[Tensor, Tensor]


@dataclass
class MixtureResult:
    means: Tensor           # [K, d] q's component means
    covs: Tensor            # [K, d, d]
    skipped: int            # site updates skipped (non-Gaussian cavity or tilted distribution)
    site_numbers: int       # numbers stored for sites: EP N K (d + d^2), SEP K (d + d^2), ADF 0


def _tilted(cavity: Pair, x: Tensor, sigma2: float) -> Pair:
    """Natural parameters [K, ...] of the Gaussian matching, per component, the tilted mixture's moments."""
    m, V = FullGaussian.moments_from_natural(cavity)                     # [K, d], [K, d, d]
    d = x.shape[-1]
    S = V + sigma2 * torch.eye(d, dtype=V.dtype)
    diff = x - m
    chol = torch.linalg.cholesky(S)
    solved = torch.cholesky_solve(diff[..., None], chol)[..., 0]          # S^{-1} (x - m)
    log_w = -0.5 * (diff * solved).sum(-1) - torch.log(torch.diagonal(chol, dim1=-2, dim2=-1)).sum(-1)
    w = torch.softmax(log_w, 0)[:, None]                                  # responsibilities [K, 1]
    gain = V @ torch.cholesky_inverse(chol)                              # V S^{-1}
    m_in = m + (gain @ diff[..., None])[..., 0]
    V_in = V - gain @ V
    mean = w * m_in + (1 - w) * m
    second = w[..., None] * (V_in + m_in[..., :, None] * m_in[..., None, :]) \
        + (1 - w[..., None]) * (V + m[..., :, None] * m[..., None, :])
    cov = second - mean[..., :, None] * mean[..., None, :]
    return FullGaussian.natural_from_moments(mean, cov)


def fit(X: Tensor, components: int, sigma: float, init_means: Tensor, method: str = "ep", passes: int = 10,
        prior_mean: Tensor | None = None, prior_var: float = 1.0, init_var: float = 0.1,
        generator: torch.Generator | None = None) -> MixtureResult:
    """q over the K component means by EP, SEP or ADF, visiting the data in a random order on each pass.
    ``init_means`` [K, d] are q's starting means (with variance ``init_var``), which break the symmetry."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    X = torch.as_tensor(X, dtype=torch.float64)
    if X.ndim != 2 or len(X) == 0:
        raise ValueError("X must be [N >= 1, d]")
    n, d = X.shape
    if init_means.shape != (components, d):
        raise ValueError(f"init_means must be [{components}, {d}], got {list(init_means.shape)}")
    if not (sigma > 0 and prior_var > 0 and init_var > 0 and passes >= 1):
        raise ValueError("sigma, prior_var and init_var must be positive and passes >= 1")
    eye = torch.eye(d, dtype=torch.float64).expand(components, d, d)
    m0 = torch.zeros(d, dtype=torch.float64) if prior_mean is None else prior_mean.double()
    prior = FullGaussian.natural_from_moments(m0.expand(components, d), prior_var * eye)
    start = FullGaussian.natural_from_moments(init_means.double(), init_var * eye)
    # the initial site mass (start - prior) is spread over the data's sites, so q starts at ``start``
    tied = add(start, prior, -1.0)
    tied = (tied[0] / n, tied[1] / n)
    sites = [tied] * n if method == "ep" else None
    q = start
    skipped = 0
    sigma2 = sigma * sigma
    for _ in range(passes):
        for i in torch.randperm(n, generator=generator).tolist():
            if method == "ep":
                cavity = add(q, sites[i], -1.0)
            elif method == "sep":
                cavity = add(q, tied, -1.0)
            else:
                cavity = q
            try:
                new_q = _tilted(cavity, X[i], sigma2)
            except ValueError:            # a cavity or tilted covariance outside the family: skip this site
                skipped += 1
                continue
            site = add(new_q, cavity, -1.0)
            if method == "ep":
                q, sites[i] = new_q, site
            elif method == "sep":          # f <- f^{1 - 1/N} f_n^{1/N}
                tied = add(add(tied, tied, -1.0 / n), site, 1.0 / n)
                q = add(prior, tied, float(n))
            else:
                q = new_q
    means, covs = FullGaussian.moments_from_natural(q)
    per_site = components * (d + d * d)
    return MixtureResult(means, covs, skipped, {"ep": n * per_site, "sep": per_site, "adf": 0}[method])


def log_posterior(X: Tensor, sigma: float, prior_var: float = 1.0, prior_mean: Tensor | None = None):
    """log p(mu | X) up to a constant for flattened means [C, K d] (for a NUTS reference)."""
    X = torch.as_tensor(X, dtype=torch.float64)
    d = X.shape[1]
    m0 = torch.zeros(d, dtype=torch.float64) if prior_mean is None else prior_mean.double()

    def log_p(flat):
        mu = flat.reshape(*flat.shape[:-1], -1, d)                              # [C, K, d]
        sq = ((X[None, :, None, :] - mu[:, None]) ** 2).sum(-1)                # [C, N, K]
        lik = torch.logsumexp(-0.5 * sq / sigma ** 2, -1).sum(-1)
        return lik - 0.5 * ((mu - m0) ** 2).sum((-2, -1)) / prior_var
    return log_p

