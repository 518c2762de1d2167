"""EP, power EP, ADF, SEP, parallel SEP / AEP and DSEP for generalised linear models with a full-Gaussian q.

Seed 001 (Y. Li, "Approximate Inference: New Visions", 2018), extraction ``../shared/research/seed001.md`` §4-5:

- posterior p(theta | D) ∝ p0(theta) prod_n p(y_n | x_n^T theta), q ∝ p0 prod_n f_n (3.1), p0 = N(0, prior_var I);
- EP (Alg 1 / Alg 3): cavity q_{-n} ∝ q / f_n (2.17), tilted p_n ∝ q_{-n} p(y_n | .) (2.18), moment matching
  (2.20), f_n <- proj[p_n] / q_{-n} (2.22), damping f_n <- f_n^{1-eps} (proj[p_n] / q_{-n})^eps (2.23);
- power EP (Alg 2), fraction alpha: q_{-n} = q / f_n^alpha, f_n^alpha <- proj[q_{-n} p(y_n | .)^alpha] / q_{-n}
  (alpha = 1 is EP);
- ADF (Alg 4): the cavity is q itself (no factor removed), so data counted again on every pass: q's variance
  shrinks to 0 over passes;
- SEP (Alg 5): one tied factor f, q ∝ p0 f^N; cavity q_{-1} ∝ q / f; f_n <- proj[p_n] / q_{-1};
  f <- f^{1 - 1/N} f_n^{1/N}: memory O(D^2) instead of EP's N factors;
- parallel SEP (§3.2.1) with minibatch M: f_new = f_old^{1 - M/N} prod_m f_m^{1/N} from a common cavity; M = N is
  averaged EP (AEP);
- DSEP (Alg 8): J partitions, one tied factor per partition, q ∝ p0 prod_j f_j^{N_j}; cavity q / f_j;
  f_j <- f_j^{1 - 1/N_j} (f_j^{(n)})^{1/N_j}.

A GLM likelihood depends on theta only through a = x_n^T theta, so every factor (site) is a rank-one Gaussian in
that direction, f_n(theta) = exp(nu_n a - tau_n a^2 / 2): EP stores its N sites as 2N numbers (plus q's D + D^2),
SEP and DSEP store one or J full-Gaussian factors in natural parameters (``expfam.FullGaussian`` conventions:
theta_1 = precision @ mean, theta_2 = -precision). The tilted moments are one-dimensional: closed form for the
probit likelihood Phi(y a) (the standard EP probit formulas, not in the thesis) and Gauss-Hermite quadrature (64
nodes) for the logistic likelihood and for powers alpha != 1. A site whose update would give a non-positive
cavity or tilted variance is skipped; ``min_site_precision`` floors tau (the seed's "minimum site variance").
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

__all__ = ["Gaussian", "tilted_moments", "ep", "adf", "sep", "dsep", "predictive_log_likelihood",
           "LIKELIHOODS"]

LIKELIHOODS = ("probit", "logistic")
_NODES, _WEIGHTS = (torch.as_tensor(v, dtype=torch.float64) for v in np.polynomial.hermite_e.hermegauss(64))
_WEIGHTS = _WEIGHTS / math.sqrt(2 * math.pi)        # E_{N(0,1)}[g] = sum_k w_k g(node_k)


@dataclass
class Gaussian:
    """q in natural parameters: ``h`` = precision @ mean [D], ``precision`` [D, D]."""
    h: Tensor
    precision: Tensor

    def moments(self) -> tuple[Tensor, Tensor]:
        """(mean, covariance) from one Cholesky factorisation of the precision."""
        chol = torch.linalg.cholesky(self.precision)
        return torch.cholesky_solve(self.h[:, None], chol)[:, 0], torch.cholesky_inverse(chol)

    @property
    def cov(self) -> Tensor:
        return self.moments()[1]

    @property
    def mean(self) -> Tensor:
        return self.moments()[0]

    def numbers(self) -> int:
        return self.h.numel() + self.precision.numel()


def _log_lik(likelihood: str, y: Tensor, a: Tensor) -> Tensor:
    if likelihood == "probit":
        return torch.special.log_ndtr(y * a)
    return -torch.nn.functional.softplus(-y * a)


def tilted_moments(likelihood: str, y: Tensor, m: Tensor, v: Tensor, power: float = 1.0) -> tuple[Tensor, Tensor]:
    """Mean and variance of p(a) ∝ N(a; m, v) p(y | a)^power, y in {-1, +1} (vectors of sites)."""
    if likelihood == "probit" and power == 1.0:
        s = torch.sqrt(1.0 + v)
        z = y * m / s
        ratio = torch.exp(-0.5 * z * z - torch.special.log_ndtr(z)) / math.sqrt(2 * math.pi)
        mean = m + y * v * ratio / s
        var = v - v * v * ratio * (z + ratio) / (1.0 + v)
        return mean, var
    a = m[:, None] + torch.sqrt(v)[:, None] * _NODES[None, :]
    logw = power * _log_lik(likelihood, y[:, None], a) + torch.log(_WEIGHTS)[None, :]
    w = torch.softmax(logw, dim=1)
    mean = (w * a).sum(1)
    var = (w * (a - mean[:, None]) ** 2).sum(1)
    return mean, var


def _check(X: Tensor, y: Tensor, likelihood: str, prior_var: float) -> tuple[Tensor, Tensor]:
    X, y = torch.as_tensor(X, dtype=torch.float64), torch.as_tensor(y, dtype=torch.float64)
    if X.ndim != 2 or y.shape != X.shape[:1] or X.shape[0] == 0:
        raise ValueError(f"need features [N, D] with N >= 1 and labels [N]; got {tuple(X.shape)} and "
                         f"{tuple(y.shape)}")
    if not bool(((y == 1) | (y == -1) | (y == 0)).all()):
        raise ValueError("labels must be 0/1 or -1/+1")
    if likelihood not in LIKELIHOODS:
        raise ValueError(f"likelihood must be one of {LIKELIHOODS}, got {likelihood!r}")
    if not prior_var > 0 or not math.isfinite(prior_var):
        raise ValueError(f"prior_var must be positive and finite, got {prior_var}")
    if not bool(torch.isfinite(X).all()):
        raise ValueError("features contain NaN or inf")
    return X, torch.where(y == 0, -torch.ones_like(y), y)


def _prior(dim: int, prior_var: float) -> Gaussian:
    return Gaussian(torch.zeros(dim, dtype=torch.float64), torch.eye(dim, dtype=torch.float64) / prior_var)


def _site_update(likelihood, x, y, cavity: Gaussian, power: float, min_site_precision: float):
    """proj[cavity * lik^power] / cavity as a rank-one site (tau, nu) in the direction x, for a batch of sites
    sharing one cavity (rows of x). Returns (tau, nu, ok)."""
    mean_cav, cov = cavity.moments()
    m = x @ mean_cav
    v = ((x @ cov) * x).sum(-1)
    mean, var = tilted_moments(likelihood, y, m, v, power)
    ok = (v > 0) & (var > 0) & (var < v) & torch.isfinite(mean) & torch.isfinite(var)
    tau = torch.where(ok, 1.0 / var - 1.0 / v, torch.zeros_like(v))
    nu = torch.where(ok, mean / var - m / v, torch.zeros_like(v))
    return torch.clamp(tau / power, min=min_site_precision), nu / power, ok


@dataclass
class EPResult:
    q: Gaussian
    passes: int
    history: list = field(default_factory=list)      # q (mean, cov) after every pass
    state_numbers: int = 0                           # numbers the algorithm keeps between site updates
    sites: tuple | None = None                       # EP: the rank-one sites (tau [N], nu [N])


def _record(history, q: Gaussian) -> None:
    history.append(q.moments())


def ep(X, y, likelihood: str = "probit", prior_var: float = 1.0, passes: int = 10, damping: float = 0.0,
       power: float = 1.0, min_site_precision: float = 0.0, generator: torch.Generator | None = None) -> EPResult:
    """EP / power EP with N rank-one sites, sequential updates in a random order each pass."""
    X, y = _check(X, y, likelihood, prior_var)
    if not 0.0 <= damping < 1.0 or not power > 0:
        raise ValueError("damping must be in [0, 1) and power > 0")
    N, D = X.shape
    q = _prior(D, prior_var)
    tau, nu = torch.zeros(N, dtype=torch.float64), torch.zeros(N, dtype=torch.float64)
    history: list = []
    for _ in range(passes):
        for n in torch.randperm(N, generator=generator).tolist():
            x = X[n]
            outer = x[:, None] * x[None, :]
            cavity = Gaussian(q.h - power * nu[n] * x, q.precision - power * tau[n] * outer)
            try:
                new_tau, new_nu, ok = _site_update(likelihood, x[None], y[n:n + 1], cavity, power, min_site_precision)
            except torch.linalg.LinAlgError:        # cavity not positive definite: skip this site (seed: "discard")
                continue
            if not bool(ok):
                continue
            t = (1 - damping) * new_tau[0] + damping * tau[n]
            u = (1 - damping) * new_nu[0] + damping * nu[n]
            q = Gaussian(q.h + (u - nu[n]) * x, q.precision + (t - tau[n]) * outer)
            tau[n], nu[n] = t, u
        _record(history, q)
    return EPResult(q, passes, history, tau.numel() + nu.numel() + q.numbers(), (tau, nu))


def adf(X, y, likelihood: str = "probit", prior_var: float = 1.0, passes: int = 1,
        generator: torch.Generator | None = None) -> EPResult:
    """Assumed density filtering: each datapoint's moment matching applied to q itself, pass after pass."""
    X, y = _check(X, y, likelihood, prior_var)
    N, D = X.shape
    q = _prior(D, prior_var)
    history: list = []
    for _ in range(passes):
        for n in torch.randperm(N, generator=generator).tolist():
            x = X[n]
            tau, nu, ok = _site_update(likelihood, x[None], y[n:n + 1], q, 1.0, 0.0)
            if bool(ok):
                q = Gaussian(q.h + nu[0] * x, q.precision + tau[0] * x[:, None] * x[None, :])
        _record(history, q)
    return EPResult(q, passes, history, q.numbers())


