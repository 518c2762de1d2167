"""Tanh-squashed Gaussian log-densities (agents/distributions.py)."""
import torch
from torch.distributions import Independent, Normal, TransformedDistribution
from torch.distributions.transforms import TanhTransform

from agents.distributions import SquashedGaussian


def reference(mean, std):
    return TransformedDistribution(Independent(Normal(mean, std), 1), [TanhTransform()])


def test_log_prob_matches_torch_change_of_variables():
    g = torch.Generator().manual_seed(0)
    mean, std = torch.randn(64, 3, generator=g), torch.rand(64, 3, generator=g) + 0.1
    action = torch.rand(64, 3, generator=g) * 1.8 - 0.9
    ours = SquashedGaussian(mean.double(), std.double()).log_prob(action.double())
    torch.testing.assert_close(ours, reference(mean.double(), std.double()).log_prob(action.double()))


def test_sampled_log_prob_equals_log_prob_of_the_sample():
    g = torch.Generator().manual_seed(1)
    dist = SquashedGaussian(torch.randn(256, 2, generator=g) * 0.5, torch.rand(256, 2, generator=g) + 0.2)
    action, log_prob = dist.rsample_with_log_prob(generator=g)
    assert action.abs().max() < 1
    torch.testing.assert_close(log_prob, dist.log_prob(action), rtol=1e-4, atol=1e-4)


def test_density_integrates_to_one_on_the_interval():
    dist = SquashedGaussian(torch.tensor([[0.7]], dtype=torch.float64), torch.tensor([[0.8]], dtype=torch.float64))
    a = torch.linspace(-1 + 1e-9, 1 - 1e-9, 200_001, dtype=torch.float64)[:, None, None]
    density = dist.log_prob(a).exp().squeeze()
    assert abs(torch.trapezoid(density, a.squeeze()).item() - 1.0) < 1e-4


def test_reparameterised_gradients_flow_to_mean_and_std():
    mean = torch.zeros(8, 2, requires_grad=True)
    log_std = torch.zeros(8, 2, requires_grad=True)
    action, log_prob = SquashedGaussian(mean, log_std.exp()).rsample_with_log_prob(n=4)
    assert action.shape == (4, 8, 2) and log_prob.shape == (4, 8)
    (action.sum() + log_prob.sum()).backward()
    assert mean.grad.abs().sum() > 0 and log_std.grad.abs().sum() > 0
