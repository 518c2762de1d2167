"""Variational continual learning (VCL) with coresets.

Seed 004 §1.12 (Nguyen et al. 2017; extraction ``../shared/research/seed004.md`` §1.12, case C10, machinery item 6):
datasets D_1..D_T arrive one after another and the posterior is updated recursively,

    (26)  q_t(theta) = argmin_{q in Q} KL( q(theta) || q_{t-1}(theta) p(D_t | theta) / Z_t ),   q_0 = p(theta),

so the previous approximate posterior is the prior -- the KL anchor -- of the next task. With a family Q closed under
the update (a full Gaussian for Bayesian linear regression with known noise) the recursion is exact: q_T is the batch
posterior (``gaussian_regression_posterior``, checked to 1e-8 by ``benchmarks/vcl.py``). With a mean-field Q each
step projects, and the errors accumulate (``mean_field_regression_update`` gives the exact projection, so the drift
can be measured without optimisation noise).

For networks: ``snapshot_prior(net)`` makes every ``BayesLinear`` of ``net`` take its current posterior (detached) as
its prior, which is (26) when the next task then maximises its ELBO (``vcl_loss``).

Coresets (seed: "K random points from D_t, or points spread over the input space"; how they are used is NOT STATED in
the seed -- EXTERNAL, Nguyen et al. 2018: the coreset is kept out of the recursion, the propagated posterior q~_t is
trained on D_t minus its coreset, and a predictive posterior is made from q~_t by training a copy on the union of all
coresets, never propagated): ``random_coreset`` and ``k_center_coreset`` (greedy farthest-point, Gonzalez 1985) select
the points; ``benchmarks/vcl.py`` runs the whole procedure on split digits.
"""
from __future__ import annotations

import copy

import torch
from torch import Tensor, nn
from torch.distributions import Normal

from inference.layers.bayes import BayesLinear, kl_loss

__all__ = ["gaussian_regression_posterior", "mean_field_regression_update", "SnapshotPrior", "snapshot_prior",
           "vcl_loss", "random_coreset", "k_center_coreset", "covering_radius", "predictive_copy"]


# -- the closed case: Bayesian linear regression with known noise -------------------------------------------------
def gaussian_regression_posterior(mean: Tensor, cov: Tensor, x: Tensor, y: Tensor, noise_std: float
                                  ) -> tuple[Tensor, Tensor]:
    """The posterior N(mean', cov') of weights w under prior N(mean, cov) after observing y = x w + N(0, noise_std^2):
    precision' = cov^-1 + x^T x / s^2, mean' = cov' (cov^-1 mean + x^T y / s^2). One step of (26) with Q = all
    Gaussians, which is exact (Gaussians are conjugate here)."""
    precision = torch.linalg.inv(cov) + x.T @ x / noise_std ** 2
    new_cov = torch.linalg.inv(precision)
    new_cov = 0.5 * (new_cov + new_cov.T)
    new_mean = new_cov @ (torch.linalg.solve(cov, mean) + x.T @ y / noise_std ** 2)
    return new_mean, new_cov


def mean_field_regression_update(mean: Tensor, var: Tensor, x: Tensor, y: Tensor, noise_std: float
                                 ) -> tuple[Tensor, Tensor]:
    """One step of (26) with Q = fully factorised Gaussians, solved exactly: the target q_{t-1} p(D_t|w) is Gaussian
    with precision L = diag(1/var) + x^T x / s^2, and the factorised q minimising KL(q || target) keeps the target's
    mean and takes the variances 1 / diag(L) (the reverse-KL mean-field fit of a Gaussian)."""
    precision = torch.diag(1.0 / var) + x.T @ x / noise_std ** 2
    new_mean = torch.linalg.solve(precision, mean / var + x.T @ y / noise_std ** 2)
    return new_mean, 1.0 / torch.diagonal(precision)


# -- networks: the previous posterior as the prior ------------------------------------------------------------------
class SnapshotPrior(nn.Module):
    """The elementwise Gaussian posterior of a ``BayesLinear`` at one moment, used as a prior: one Normal for the
    weights and one for the bias (``BayesLinear`` accepts a list of per-tensor priors)."""

    def __init__(self, layer: BayesLinear):
        super().__init__()
        posteriors = layer._posteriors()
        self.register_buffer("weight_mu", posteriors[0].loc.detach().clone())
        self.register_buffer("weight_sigma", posteriors[0].scale.detach().clone())
        self.has_bias = len(posteriors) > 1
        if self.has_bias:
            self.register_buffer("bias_mu", posteriors[1].loc.detach().clone())
            self.register_buffer("bias_sigma", posteriors[1].scale.detach().clone())

    def forward(self) -> list[Normal]:
        priors = [Normal(self.weight_mu, self.weight_sigma, validate_args=False)]
        if self.has_bias:
            priors.append(Normal(self.bias_mu, self.bias_sigma, validate_args=False))
        return priors


def snapshot_prior(net: nn.Module) -> nn.Module:
    """Make every ``BayesLinear`` of ``net`` take its current posterior as its prior (the step t-1 -> t of (26));
    returns ``net``. Layers created later (a new task's head) keep their own prior."""
    for module in net.modules():
        if isinstance(module, BayesLinear):
            module.prior = SnapshotPrior(module)
    return net


def vcl_loss(mean_nll: Tensor, net: nn.Module, dataset_size: int) -> Tensor:
    """The negative ELBO of (26) per data point: the batch's mean -log p(y | x, theta) (theta drawn from q) plus
    KL(q || prior) / N, where each layer's prior is the previous task's posterior after ``snapshot_prior``."""
    return mean_nll + kl_loss(net) / dataset_size


# -- coresets ---------------------------------------------------------------------------------------------------------
def random_coreset(n: int, k: int, generator: torch.Generator | None = None) -> Tensor:
    """Indices of ``k`` of ``n`` points drawn uniformly without replacement."""
    if not 0 <= k <= n:
        raise ValueError(f"a coreset of {k} points needs 0 <= k <= {n}")
    return torch.randperm(n, generator=generator)[:k]


def k_center_coreset(x: Tensor, k: int, first: int = 0) -> Tensor:
    """Indices of ``k`` points of ``x`` [n, d] spread over the input space: greedy farthest-point (K-centre) selection,
    starting from point ``first``, each next point the one farthest from those chosen. It is a 2-approximation of the
    smallest covering radius (Gonzalez 1985)."""
    n = len(x)
    if not 0 <= k <= n:
        raise ValueError(f"a coreset of {k} points needs 0 <= k <= {n}")
    if k == 0:
        return torch.empty(0, dtype=torch.long)
    flat = x.reshape(n, -1).to(torch.float64)
    chosen = [int(first)]
    distance = torch.linalg.norm(flat - flat[first], dim=1)
    for _ in range(k - 1):
        nxt = int(torch.argmax(distance))
        chosen.append(nxt)
        distance = torch.minimum(distance, torch.linalg.norm(flat - flat[nxt], dim=1))
    return torch.tensor(chosen, dtype=torch.long)


def covering_radius(x: Tensor, chosen: Tensor) -> float:
    """The largest distance from a point of ``x`` to its nearest chosen point (what K-centre selection minimises)."""
    flat = x.reshape(len(x), -1).to(torch.float64)
    return float(torch.cdist(flat, flat[chosen]).min(dim=1).values.max())


def predictive_copy(net: nn.Module) -> nn.Module:
    """A copy of ``net`` whose layers take the propagated posterior as their prior, to be trained on the coresets
    for prediction only (never propagated to the next task)."""
    return snapshot_prior(copy.deepcopy(net))
