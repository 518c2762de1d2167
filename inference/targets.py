"""Target densities for samplers and their tests, all with batched log densities.

Sources and the choices made where the seeds are wrong or silent:

* seed 002_c38d9063238be78e.txt (Kapoor 2019), eqs (2.8)-(2.14), (3.17): ``std_normal``, ``mog2``,
  ``mog6``, ``mog25``, ``ring5``, ``periodic``.  Mixture covariances "0.5 x I" / "0.1 x I" are read as
  covariance matrices.  ``mog6`` as printed (means on the unit circle, variance 0.5) is unimodal, so the
  radius is a parameter (default 1 as printed; use 5 to get the separated modes the seed describes).
  ``ring5`` as printed uses a signed distance and has no rings; the default is the squared form
  U(x) = min_i (||x|| - i)^2 / 0.04 (``printed=True`` gives the printed one).  ``periodic`` (2.14) is not
  normalisable as printed and its "Gaussian mask", sigma and l are not given: we multiply by an isotropic
  Gaussian mask N(0, mask_std^2 I) and take sigma = l = 1.  The |x1 - x2| inside sin^2 is dropped (sin^2 is even).
* seed 000_02c29175254ceb0c.txt (Hasenclever 2017), Ch. 3: ``banana`` and ``gmm(1|2|3)``, the 1-D mixture
  N(-5, 1/s2), N(0, s2), N(5, 1/s2) with s2 = 1, 0.5, 0.3 (the second argument read as a variance).  The
  3-D logistic regression of Ch. 3 (500 observations) has no stated generator: ``logistic_regression_synthetic``
  draws x ~ N(0, I), theta* ~ N(0, I) and y ~ Bernoulli(sigmoid(x theta*)).
* ``funnel``: Neal's funnel, v ~ N(0, 3^2), x_i | v ~ N(0, e^v) (standard form, not in the seeds).
* ``breast_cancer``: scikit-learn's bundled data set (569 x 30), features standardised, plus an intercept.

Every target maps positions of shape ``[..., d]`` to log densities of shape ``[...]``; constants follow the
input's device and dtype.  Targets with an exact sampler (or a numerically exact one) expose ``sample``.
"""
from __future__ import annotations

import math
from typing import Callable, Optional

import torch
from torch import Tensor
import torch.nn.functional as F


def _check_position(x: Tensor, dim: int, name: str) -> None:
    if not isinstance(x, Tensor):
        raise ValueError(f"{name}: positions must be a torch.Tensor of shape [..., {dim}], got {type(x).__name__}")
    if x.shape[-1:] != (dim,):
        raise ValueError(f"{name}: positions must have shape [..., {dim}], got {tuple(x.shape)}")


class Target:
    """A target density: ``log_prob(x)`` on ``[..., dim]``; ``sample`` where an exact sampler exists.

    ``log_prob`` may be unnormalised (``normalised`` says which).  ``modes`` (``[K, dim]``) lists the
    mode centres where they are known, for mode-coverage counts.
    """

    def __init__(self, name: str, dim: int, log_prob: Callable[[Tensor], Tensor],
                 sample: Optional[Callable[[int, torch.Generator, torch.dtype, torch.device], Tensor]] = None,
                 modes: Optional[Tensor] = None, normalised: bool = False):
        self.name, self.dim, self.normalised = name, dim, normalised
        self._log_prob, self._sample, self.modes = log_prob, sample, modes

    def log_prob(self, x: Tensor) -> Tensor:
        _check_position(x, self.dim, self.name)
        return self._log_prob(x)

    __call__ = log_prob

    @property
    def has_sampler(self) -> bool:
        return self._sample is not None

    def sample(self, n: int, generator: Optional[torch.Generator] = None,
               dtype: torch.dtype = torch.float64, device: torch.device | str = "cpu") -> Tensor:
        if self._sample is None:
            raise ValueError(f"target {self.name!r} has no exact sampler; use an MCMC reference instead")
        if n < 1:
            raise ValueError(f"sample: n must be >= 1, got {n}")
        return self._sample(n, generator, dtype, torch.device(device))

    def score(self, x: Tensor) -> Tensor:
        """grad_x log p(x) by autograd, batched (positions are independent)."""
        with torch.enable_grad():
            x = x.detach().requires_grad_(True)
            (g,) = torch.autograd.grad(self.log_prob(x).sum(), x)
        return g

    def __repr__(self) -> str:
        return f"Target({self.name!r}, dim={self.dim})"


# --------------------------------------------------------------------------- Gaussians and mixtures

