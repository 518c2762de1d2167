"""Gaussian exponential families (inference/ep/expfam.py): seed 003 validation case 10 -- round trips with the
corrected sigma^2 = 2 mu_2 - mu_1^2, eq (1) against the closed-form KL, and the gradients of A and A*."""
import pytest
import torch
from torch.distributions import MultivariateNormal, Normal, kl_divergence

from inference.ep import DiagGaussian, FullGaussian


def random_spd(d, g):
    a = torch.randn(d, d, dtype=torch.float64, generator=g)
    return a @ a.T + 0.5 * torch.eye(d, dtype=torch.float64)


def test_diagonal_round_trips_and_the_corrected_variance():
    g = torch.Generator().manual_seed(0)
    u = torch.randn(4, 3, dtype=torch.float64, generator=g)
    var = torch.rand(4, 3, dtype=torch.float64, generator=g) + 0.1
    theta = DiagGaussian.natural_from_moments(u, var)
    mu = DiagGaussian.mean_from_natural(theta)
    assert torch.allclose(2 * mu[1] - mu[0] ** 2, var)                 # sigma^2 = 2 mu_2 - mu_1^2 (corrected)
    assert not torch.allclose(2 * (mu[1] - mu[0] ** 2), var)           # the printed formula is wrong
    back = DiagGaussian.natural_from_mean(mu)
    assert all(torch.allclose(a, b) for a, b in zip(back, theta))
    u2, var2 = DiagGaussian.moments_from_natural(theta)
    assert torch.allclose(u2, u) and torch.allclose(var2, var)


@pytest.mark.parametrize("family", [DiagGaussian, FullGaussian])
def test_gradients_of_a_and_its_conjugate_are_the_parameter_maps(family):
    g = torch.Generator().manual_seed(1)
    d = 3
    u = torch.randn(d, dtype=torch.float64, generator=g)
    second = torch.rand(d, dtype=torch.float64, generator=g) + 0.2 if family is DiagGaussian else random_spd(d, g)
    theta = tuple(t.clone().requires_grad_(True) for t in family.natural_from_moments(u, second))
    grads = torch.autograd.grad(family.log_partition(theta), theta)
    mu = family.mean_from_natural(tuple(t.detach() for t in theta))
    assert all(torch.allclose(a, b, atol=1e-10) for a, b in zip(grads, mu))
    mu_var = tuple(t.clone().requires_grad_(True) for t in mu)
    grads = torch.autograd.grad(family.neg_entropy(mu_var), mu_var)
    if family is FullGaussian:      # d/d mu_2 of a function of a symmetric matrix: compare symmetric parts
        grads = (grads[0], 0.5 * (grads[1] + grads[1].T))
    assert all(torch.allclose(a, b.detach(), atol=1e-9) for a, b in zip(grads, theta))
    # Fenchel duality: A*(mu) = theta . mu - A(theta) at matching parameters
    th = tuple(t.detach() for t in theta)
    assert torch.allclose(family.neg_entropy(mu), family.inner(th, mu) - family.log_partition(th))


def test_eq1_kl_matches_the_closed_form():
    g = torch.Generator().manual_seed(2)
    u, v = torch.randn(5, dtype=torch.float64, generator=g), torch.randn(5, dtype=torch.float64, generator=g)
    s, t = torch.rand(5, dtype=torch.float64, generator=g) + .1, torch.rand(5, dtype=torch.float64, generator=g) + .1
    kl = DiagGaussian.kl(DiagGaussian.natural_from_moments(u, s), DiagGaussian.natural_from_moments(v, t))
    assert torch.allclose(kl, kl_divergence(Normal(u, s.sqrt()), Normal(v, t.sqrt())).sum())
    a, b = random_spd(4, g), random_spd(4, g)
    m, n = torch.randn(4, dtype=torch.float64, generator=g), torch.randn(4, dtype=torch.float64, generator=g)
    kl = FullGaussian.kl(FullGaussian.natural_from_moments(m, a), FullGaussian.natural_from_moments(n, b))
    assert torch.allclose(kl, kl_divergence(MultivariateNormal(m, a), MultivariateNormal(n, b)))
    # the other form of eq (1): A*(mu) - A*(mu') + (mu' - mu)^T theta'
    th, thp = FullGaussian.natural_from_moments(m, a), FullGaussian.natural_from_moments(n, b)
    mu, mup = FullGaussian.mean_from_natural(th), FullGaussian.mean_from_natural(thp)
    other = FullGaussian.neg_entropy(mu) - FullGaussian.neg_entropy(mup) + FullGaussian.inner(
        thp, (mup[0] - mu[0], mup[1] - mu[1]))
    assert torch.allclose(kl, other)


def test_parameters_outside_the_family_are_one_clear_error():
    with pytest.raises(ValueError, match="theta_2 must be negative"):
        DiagGaussian.moments_from_natural((torch.zeros(2), torch.tensor([-1.0, 0.5])))
    with pytest.raises(ValueError, match="2 mu_2 - mu_1"):
        DiagGaussian.natural_from_mean((torch.tensor([2.0]), torch.tensor([1.0])))
    with pytest.raises(ValueError, match="positive definite"):
        FullGaussian.moments_from_natural((torch.zeros(2), torch.eye(2)))
    with pytest.raises(ValueError, match="positive and finite"):
        DiagGaussian.natural_from_moments(torch.zeros(1), torch.tensor([float("nan")]))