def sep(X, y, likelihood: str = "probit", prior_var: float = 1.0, passes: int = 10, minibatch: int = 1,
        generator: torch.Generator | None = None) -> EPResult:
    """SEP (minibatch 1) and parallel SEP (minibatch M; M = N is AEP): one tied factor f, q ∝ p0 f^N."""
    X, y = _check(X, y, likelihood, prior_var)
    N, D = X.shape
    if not 1 <= minibatch <= N:
        raise ValueError(f"minibatch must be in [1, N = {N}], got {minibatch}")
    prior = _prior(D, prior_var)
    f = Gaussian(torch.zeros(D, dtype=torch.float64), torch.zeros(D, D, dtype=torch.float64))
    history: list = []
    for _ in range(passes):
        order = torch.randperm(N, generator=generator)
        for start in range(0, N, minibatch):
            idx = order[start:start + minibatch]
            cavity = Gaussian(prior.h + (N - 1) * f.h, prior.precision + (N - 1) * f.precision)
            try:
                tau, nu, ok = _site_update(likelihood, X[idx], y[idx], cavity, 1.0, 0.0)
            except torch.linalg.LinAlgError:
                continue
            xs = X[idx][ok]
            tau, nu = tau[ok], nu[ok]
            # f_new = f_old^{1 - M/N} prod_m f_m^{1/N}; skipped sites keep their share of f_old
            keep = 1.0 - len(xs) / N
            f = Gaussian(keep * f.h + (nu[:, None] * xs).sum(0) / N,
                         keep * f.precision + (xs.T * tau) @ xs / N)
        _record(history, Gaussian(prior.h + N * f.h, prior.precision + N * f.precision))
    q = Gaussian(prior.h + N * f.h, prior.precision + N * f.precision)
    return EPResult(q, passes, history, f.numbers())