def gaussian(dim: int = 2, scale: float | Tensor = 1.0, name: str = "normal") -> Target:
    """N(0, diag(scale^2)); ``gaussian(2)`` is seed 002's N(0, I) (2.8)."""
    if dim < 1:
        raise ValueError(f"gaussian: dim must be >= 1, got {dim}")
    scale_t = torch.as_tensor(scale, dtype=torch.float64).expand(dim).clone()
    if not bool((scale_t > 0).all()):
        raise ValueError("gaussian: scale must be positive")

    def log_prob(x: Tensor) -> Tensor:
        s = scale_t.to(x)
        z = x / s
        return -0.5 * (z * z).sum(-1) - torch.log(s).sum() - 0.5 * dim * math.log(2 * math.pi)

    def sample(n, generator, dtype, device):
        z = torch.randn(n, dim, generator=generator, dtype=dtype, device=device)
        return z * scale_t.to(dtype=dtype, device=device)

    return Target(name, dim, log_prob, sample, modes=torch.zeros(1, dim, dtype=torch.float64), normalised=True)


def std_normal(dim: int = 2) -> Target:
    return gaussian(dim, 1.0, name="std_normal")


def isotropic_mixture(means: Tensor, variance: float | Tensor, name: str = "mixture",
                      weights: Optional[Tensor] = None) -> Target:
    """Normalised mixture sum_k w_k N(mu_k, variance_k I); equal weights unless given."""
    means = torch.as_tensor(means, dtype=torch.float64)
    if means.ndim != 2:
        raise ValueError(f"isotropic_mixture: means must be [K, d], got {tuple(means.shape)}")
    k, dim = means.shape
    var = torch.as_tensor(variance, dtype=torch.float64).expand(k).clone()
    w = torch.full((k,), 1.0 / k, dtype=torch.float64) if weights is None else torch.as_tensor(weights, dtype=torch.float64)
    if not bool((var > 0).all()) or w.shape != (k,) or not bool((w > 0).all()):
        raise ValueError("isotropic_mixture: variances and weights must be positive, one per component")
    w = w / w.sum()

    def log_prob(x: Tensor) -> Tensor:
        mu, v, lw = means.to(x), var.to(x), torch.log(w).to(x)
        d2 = ((x.unsqueeze(-2) - mu) ** 2).sum(-1)                        # [..., K]
        comp = -0.5 * d2 / v - 0.5 * dim * torch.log(2 * math.pi * v)
        return torch.logsumexp(comp + lw, dim=-1)

    def sample(n, generator, dtype, device):
        idx = torch.multinomial(w.to(device), n, replacement=True, generator=generator)
        z = torch.randn(n, dim, generator=generator, dtype=torch.float64, device=device)
        x = means.to(device)[idx] + z * var.to(device)[idx].sqrt().unsqueeze(-1)
        return x.to(dtype)

    return Target(name, dim, log_prob, sample, modes=means.clone(), normalised=True)


def mog2() -> Target:
    """Seed 002 (2.9): N([-5,0], 0.5 I) + N([5,0], 0.5 I)."""
    return isotropic_mixture(torch.tensor([[-5.0, 0.0], [5.0, 0.0]]), 0.5, name="mog2")


def mog6(radius: float = 1.0) -> Target:
    """Seed 002 (2.10)-(2.11): six N(mu_i, 0.5 I), mu_i = radius [cos(2 pi i/6), sin(2 pi i/6)].

    The printed radius 1 gives a unimodal density; radius 5 separates the modes (see module docstring)."""
    if radius <= 0:
        raise ValueError(f"mog6: radius must be positive, got {radius}")
    ang = 2 * math.pi * torch.arange(1, 7, dtype=torch.float64) / 6
    means = radius * torch.stack([torch.cos(ang), torch.sin(ang)], -1)
    return isotropic_mixture(means, 0.5, name=f"mog6_r{radius:g}")


def mog25() -> Target:
    """Seed 002 (3.17): 5 x 5 grid of N([i, j], 0.1 I), i, j in -2..2."""
    g = torch.arange(-2, 3, dtype=torch.float64)
    means = torch.cartesian_prod(g, g)
    return isotropic_mixture(means, 0.1, name="mog25")


def gmm(which: int) -> Target:
    """Seed 000 Ch. 3 GMM1/2/3 (1-D): N(-5, 1/s2), N(0, s2), N(5, 1/s2), s2 = 1, 0.5, 0.3."""
    s2 = {1: 1.0, 2: 0.5, 3: 0.3}.get(which)
    if s2 is None:
        raise ValueError(f"gmm: which must be 1, 2 or 3, got {which}")
    return isotropic_mixture(torch.tensor([[-5.0], [0.0], [5.0]]), torch.tensor([1 / s2, s2, 1 / s2]),
                             name=f"gmm{which}")


# --------------------------------------------------------------------------- rings, periodic, banana, funnel

