import math

import pytest
import torch

from inference import targets

SAMPLED = ["std_normal", "mog2", "mog25", "gmm1", "gmm2", "gmm3", "banana", "ring5"]

def _grid_mass(target, lim, n=401):
    g = torch.linspace(-lim, lim, n, dtype=torch.float64)
    cell = (g[1] - g[0]).item()
    if target.dim == 1:
        return torch.exp(target.log_prob(g[:, None])).sum().item() * cell
    xx, yy = torch.meshgrid(g, g, indexing="ij")
    return torch.exp(target.log_prob(torch.stack([xx, yy], -1))).sum().item() * cell * cell


@pytest.mark.parametrize("name,lim", [("std_normal", 8), ("mog2", 9), ("mog25", 5), ("gmm1", 12), ("gmm3", 14)])
def test_normalised_targets_integrate_to_one(name, lim):
    assert _grid_mass(targets.make(name), lim) == pytest.approx(1.0, abs=2e-3)


def test_mog6_radius_controls_modality():
    # printed radius 1: the origin beats the component means (unimodal); radius 5: it does not
    for radius, origin_wins in [(1.0, True), (5.0, False)]:
        t = targets.mog6(radius)
        origin = t.log_prob(torch.zeros(1, 2, dtype=torch.float64))
        at_mean = t.log_prob(t.modes[:1])
        assert bool(origin > at_mean) == origin_wins


@pytest.mark.parametrize("name", SAMPLED)
def test_sampler_agrees_with_log_prob_via_stein_identity(name):
    # E_p[grad log p(x) x^T] = -I holds only if samples and log density describe the same distribution
    t = targets.make(name)
    g = torch.Generator().manual_seed(0)
    x = t.sample(40000, g)
    terms = t.score(x).unsqueeze(-1) * x.unsqueeze(-2)
    m, se = terms.mean(0), terms.std(0) / len(x) ** 0.5
    err = (m + torch.eye(t.dim, dtype=torch.float64)).abs()
    assert bool((err < 5 * se + 1e-3).all()), (m, se)


def test_banana_and_funnel_match_closed_forms():
    x = torch.randn(7, 10, dtype=torch.float64)
    f = targets.funnel(10)
    v = x[:, 0]
    ref = torch.distributions.Normal(0, 3.0).log_prob(v) + \
        torch.distributions.Normal(0, torch.exp(v / 2)[:, None]).log_prob(x[:, 1:]).sum(-1)
    assert torch.allclose(f.log_prob(x), ref)
    b = targets.banana()
    y = x[:, :2]
    assert torch.allclose(b.log_prob(y), -0.5 * (0.01 * y[:, 0] ** 2 + (y[:, 1] + 0.1 * y[:, 0] ** 2 - 10) ** 2))


def test_ring5_squared_form_and_printed_form():
    t, tp = targets.ring5(), targets.ring5(printed=True)
    on_ring = torch.tensor([[3.0, 0.0]], dtype=torch.float64)
    between = torch.tensor([[3.5, 0.0]], dtype=torch.float64)
    assert t.log_prob(on_ring).item() == pytest.approx(0.0)
    assert t.log_prob(between).item() == pytest.approx(-0.25 / 0.04)
    # the printed (signed) form has no rings: it only grows towards the origin
    assert tp.log_prob(torch.tensor([[0.5, 0.0]], dtype=torch.float64)) > tp.log_prob(on_ring)
    assert not tp.has_sampler


def test_periodic_is_periodic_along_the_diagonal_difference():
    t = targets.periodic(period=3.0, mask_std=1e6)
    x = torch.tensor([[0.3, -0.2]], dtype=torch.float64)
    shift = torch.tensor([[1.5, 0.0]], dtype=torch.float64)      # (x1 - x2) shifts by p/2 -> same sin^2
    assert torch.allclose(t.log_prob(x), t.log_prob(x + shift), atol=1e-9)


def test_logistic_regression_log_prob_and_unbiased_minibatch_gradient():
    t = targets.logistic_regression_synthetic(num_data=200, dim=3, batch_size=50)
    theta = torch.randn(4, 3, dtype=torch.float64)
    ref = torch.distributions.Bernoulli(logits=theta @ t.features.T).log_prob(t.labels).sum(-1) \
        - 0.5 * (theta ** 2).sum(-1)
    assert torch.allclose(t.log_prob(theta), ref)
    g = torch.Generator().manual_seed(0)
    est = torch.stack([t.stochastic_grad(theta, g) for _ in range(3000)]).mean(0)
    full = t.score(theta)
    assert torch.allclose(est, full, rtol=0.05, atol=0.5)
    full_batch = targets.LogisticRegression(t.features, t.labels, batch_size=200)
    assert torch.allclose(full_batch.stochastic_grad(theta, g), full)


def test_breast_cancer_loads_bundled_data():
    t = targets.breast_cancer()
    assert t.dim == 31 and t.num_data == 569
    assert torch.isfinite(t.log_prob(torch.zeros(2, 31, dtype=torch.float64))).all()


def test_dtype_and_bad_inputs():
    t = targets.mog2()
    assert t.log_prob(torch.zeros(3, 2, dtype=torch.float32)).dtype == torch.float32
    with pytest.raises(ValueError, match=r"\[\.\.\., 2\]"):
        t.log_prob(torch.zeros(3, 3))
    with pytest.raises(ValueError, match="unknown target"):
        targets.make("nope")
    with pytest.raises(ValueError, match="no exact sampler"):
        targets.periodic().sample(3)
    with pytest.raises(ValueError):
        targets.mog6(radius=-1.0)
    assert math.isclose(len(targets.names()), 13)