def dsep(X, y, partitions: Tensor, likelihood: str = "probit", prior_var: float = 1.0, passes: int = 10,
         generator: torch.Generator | None = None) -> EPResult:
    """DSEP: one tied factor per partition (``partitions[n]`` in 0..J-1), q ∝ p0 prod_j f_j^{N_j}."""
    X, y = _check(X, y, likelihood, prior_var)
    N, D = X.shape
    partitions = torch.as_tensor(partitions, dtype=torch.long)
    if partitions.shape != (N,) or int(partitions.min()) < 0:
        raise ValueError("partitions must give each datapoint a partition index >= 0")
    J = int(partitions.max()) + 1
    sizes = torch.bincount(partitions, minlength=J)
    if bool((sizes == 0).any()):
        raise ValueError(f"partitions {torch.nonzero(sizes == 0).ravel().tolist()} have no data")
    prior = _prior(D, prior_var)
    fh = torch.zeros(J, D, dtype=torch.float64)
    fP = torch.zeros(J, D, D, dtype=torch.float64)

    def posterior() -> Gaussian:
        return Gaussian(prior.h + (sizes[:, None] * fh).sum(0), prior.precision + (sizes[:, None, None] * fP).sum(0))
    history: list = []
    for _ in range(passes):
        for n in torch.randperm(N, generator=generator).tolist():
            j = int(partitions[n])
            q = posterior()
            cavity = Gaussian(q.h - fh[j], q.precision - fP[j])
            try:
                tau, nu, ok = _site_update(likelihood, X[n:n + 1], y[n:n + 1], cavity, 1.0, 0.0)
            except torch.linalg.LinAlgError:
                continue
            if not bool(ok):
                continue
            rate = 1.0 / float(sizes[j])
            x = X[n]
            fh[j] = (1 - rate) * fh[j] + rate * nu[0] * x
            fP[j] = (1 - rate) * fP[j] + rate * tau[0] * x[:, None] * x[None, :]
        _record(history, posterior())
    return EPResult(posterior(), passes, history, fh.numel() + fP.numel())


def predictive_log_likelihood(q: Gaussian, X, y, likelihood: str = "probit") -> tuple[float, float]:
    """Mean test log-likelihood log E_q[p(y | x^T theta)] and error rate of its mean prediction."""
    X, y = _check(X, y, likelihood, 1.0)
    mean, cov = q.moments()
    m = X @ mean
    v = ((X @ cov) * X).sum(-1)
    if likelihood == "probit":
        log_p = torch.special.log_ndtr(y * m / torch.sqrt(1 + v))
    else:
        a = m[:, None] + torch.sqrt(v)[:, None] * _NODES[None, :]
        log_p = torch.logsumexp(_log_lik(likelihood, y[:, None], a) + torch.log(_WEIGHTS)[None, :], dim=1)
    error = (torch.sign(m) != y).double().mean()
    return float(log_p.mean()), float(error)