def ring5(printed: bool = False, scale: float = 0.04) -> Target:
    """Seed 002 (2.12)-(2.13).  Default: U(x) = min_i (||x|| - i)^2 / scale, i = 1..5 (corrected form).

    ``printed=True`` gives the printed U = min_i (||x|| - i)/scale (no rings, not normalisable; for
    reproducing the typo only).  ``sample`` is numerically exact: the radius is drawn from the 1-D density
    r exp(-U(r)) on a fine grid (error < 1e-4 in r), the angle uniformly.
    """
    radii = torch.arange(1, 6, dtype=torch.float64)

    def log_prob(x: Tensor) -> Tensor:
        r = torch.sqrt((x * x).sum(-1) + 1e-30)          # the 1e-30 keeps the gradient finite at 0
        d = (r.unsqueeze(-1) - radii.to(x))
        d = d / scale if printed else d * d / scale
        return -d.min(-1).values

    def sample(n, generator, dtype, device):
        grid = torch.linspace(0.0, 6.5, 65001, dtype=torch.float64)
        mid = 0.5 * (grid[1:] + grid[:-1])
        u = ((mid.unsqueeze(-1) - radii) ** 2 / scale).min(-1).values
        w = mid * torch.exp(-u)
        cell = torch.multinomial(w.to(device), n, replacement=True, generator=generator)
        jitter = torch.rand(n, generator=generator, dtype=torch.float64, device=device)
        r = grid.to(device)[cell] + jitter * (grid[1] - grid[0]).item()
        ang = 2 * math.pi * torch.rand(n, generator=generator, dtype=torch.float64, device=device)
        return torch.stack([r * torch.cos(ang), r * torch.sin(ang)], -1).to(dtype)

    return Target("ring5_printed" if printed else "ring5", 2, log_prob, None if printed else sample)


def periodic(period: float = 3.0, sigma: float = 1.0, lengthscale: float = 1.0, mask_std: float = 3.0) -> Target:
    """Seed 002 (2.14) times a Gaussian mask: log p = log sigma^2 - 2 sin^2(2 pi (x1 - x2)/p)/l^2 - ||x||^2/(2 m^2)."""
    if min(period, sigma, lengthscale, mask_std) <= 0:
        raise ValueError("periodic: period, sigma, lengthscale and mask_std must be positive")

    def log_prob(x: Tensor) -> Tensor:
        s = torch.sin(2 * math.pi * (x[..., 0] - x[..., 1]) / period)
        return 2 * math.log(sigma) - 2 * s * s / lengthscale ** 2 - 0.5 * (x * x).sum(-1) / mask_std ** 2

    return Target("periodic", 2, log_prob)


def banana() -> Target:
    """Seed 000 Ch. 3: p(x) ∝ exp{-0.5 (0.01 x1^2 + (x2 + 0.1 x1^2 - 10)^2)}; exact sampler by construction."""

    def log_prob(x: Tensor) -> Tensor:
        x1, x2 = x[..., 0], x[..., 1]
        return -0.5 * (0.01 * x1 * x1 + (x2 + 0.1 * x1 * x1 - 10.0) ** 2)

    def sample(n, generator, dtype, device):
        z = torch.randn(n, 2, generator=generator, dtype=torch.float64, device=device)
        x1 = 10.0 * z[:, 0]
        return torch.stack([x1, z[:, 1] + 10.0 - 0.1 * x1 * x1], -1).to(dtype)

    return Target("banana", 2, log_prob, sample)


def funnel(dim: int = 10, v_scale: float = 3.0) -> Target:
    """Neal's funnel: v = x[0] ~ N(0, v_scale^2), x[1:] | v ~ N(0, e^v I) (normalised)."""
    if dim < 2:
        raise ValueError(f"funnel: dim must be >= 2, got {dim}")

    def log_prob(x: Tensor) -> Tensor:
        v, rest = x[..., 0], x[..., 1:]
        lp_v = -0.5 * (v / v_scale) ** 2 - math.log(v_scale) - 0.5 * math.log(2 * math.pi)
        lp_x = -0.5 * (rest * rest).sum(-1) * torch.exp(-v) - 0.5 * (dim - 1) * (v + math.log(2 * math.pi))
        return lp_v + lp_x

    def sample(n, generator, dtype, device):
        z = torch.randn(n, dim, generator=generator, dtype=torch.float64, device=device)
        v = v_scale * z[:, :1]
        return torch.cat([v, z[:, 1:] * torch.exp(0.5 * v)], -1).to(dtype)

    return Target("funnel", dim, log_prob, sample, normalised=True)


# --------------------------------------------------------------------------- Bayesian logistic regression

