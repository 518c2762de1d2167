"""Variational continual learning (inference/vi/continual.py): seed 004 eq (26), case C10, coresets."""
import pytest
import torch

from inference.layers.bayes import BayesLinear, GaussianPrior, kl_loss
from inference.vi.continual import (covering_radius, gaussian_regression_posterior, k_center_coreset,
                                    mean_field_regression_update, predictive_copy, random_coreset, snapshot_prior)


def regression(seed=0, n=120, dim=4, noise=0.3):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, dim, generator=g, dtype=torch.float64) @ (torch.eye(dim, dtype=torch.float64)
                                                                 + 0.5 * torch.randn(dim, dim, generator=g,
                                                                                     dtype=torch.float64))
    y = x @ torch.randn(dim, generator=g, dtype=torch.float64) + noise * torch.randn(n, generator=g,
                                                                                      dtype=torch.float64)
    return x, y, noise


def test_the_gaussian_recursion_is_the_batch_posterior():
    x, y, noise = regression()
    mean0, cov0 = torch.zeros(4, dtype=torch.float64), 2.0 * torch.eye(4, dtype=torch.float64)
    batch = gaussian_regression_posterior(mean0, cov0, x, y, noise)
    mean, cov = mean0, cov0
    for idx in torch.arange(len(x)).chunk(5):
        mean, cov = gaussian_regression_posterior(mean, cov, x[idx], y[idx], noise)
    assert torch.allclose(mean, batch[0], atol=1e-10) and torch.allclose(cov, batch[1], atol=1e-10)
    # against the textbook form: precision = S0^-1 + X^T X / s^2
    precision = torch.linalg.inv(cov0) + x.T @ x / noise ** 2
    assert torch.allclose(torch.linalg.inv(batch[1]), precision, atol=1e-8)


def test_the_mean_field_step_minimises_the_reverse_kl():
    x, y, noise = regression(n=30)
    prior_mean, prior_var = torch.full((4,), 0.3, dtype=torch.float64), torch.full((4,), 0.5, dtype=torch.float64)
    mean, var = mean_field_regression_update(prior_mean, prior_var, x, y, noise)
    # the target q_{t-1} p(D|w) / Z is Gaussian; minimise KL(q || target) over factorised q numerically
    precision = torch.diag(1 / prior_var) + x.T @ x / noise ** 2
    target_mean = torch.linalg.solve(precision, prior_mean / prior_var + x.T @ y / noise ** 2)
    m = torch.zeros(4, dtype=torch.float64, requires_grad=True)
    log_s = torch.zeros(4, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([m, log_s], max_iter=500, tolerance_grad=1e-12, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        d = m - target_mean
        kl = 0.5 * (torch.sum(torch.diagonal(precision) * torch.exp(2 * log_s)) + d @ precision @ d) - log_s.sum()
        kl.backward()
        return kl
    opt.step(closure)
    assert torch.allclose(m.detach(), mean, atol=1e-6)
    assert torch.allclose(torch.exp(2 * log_s.detach()), var, rtol=1e-5)


def test_a_snapshot_makes_the_posterior_the_prior_and_the_layer_recursion_matches_the_closed_form():
    """BayesLinear + snapshot_prior, trained on the exact expected log-likelihood, reproduces the mean-field recursion
    task by task: the network machinery implements (26)."""
    x, y, noise = regression(n=60)
    layer = BayesLinear(4, 1, prior=GaussianPrior(1.0), bias=False, local_reparam=False, init_sigma=0.5).double()
    mean, var = torch.zeros(4, dtype=torch.float64), torch.ones(4, dtype=torch.float64)
    for t, idx in enumerate(torch.arange(len(x)).chunk(3)):
        if t > 0:
            snapshot_prior(layer)
            assert float(kl_loss(layer).detach()) == pytest.approx(0.0, abs=1e-6)   # q is its own prior now
        opt = torch.optim.LBFGS([layer.weight_mu, layer.weight_rho], max_iter=1000, tolerance_grad=1e-10,
                                line_search_fn="strong_wolfe")
        xs, ys = x[idx], y[idx]

        def closure():
            opt.zero_grad()
            mu, sigma = layer.weight_mu[0], torch.nn.functional.softplus(layer.weight_rho[0])
            expected_sq = (ys - xs @ mu) ** 2 + (xs ** 2) @ sigma ** 2   # E_q (y - x w)^2, exactly
            loss = expected_sq.sum() / (2 * noise ** 2) + kl_loss(layer)
            loss.backward()
            return loss
        opt.step(closure)
        mean, var = mean_field_regression_update(mean, var, xs, ys, noise)
        assert torch.allclose(layer.weight_mu[0], mean, atol=1e-4), t
        sigma = torch.nn.functional.softplus(layer.weight_rho[0])
        assert torch.allclose(sigma ** 2, var, rtol=1e-3), t   # LBFGS stops within ~3e-4 of the optimum


def test_predictive_copy_leaves_the_propagated_posterior_alone():
    layer = BayesLinear(3, 2)
    copy = predictive_copy(layer)
    with torch.no_grad():
        copy.weight_mu.add_(1.0)
    assert not torch.equal(copy.weight_mu, layer.weight_mu)
    assert isinstance(layer.prior, GaussianPrior)        # the original's prior is untouched
    assert float(kl_loss(copy).detach()) > 0


def test_coresets_random_and_k_centre():
    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.randn(200, 2, generator=g), torch.randn(5, 2, generator=g) + 20.0])  # a far cluster
    chosen = k_center_coreset(x, 6)
    assert len(set(chosen.tolist())) == 6 and chosen[0] == 0
    assert any(i >= 200 for i in chosen.tolist())         # farthest-point selection reaches the outlying cluster
    radii = [covering_radius(x, random_coreset(len(x), 6, g)) for _ in range(20)]
    assert covering_radius(x, chosen) < min(radii)
    assert len(set(random_coreset(50, 50, g).tolist())) == 50
    assert len(k_center_coreset(x, 0)) == 0
    with pytest.raises(ValueError):
        k_center_coreset(x, len(x) + 1)
    with pytest.raises(ValueError):
        random_coreset(5, 6)
