"""Multinomial NUTS (inference/mcmc/nuts.py) and the build level of the samplers: exact moments, adaptation through
``build``, identical draws through ``build`` and ``step``, and clear errors."""
import math

import pytest
import torch

from inference.mcmc import adaptation, hmc, nuts
from inference.mcmc.kinetic import RelativisticKinetic

SCALES = torch.tensor([0.3, 0.7, 1.0, 2.0, 4.0], dtype=torch.float64)


def gaussian(x):
    return -0.5 * ((x / SCALES) ** 2).sum(-1)


def draws(kernel, position, generator, burn_in, num):
    state = kernel.init(position)
    out, infos = [], []
    for t in range(burn_in + num):
        state, info = kernel.step(state, generator)
        if t >= burn_in:
            out.append(state.position)
            infos.append(info)
    return torch.stack(out, 1), infos


@pytest.mark.parametrize("kinetic", [None, pytest.param(RelativisticKinetic(1.0, 3.0), marks=pytest.mark.slow)],
                         ids=["gaussian", "relativistic"])
def test_nuts_recovers_exact_moments_of_an_ill_conditioned_gaussian(kinetic):
    g = torch.Generator().manual_seed(0)
    kernel = nuts.build(gaussian, step_size=0.25, kinetic=kinetic)
    x, infos = draws(kernel, torch.randn(100, 5, dtype=torch.float64, generator=g), g, 20, 80)
    mean, var = x.mean((0, 1)), x.var((0, 1))
    # 8 000 draws, nearly independent (NUTS): standard errors ~ scale / 90 for the mean, ~1.6 % for the variance
    assert (mean.abs() / SCALES).max() < 0.05
    assert ((var / SCALES ** 2) - 1).abs().max() < 0.07
    depth = torch.stack([i.tree_depth for i in infos]).double().mean()
    assert 3 <= depth <= 7                       # 4 / 0.25 = 16 steps to cross the widest scale
    assert not any(bool(i.is_divergent.any()) for i in infos)


def test_nuts_matches_the_conjugate_posterior_of_a_bayesian_linear_regression():
    g = torch.Generator().manual_seed(1)
    n, d = 60, 3
    X = torch.randn(n, d, dtype=torch.float64, generator=g)
    y = X @ torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64) + 0.5 * torch.randn(n, dtype=torch.float64,
                                                                                     generator=g)
    noise, prior = 0.5, 2.0

    def logp(w):
        return -0.5 * ((y - w @ X.T) ** 2).sum(-1) / noise ** 2 - 0.5 * (w ** 2).sum(-1) / prior ** 2
    precision = X.T @ X / noise ** 2 + torch.eye(d, dtype=torch.float64) / prior ** 2
    cov = torch.linalg.inv(precision)
    mean = cov @ X.T @ y / noise ** 2
    warm = adaptation.window_adaptation(logp, mean.repeat(100, 1), g, 150, algorithm=nuts, max_depth=8)
    assert abs(warm.acceptance - 0.8) < 0.12      # dual averaging through nuts.build reaches its target
    kernel = nuts.build(logp, warm.step_size, kinetic=hmc.GaussianKinetic(warm.inverse_mass))
    x, _ = draws(kernel, warm.state.position, g, 0, 100)
    flat = x.reshape(-1, d)
    sd = cov.diagonal().sqrt()
    assert ((flat.mean(0) - mean).abs() / sd).max() < 0.06
    assert ((torch.cov(flat.T) - cov).abs() / (sd[:, None] * sd[None, :])).max() < 0.06


def test_build_gives_the_same_draws_as_step_with_the_same_generator():
    position = torch.randn(8, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    for build, step in ((lambda: hmc.build(gaussian, 0.3, num_steps=7),
                         lambda s, g: hmc.step(s, g, gaussian, 0.3, 7)),
                        (lambda: nuts.build(gaussian, 0.3, max_depth=6),
                         lambda s, g: nuts.step(s, g, gaussian, 0.3, max_depth=6))):
        kernel = build()
        a, b = kernel.init(position), hmc.init(position, gaussian)
        ga, gb = torch.Generator().manual_seed(9), torch.Generator().manual_seed(9)
        for _ in range(5):
            a, _ = kernel.step(a, ga)
            b, _ = step(b, gb)
        assert torch.equal(a.position, b.position)


@pytest.mark.slow
def test_compiled_nuts_gives_the_eager_draws():
    """nuts.build(compile=True): compiled leaf and merge, the eager draws for the same generator (to floating-point
    tolerance), with either kinetic energy and with divergent trajectories (slow: compiling takes tens of seconds)."""
    def banana(x):              # curved, so trees of different depths; NaN beyond |x| > 4 (divergences)
        lp = gaussian(x) - 0.5 * (x[..., 1] - 0.5 * x[..., 0] ** 2) ** 2
        return torch.where(x.abs().max(-1).values > 4, torch.full_like(lp, math.nan), lp)
    x0 = torch.randn(16, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    for kin, step_size in ((None, 0.4), (RelativisticKinetic(1.0, 2.0), 1.2)):
        eager, compiled = (nuts.build(banana, step_size, kinetic=kin, max_depth=6, compile=c) for c in (False, True))
        a, b = eager.init(x0), compiled.init(x0)
        ga, gb = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
        depths, divergent = set(), False
        for _ in range(10):
            a, ia = eager.step(a, ga)
            b, ib = compiled.step(b, gb)
            assert torch.allclose(a.position, b.position, atol=1e-10)
            assert torch.equal(ia.tree_depth, ib.tree_depth) and torch.equal(ia.is_divergent, ib.is_divergent)
            depths |= set(ia.tree_depth.tolist())
            divergent |= bool(ia.is_divergent.any())
        assert len(depths) > 1
    assert divergent


def test_nuts_stops_on_divergence_and_never_returns_nan():
    def cliff(x):               # finite at the start, NaN beyond |x| > 3
        lp = -0.5 * (x ** 2).sum(-1)
        return torch.where(x.abs().max(-1).values > 3, torch.full_like(lp, math.nan), lp)
    g = torch.Generator().manual_seed(4)
    state = nuts.init(torch.zeros(50, 2, dtype=torch.float64), cliff)
    saw_divergence = False
    for _ in range(20):
        state, info = nuts.step(state, g, cliff, 1.5)
        saw_divergence |= bool(info.is_divergent.any())
        assert torch.isfinite(state.position).all() and torch.isfinite(state.log_density).all()
    assert saw_divergence


def test_bad_input_is_one_clear_error():
    with pytest.raises(ValueError, match="drop compile=True here and pass it to build"):
        adaptation.window_adaptation(gaussian, torch.zeros(4, 5, dtype=torch.float64), None, 10, algorithm=nuts,
                                     compile=True)
    with pytest.raises(ValueError, match="step_size must be positive"):
        nuts.build(gaussian, step_size=0.0)
    with pytest.raises(ValueError, match="step_size must be positive"):
        hmc.build(gaussian, step_size=-1.0)
    with pytest.raises(ValueError, match="max_depth"):
        nuts.build(gaussian, 0.1, max_depth=0)
    with pytest.raises(ValueError, match="num_steps"):
        hmc.build(gaussian, 0.1, num_steps=2.5)
    kernel = nuts.build(lambda x: x.sum(), 0.1)      # returns a scalar instead of one value per chain
    with pytest.raises(ValueError, match="log density must map positions"):
        kernel.init(torch.zeros(4, 2))
    kernel = nuts.build(lambda x: x.sum(-1) * math.nan, 0.1)
    with pytest.raises(ValueError, match="not finite at the initial position"):
        kernel.init(torch.zeros(4, 2))