class LogisticRegression(Target):
    """Posterior of Bayesian logistic regression, theta ~ N(0, prior_var I), y_n ~ Bernoulli(sigmoid(x_n theta)).

    ``log_prob`` is the full-data unnormalised log posterior; ``stochastic_grad(theta, generator)`` is the
    unbiased minibatch estimate grad log p(theta) + (N/n) sum_{i in batch} grad log p(y_i | x_i, theta)
    (seed 000 eq 2.23's gradient), one minibatch per call shared by all chains.
    """

    def __init__(self, features: Tensor, labels: Tensor, prior_var: float = 1.0, batch_size: int = 100,
                 name: str = "logistic_regression"):
        features = torch.as_tensor(features, dtype=torch.float64)
        labels = torch.as_tensor(labels, dtype=torch.float64)
        if features.ndim != 2 or labels.shape != features.shape[:1]:
            raise ValueError(f"{name}: features must be [N, d] and labels [N]; got {tuple(features.shape)}, "
                             f"{tuple(labels.shape)}")
        if not bool(((labels == 0) | (labels == 1)).all()):
            raise ValueError(f"{name}: labels must be 0/1")
        if prior_var <= 0 or not 1 <= batch_size <= features.shape[0]:
            raise ValueError(f"{name}: need prior_var > 0 and 1 <= batch_size <= N={features.shape[0]}")
        self.features, self.labels = features, labels
        self.prior_var, self.batch_size = prior_var, batch_size
        super().__init__(name, features.shape[1], self._full_log_prob)

    @property
    def num_data(self) -> int:
        return self.features.shape[0]

    def _log_lik(self, theta: Tensor, idx: Optional[Tensor] = None) -> Tensor:
        x, y = self.features.to(theta), self.labels.to(theta)
        if idx is not None:
            x, y = x[idx], y[idx]
        logits = theta @ x.T                                               # [..., n]
        return -(F.softplus(-logits) * y + F.softplus(logits) * (1 - y)).sum(-1)

    def _log_prior(self, theta: Tensor) -> Tensor:
        return -0.5 * (theta * theta).sum(-1) / self.prior_var

    def _full_log_prob(self, theta: Tensor) -> Tensor:
        return self._log_lik(theta) + self._log_prior(theta)

    def stochastic_grad(self, theta: Tensor, generator: Optional[torch.Generator] = None) -> Tensor:
        _check_position(theta, self.dim, self.name)
        idx = torch.randperm(self.num_data, generator=generator, device=generator.device if generator else "cpu")
        idx = idx[: self.batch_size].to(theta.device)
        with torch.enable_grad():
            th = theta.detach().requires_grad_(True)
            est = self._log_prior(th) + (self.num_data / self.batch_size) * self._log_lik(th, idx)
            (g,) = torch.autograd.grad(est.sum(), th)
        return g


def logistic_regression_synthetic(num_data: int = 500, dim: int = 3, seed: int = 0, prior_var: float = 1.0,
                                  batch_size: int = 100) -> LogisticRegression:
    """Seed 000 Ch. 3's simulated 3-D logistic regression (generator not given; see module docstring)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(num_data, dim, generator=g, dtype=torch.float64)
    theta_star = torch.randn(dim, generator=g, dtype=torch.float64)
    y = torch.bernoulli(torch.sigmoid(x @ theta_star), generator=g)
    target = LogisticRegression(x, y, prior_var, batch_size, name=f"logreg_synthetic_{dim}d")
    target.theta_star = theta_star
    return target


def breast_cancer(prior_var: float = 1.0, batch_size: int = 100) -> LogisticRegression:
    """scikit-learn's bundled breast-cancer data (569 x 30), standardised, with an intercept column (d = 31)."""
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    x = torch.as_tensor(data.data, dtype=torch.float64)
    x = (x - x.mean(0)) / x.std(0)
    x = torch.cat([torch.ones(x.shape[0], 1, dtype=torch.float64), x], 1)
    return LogisticRegression(x, torch.as_tensor(data.target, dtype=torch.float64), prior_var, batch_size,
                              name="logreg_breast_cancer")


_REGISTRY = {
    "std_normal": std_normal, "mog2": mog2, "mog6": mog6, "mog25": mog25, "ring5": ring5,
    "periodic": periodic, "banana": banana, "funnel": funnel,
    "gmm1": lambda: gmm(1), "gmm2": lambda: gmm(2), "gmm3": lambda: gmm(3),
    "logreg_synthetic": logistic_regression_synthetic, "breast_cancer": breast_cancer,
}


def make(name: str, **kwargs) -> Target:
    """Build a target by name (see ``names()``)."""
    if name not in _REGISTRY:
        raise ValueError(f"unknown target {name!r}; choose one of {sorted(_REGISTRY)}")
    return _REGISTRY[name](**kwargs)


def names() -> list[str]:
    return sorted(_REGISTRY)
