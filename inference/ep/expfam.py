"""Gaussian exponential families in natural and mean parameters: the plumbing of EP, power EP and SNEP.

Seed 003 Ch 4 §2.1 (extraction ``../shared/research/seed003.md`` §3.1), with the seed's own conventions:

- p_theta(x) = exp(theta^T s(x) - A(theta)); mean parameters mu = E[s(x)] = grad A(theta); A*(mu) = sup_theta
  theta^T mu - A(theta) (the negative entropy), theta = grad A*(mu);
- eq (1): KL(p_theta || p_theta') = mu^T (theta - theta') - A(theta) + A(theta') = A*(mu) - A*(mu') + (mu' - mu)^T theta';
- diagonal Gaussian, per coordinate s(x) = (x, x^2 / 2): theta_1 = u / sigma^2, theta_2 = -1 / sigma^2,
  mu_1 = u, mu_2 = (u^2 + sigma^2) / 2, A = sum (u^2 / sigma^2 + log 2 pi sigma^2) / 2,
  A* = -sum (1 + log 2 pi sigma^2) / 2, and the conversions of the seed's table with its erratum corrected:
  sigma^2 = 2 mu_2 - mu_1^2 (the table prints 2 (mu_2 - mu_1^2));
- full Gaussian, the same convention in matrix form (not in the seed's table, which is diagonal only):
  s(x) = (x, x x^T / 2), theta_1 = Lambda u, theta_2 = -Lambda (Lambda = Sigma^{-1}), mu_1 = u,
  mu_2 = (Sigma + u u^T) / 2, inner product theta^T mu = theta_1 . mu_1 + tr(theta_2 mu_2),
  A = (u^T Lambda u + log det 2 pi Sigma) / 2, A* = -(d + log det 2 pi Sigma) / 2.

Parameters are pairs of tensors with any leading batch shape: ``[..., d]`` twice (diagonal) or ``[..., d]`` and
``[..., d, d]`` (full). A natural parameter outside the family (theta_2 not negative (definite)) or a mean parameter
outside the mean domain (2 mu_2 - mu_1^2 not positive (definite)) raises ``ValueError`` naming which.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["DiagGaussian", "FullGaussian", "add"]

Pair = tuple[Tensor, Tensor]


def add(a: Pair, b: Pair, scale: float = 1.0) -> Pair:
    """a + scale b for parameter pairs (sites, cavities and deltas are sums and differences of these)."""
    return a[0] + scale * b[0], a[1] + scale * b[1]


class DiagGaussian:
    """Diagonal Gaussian family (static methods on (theta_1, theta_2) or (mu_1, mu_2) pairs)."""

    @staticmethod
    def natural_from_moments(mean: Tensor, var: Tensor) -> Pair:
        _positive(var, "variance")
        return mean / var, -1.0 / var

    @staticmethod
    def moments_from_natural(theta: Pair) -> Pair:
        t1, t2 = theta
        _negative(t2, "theta_2")
        var = -1.0 / t2
        return t1 * var, var

    @staticmethod
    def mean_from_natural(theta: Pair) -> Pair:
        u, var = DiagGaussian.moments_from_natural(theta)
        return u, 0.5 * (u * u + var)

    @staticmethod
    def natural_from_mean(mu: Pair) -> Pair:
        m1, m2 = mu
        var = 2.0 * m2 - m1 * m1                    # the corrected sigma^2 of the seed's table
        _positive(var, "2 mu_2 - mu_1^2 (a variance)")
        return m1 / var, -1.0 / var

    @staticmethod
    def log_partition(theta: Pair) -> Tensor:
        u, var = DiagGaussian.moments_from_natural(theta)
        return 0.5 * (u * u / var + torch.log(2 * math.pi * var)).sum(-1)

    @staticmethod
    def neg_entropy(mu: Pair) -> Tensor:
        """A*(mu)."""
        var = 2.0 * mu[1] - mu[0] * mu[0]
        _positive(var, "2 mu_2 - mu_1^2 (a variance)")
        return -0.5 * (1.0 + torch.log(2 * math.pi * var)).sum(-1)

    @staticmethod
    def inner(theta: Pair, mu: Pair) -> Tensor:
        return (theta[0] * mu[0] + theta[1] * mu[1]).sum(-1)

    @staticmethod
    def sufficient(x: Tensor) -> Pair:
        return x, 0.5 * x * x

    @classmethod
    def kl(cls, theta: Pair, theta_prime: Pair) -> Tensor:
        """KL(p_theta || p_theta') by eq (1)."""
        mu = cls.mean_from_natural(theta)
        diff = (theta[0] - theta_prime[0], theta[1] - theta_prime[1])
        return cls.inner(diff, mu) - cls.log_partition(theta) + cls.log_partition(theta_prime)


class FullGaussian:
    """Full-covariance Gaussian family (module docstring)."""

    @staticmethod
    def natural_from_moments(mean: Tensor, cov: Tensor) -> Pair:
        precision = _spd_inverse(cov, "covariance")
        return (precision @ mean.unsqueeze(-1)).squeeze(-1), -precision

    @staticmethod
    def moments_from_natural(theta: Pair) -> Pair:
        t1, t2 = theta
        cov = _spd_inverse(-t2, "-theta_2 (a precision)")
        return (cov @ t1.unsqueeze(-1)).squeeze(-1), cov

    @staticmethod
    def mean_from_natural(theta: Pair) -> Pair:
        u, cov = FullGaussian.moments_from_natural(theta)
        return u, 0.5 * (cov + u.unsqueeze(-1) * u.unsqueeze(-2))

    @staticmethod
    def natural_from_mean(mu: Pair) -> Pair:
        m1, m2 = mu
        cov = 2.0 * m2 - m1.unsqueeze(-1) * m1.unsqueeze(-2)
        return FullGaussian.natural_from_moments(m1, cov)

    @staticmethod
    def log_partition(theta: Pair) -> Tensor:
        u, cov = FullGaussian.moments_from_natural(theta)
        quad = (u * theta[0]).sum(-1)               # u^T Lambda u
        return 0.5 * (quad + torch.logdet(2 * math.pi * cov))

    @staticmethod
    def neg_entropy(mu: Pair) -> Tensor:
        m1, m2 = mu
        cov = 2.0 * m2 - m1.unsqueeze(-1) * m1.unsqueeze(-2)
        _spd_inverse(cov, "2 mu_2 - mu_1 mu_1^T (a covariance)")
        return -0.5 * (m1.shape[-1] + torch.logdet(2 * math.pi * cov))

    @staticmethod
    def inner(theta: Pair, mu: Pair) -> Tensor:
        return (theta[0] * mu[0]).sum(-1) + (theta[1] * mu[1]).sum((-2, -1))

    @staticmethod
    def sufficient(x: Tensor) -> Pair:
        return x, 0.5 * x.unsqueeze(-1) * x.unsqueeze(-2)

    @classmethod
    def kl(cls, theta: Pair, theta_prime: Pair) -> Tensor:
        mu = cls.mean_from_natural(theta)
        diff = (theta[0] - theta_prime[0], theta[1] - theta_prime[1])
        return cls.inner(diff, mu) - cls.log_partition(theta) + cls.log_partition(theta_prime)


def _positive(t: Tensor, name: str) -> None:
    if not bool(torch.isfinite(t).all()) or not bool((t > 0).all()):
        raise ValueError(f"{name} must be positive and finite (the parameter lies outside the Gaussian family)")


def _negative(t: Tensor, name: str) -> None:
    if not bool(torch.isfinite(t).all()) or not bool((t < 0).all()):
        raise ValueError(f"{name} must be negative and finite (a non-positive precision is not a Gaussian); damp "
                         "the update or raise the minimum site variance")


def _spd_inverse(m: Tensor, name: str) -> Tensor:
    m = 0.5 * (m + m.transpose(-1, -2))
    chol, info = torch.linalg.cholesky_ex(m)
    if not bool(torch.isfinite(m).all()) or bool((info != 0).any()):
        raise ValueError(f"{name} must be symmetric positive definite (the parameter lies outside the Gaussian "
                         "family); damp the update or raise the minimum site variance")
    return torch.cholesky_inverse(chol)
