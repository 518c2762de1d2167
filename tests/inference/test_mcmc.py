import math

import numpy as np
import pytest
import scipy.stats as st
import torch

from inference import targets
from inference.mcmc import adaptation, hmc, kinetic, sgmcmc, tempering

pytestmark = pytest.mark.usefixtures("float64")

COV = torch.tensor([[1.0, 0.8], [0.8, 2.0]], dtype=torch.float64)
GAUSS = torch.distributions.MultivariateNormal(torch.tensor([1.0, -2.0], dtype=torch.float64), COV)


def corr_gauss(x):
    return GAUSS.log_prob(x)


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


# ----------------------------------------------------------------------------- integrator

@pytest.mark.parametrize("kin", [kinetic.GaussianKinetic(torch.tensor([0.5, 2.0])),
                                 kinetic.RelativisticKinetic(mass=torch.tensor([1.0, 0.3]), c=2.0)])
def test_leapfrog_is_reversible(kin):
    x0 = torch.randn(5, 2, generator=gen())
    p0 = torch.randn(5, 2, generator=gen(1))
    lp, g = hmc.value_and_grad(corr_gauss, x0)
    x1, p1, _, g1 = hmc.leapfrog(x0, p0, g, corr_gauss, torch.tensor(0.1), 25, kin.velocity)
    x2, p2, _, _ = hmc.leapfrog(x1, -p1, g1, corr_gauss, torch.tensor(0.1), 25, kin.velocity)
    assert torch.allclose(x2, x0, atol=1e-10) and torch.allclose(-p2, p0, atol=1e-10)


def test_leapfrog_energy_error_is_second_order():
    kin = kinetic.GaussianKinetic()
    x0 = torch.randn(50, 2, generator=gen())
    p0 = torch.randn(50, 2, generator=gen(1))
    lp0, g0 = hmc.value_and_grad(corr_gauss, x0)
    errs = []
    for eps, n in [(0.1, 10), (0.05, 20)]:                       # same trajectory length 1.0
        x, p, lp, _ = hmc.leapfrog(x0, p0, g0, corr_gauss, torch.tensor(eps), n, kin.velocity)
        errs.append(((-lp + kin.energy(p)) - (-lp0 + kin.energy(p0))).abs().max().item())
    assert 3.0 < errs[0] / errs[1] < 5.0                           # O(eps^2): halving eps quarters the error


def test_kinetic_velocity_and_laplacian_match_autograd():
    p = torch.randn(6, 3, generator=gen()).requires_grad_(True)
    for kin in [kinetic.GaussianKinetic(torch.tensor([0.5, 1.0, 3.0])),
                kinetic.RelativisticKinetic(mass=torch.tensor([1.0, 0.5, 2.0]), c=torch.tensor([1.0, 3.0, 0.7]))]:
        (grad,) = torch.autograd.grad(kin.energy(p).sum(), p, create_graph=True)
        assert torch.allclose(grad, kin.velocity(p))
        lap = sum(torch.autograd.grad(grad[:, j].sum(), p, retain_graph=True)[0][:, j] for j in range(3))
        assert torch.allclose(lap, kin.laplacian(p))


@pytest.mark.parametrize("m,c", [(1.0, 1.0), (0.5, 3.0), (1.0, 50.0), (0.01, 1.0)])
def test_relativistic_momentum_is_exact(m, c):
    # reference CDF of ∝ exp(-c sqrt(p^2 + m^2 c^2)) by quadrature (scipy's genhyperbolic(p=1, a=m c^2,
    # scale=m c) is the same law but its CDF is slow)
    draws = kinetic.sample_relativistic_momentum((20000,), m, c, gen())
    lim = 60.0 / c + 10.0 * math.sqrt(m)
    grid = torch.linspace(-lim, lim, 200001)
    logpdf = -c * (grid ** 2 + (m * c) ** 2).sqrt()
    pdf = torch.exp(logpdf - logpdf.max())
    cdf = torch.cumulative_trapezoid(pdf, grid)
    cdf = torch.cat([torch.zeros(1), cdf / cdf[-1]])
    ks = st.kstest(draws.numpy(), lambda q: np.interp(q, grid.numpy(), cdf.numpy()))
    assert ks.pvalue > 0.01


def test_relativistic_speed_is_bounded_by_c():
    kin = kinetic.RelativisticKinetic(mass=1.0, c=torch.tensor([0.5, 2.0]))
    v = kin.velocity(torch.tensor([[1e6, -1e6]]))
    assert bool((v.abs() < torch.tensor([0.5, 2.0])).all())


# ----------------------------------------------------------------------------- exactness of the kernels

@pytest.mark.parametrize("make_kernel", [
    lambda s, g: hmc.step(s, g, corr_gauss, 0.9, 3),
    lambda s, g: hmc.step(s, g, corr_gauss, 0.9, 4, kinetic.GaussianKinetic(torch.tensor([1.0, 2.0]))),
    lambda s, g: hmc.rhmc_step(s, g, corr_gauss, 0.7, 4, mass=1.0, c=1.5),
], ids=["hmc", "hmc_diag_mass", "rhmc"])
def test_one_step_preserves_the_exact_target(make_kernel):
    # detailed balance => a chain started at the target stays at the target after any step (with rejections)
    x = GAUSS.mean + torch.randn(20000, 2, generator=gen(3)) @ torch.linalg.cholesky(COV).T
    state = hmc.init(x, corr_gauss)
    state, info = make_kernel(state, gen(4))
    assert 0.2 < info.is_accepted.double().mean() < 0.98           # the test must exercise rejections
    y = state.position
    n = y.shape[0]
    assert torch.allclose(y.mean(0), GAUSS.mean, atol=4 * math.sqrt(2.0 / n))
    cov = torch.cov(y.T)
    assert torch.allclose(cov, COV, atol=0.08)
    assert st.kstest(y[:, 1].numpy(), st.norm(-2.0, math.sqrt(2.0)).cdf).pvalue > 0.01


def test_hmc_recovers_a_gaussian_posterior_from_a_bad_start():
    x0 = torch.full((200, 2), 6.0)
    state = hmc.init(x0, corr_gauss)
    _, draws, info = hmc.sample(lambda s, g: hmc.step(s, g, corr_gauss, 0.25, 8), state, 100, gen(), burn_in=30)
    flat = draws.reshape(-1, 2)
    assert torch.allclose(flat.mean(0), GAUSS.mean, atol=0.08)
    assert torch.allclose(torch.cov(flat.T), COV, atol=0.15)
    assert info["num_grad_evals"] == (30 + 100) * 8          # per chain, burn-in included
    assert info["acceptance_rate"].shape == (200, 100)


def test_divergent_transitions_are_flagged_and_rejected():
    state = hmc.init(torch.zeros(8, 2), corr_gauss)
    new, info = hmc.step(state, gen(), corr_gauss, 50.0, 20)
    assert bool(info.is_divergent.all()) and not bool(info.is_accepted.any())
    assert torch.equal(new.position, state.position)


def test_hmc_input_errors():
    with pytest.raises(ValueError, match=r"\[chains, d\]"):
        hmc.init(torch.zeros(2), corr_gauss)
    with pytest.raises(ValueError, match="NaN"):
        hmc.init(torch.tensor([[float("nan"), 0.0]]), corr_gauss)
    s = hmc.init(torch.zeros(3, 2), corr_gauss)
    with pytest.raises(ValueError, match="step_size"):
        hmc.step(s, gen(), corr_gauss, -0.1, 3)
    with pytest.raises(ValueError, match="num_steps"):
        hmc.step(s, gen(), corr_gauss, 0.1, 0)
    with pytest.raises(ValueError, match="log density must map"):
        hmc.init(torch.zeros(3, 2), lambda x: x.sum())


def test_per_chain_step_sizes_and_generator_determinism():
    s = hmc.init(torch.zeros(4, 2), corr_gauss)
    a, _ = hmc.step(s, gen(7), corr_gauss, torch.tensor([0.1, 0.2, 0.3, 0.4]), 5)
    b, _ = hmc.step(s, gen(7), corr_gauss, torch.tensor([0.1, 0.2, 0.3, 0.4]), 5)
    assert torch.equal(a.position, b.position)


# ----------------------------------------------------------------------------- adaptation

def test_dual_averaging_reaches_the_target_acceptance_and_mass_matches_variances():
    scales = torch.tensor([1.0, 10.0])

    def logp(x):
        return -0.5 * ((x / scales) ** 2).sum(-1)

    res = adaptation.window_adaptation(logp, torch.randn(20, 2, generator=gen()), gen(1), num_warmup=400,
                                       num_steps=5, target_accept=0.8)
    assert torch.allclose(res.inverse_mass, scales ** 2, rtol=0.35)
    _, _, info = hmc.sample(lambda s, g: hmc.step(s, g, logp, res.step_size, 5,
                                                  kinetic.GaussianKinetic(res.inverse_mass)), res.state, 100, gen(2))
    assert 0.7 < info["acceptance_rate"].mean().item() < 0.9


def test_dual_averaging_moves_the_step_in_the_right_direction():
    da = adaptation.dual_averaging_init(1.0)
    for _ in range(20):
        da = adaptation.dual_averaging_update(da, torch.tensor(0.1))        # too low acceptance -> smaller step
    assert math.exp(da.log_step) < 1.0
    da = adaptation.dual_averaging_init(1.0)
    for _ in range(20):
        da = adaptation.dual_averaging_update(da, torch.tensor(1.0))
    assert math.exp(da.log_step) > 1.0


def test_window_schedule_covers_the_middle_of_warmup():
    w = adaptation.schedule(1000)
    assert w[0][0] == 150 and w[-1][1] == 900
    assert all(a[1] == b[0] for a, b in zip(w, w[1:]))
    assert adaptation.schedule(10) == []


# ----------------------------------------------------------------------------- stochastic-gradient kernels

def _exact_grad(x, generator=None):
    return -x / torch.tensor([1.0, 4.0])       # N(0, diag(1, 4))


@pytest.mark.parametrize("name,step,kw", [
    ("sgld", sgmcmc.sgld_step, dict(step_size=0.01)),
    ("sghmc", sgmcmc.sghmc_step, dict(step_size=0.05, friction=1.0)),
    ("sgnht", sgmcmc.sgnht_step, dict(step_size=0.05, friction=1.0)),
    ("rsghmc", sgmcmc.rsghmc_step, dict(step_size=0.05, friction=1.0, mass=1.0, c=3.0)),
    ("rsgnht", sgmcmc.rsgnht_step, dict(step_size=0.05, friction=1.0, mass=1.0, c=3.0)),
])
def test_sg_kernels_sample_a_gaussian_with_exact_gradients(name, step, kw):
    kin = kinetic.RelativisticKinetic(1.0, 3.0) if name.startswith("r") else None
    start = torch.randn(400, 2, generator=gen(2)) * torch.tensor([1.0, 2.0])     # at the target: tests bias only
    state = sgmcmc.init(start, gen(), kin)
    g = gen(1)
    xs = []
    for t in range(700):
        state, info = step(state, g, _exact_grad, **kw)
        if t >= 200 and t % 5 == 0:
            xs.append(state.position)
    x = torch.cat(xs)
    assert not bool(info.is_divergent.any())
    # discretisation bias is O(h); 15% on the variances is far below a broken sampler's error
    assert torch.allclose(x.var(0), torch.tensor([1.0, 4.0]), rtol=0.15), x.var(0)
    assert x.mean(0).abs().max() < 0.15


def test_rsgnht_thermostat_settles_and_rsgd_steps_are_bounded():
    state = sgmcmc.init(torch.zeros(200, 2), gen(), kinetic.RelativisticKinetic(1.0, 3.0))
    g = gen(1)
    for _ in range(1500):
        state, info = sgmcmc.rsgnht_step(state, g, _exact_grad, 0.05, friction=1.0, mass=1.0, c=3.0)
    assert 0.0 < info.thermostat.mean().item() < 5.0
    # RSGD: zero temperature, |dx_j| <= h c_j, converges to the mode
    state = sgmcmc.init(torch.full((3, 2), 10.0), gen(), kinetic.RelativisticKinetic(1.0, 2.0))
    state = state._replace(momentum=torch.zeros_like(state.momentum))
    for _ in range(2000):
        new, _ = sgmcmc.rsgd_step(state, g, _exact_grad, 0.1, friction=2.0, mass=1.0, c=2.0)
        assert bool(((new.position - state.position).abs() <= 0.1 * 2.0 + 1e-12).all())
        state = new
    assert state.position.abs().max() < 1e-3


def test_sg_input_errors():
    state = sgmcmc.init(torch.zeros(2, 2), gen())
    with pytest.raises(ValueError, match="step_size"):
        sgmcmc.sghmc_step(state, gen(), _exact_grad, 0.0)
    with pytest.raises(ValueError, match="friction"):
        sgmcmc.sghmc_step(state, gen(), _exact_grad, 0.1, friction=-1.0)


# ----------------------------------------------------------------------------- parallel tempering

def test_tempered_rungs_target_p_to_the_one_over_t():
    temps = tempering.ladder(3)
    assert torch.allclose(temps, torch.tensor([1.0, math.sqrt(2), 2.0]))

    def logp(x):
        return -0.5 * (x ** 2).sum(-1)

    state = tempering.init(torch.zeros(300, 3, 1), logp, temps)
    g = gen()
    xs = []
    for t in range(400):
        state, info = tempering.step(state, g, logp, 0.5 * temps.sqrt(), 5)
        if t >= 100 and t % 3 == 0:
            xs.append(state.position)
    var = torch.cat(xs).var(0).squeeze(-1)                          # p^(1/T) = N(0, T)
    assert torch.allclose(var, temps, rtol=0.1), var
    assert bool((info.swap_prob > 0).all())


def test_parallel_tempering_crosses_mog2_modes_where_hmc_does_not():
    t = targets.mog2()
    temps = tempering.ladder(10)
    g = gen(0)
    state = tempering.init(torch.full((1, 10, 2), 5.0), t.log_prob, temps)
    sides, swaps = [], []
    for _ in range(600):
        state, info = tempering.step(state, g, t.log_prob, 0.3 * temps.sqrt(), 10)
        sides.append(state.position[0, 0, 0] > 0)
        swaps.append(info.swap_accepted[0])
    sides = torch.stack(sides)
    assert 0.1 < sides.double().mean() < 0.9                        # the T=1 chain spends time in both modes
    assert bool(torch.stack(swaps).any(0).all())                     # every adjacent pair swapped at least once
    hstate = hmc.init(torch.full((1, 2), 5.0), t.log_prob)
    _, draws, _ = hmc.sample(lambda s, gg: hmc.step(s, gg, t.log_prob, 0.3, 10), hstate, 600, g)
    assert bool((draws[..., 0] > 0).all())                          # plain HMC never leaves its mode


def test_pt_input_errors():
    with pytest.raises(ValueError, match="replicas"):
        tempering.init(torch.zeros(3, 2), corr_gauss, tempering.ladder(3))


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_kernels_follow_the_input_device_and_dtype(device):
    t = targets.mog2()
    g = torch.Generator(device=device).manual_seed(0)
    x = torch.zeros(6, 2, dtype=torch.float32, device=device)
    s, info = hmc.step(hmc.init(x, t.log_prob), g, t.log_prob, 0.1, 3)
    r, _ = hmc.rhmc_step(s, g, t.log_prob, 0.1, 3, mass=1.0, c=2.0)
    sg = sgmcmc.init(x, g, kinetic.RelativisticKinetic(1.0, 2.0))
    sg, _ = sgmcmc.rsgnht_step(sg, g, lambda y, gg: t.score(y), 0.01, mass=1.0, c=2.0)
    pt, _ = tempering.step(tempering.init(x.reshape(2, 3, 2), t.log_prob, tempering.ladder(3)), g, t.log_prob, 0.1, 3)
    for out in [s.position, r.position, sg.position, pt.position, info.acceptance_rate]:
        assert out.device.type == device and out.dtype == torch.float32


def test_step_size_adaptation_with_the_relativistic_kinetic():
    kin = kinetic.RelativisticKinetic(1.0, 2.0)
    res = adaptation.window_adaptation(corr_gauss, torch.randn(10, 2, generator=gen()), gen(1), num_warmup=200,
                                       num_steps=5, adapt_mass=False, kinetic=kin)
    assert res.inverse_mass is None and 0.6 < res.acceptance < 0.95
    with pytest.raises(ValueError, match="adapt_mass"):
        adaptation.window_adaptation(corr_gauss, torch.zeros(2, 2), gen(), 10, kinetic=kin)


def test_build_for_sgmcmc_and_tempering_gives_the_same_draws_as_the_step_functions():
    from inference.mcmc import sgmcmc, tempering

    def grad_fn(x, generator):
        return -x
    x0 = torch.randn(4, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    for method in sgmcmc.METHODS:
        kernel = sgmcmc.build(grad_fn, 0.05, method=method, friction=1.0, mass=1.0, c=1.0)
        step = {"sgld": lambda s, g: sgmcmc.sgld_step(s, g, grad_fn, 0.05),
                "sghmc": lambda s, g: sgmcmc.sghmc_step(s, g, grad_fn, 0.05, 1.0),
                "sgnht": lambda s, g: sgmcmc.sgnht_step(s, g, grad_fn, 0.05, 1.0),
                "rsghmc": lambda s, g: sgmcmc.rsghmc_step(s, g, grad_fn, 0.05, 1.0),
                "rsgd": lambda s, g: sgmcmc.rsgd_step(s, g, grad_fn, 0.05, 1.0),
                "rsgnht": lambda s, g: sgmcmc.rsgnht_step(s, g, grad_fn, 0.05, 1.0)}[method]
        kinetic = sgmcmc.RelativisticKinetic(1.0, 1.0) if method.startswith("r") else None
        a = kernel.init(x0, torch.Generator().manual_seed(1))
        b = sgmcmc.init(x0, torch.Generator().manual_seed(1), kinetic)
        ga, gb = torch.Generator().manual_seed(2), torch.Generator().manual_seed(2)
        for _ in range(5):
            a, _ = kernel.step(a, ga)
            b, _ = step(b, gb)
        assert torch.equal(a.position, b.position), method
    with pytest.raises(ValueError, match="method"):
        sgmcmc.build(grad_fn, 0.1, method="sgd")
    with pytest.raises(ValueError, match="step_size"):
        sgmcmc.build(grad_fn, -0.1)

    def log_p(x):
        return -0.5 * (x * x).sum(-1)
    temps = tempering.ladder(3)
    kernel = tempering.build(log_p, temps, 0.3, 5)
    xs = torch.randn(2, 3, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    a, b = kernel.init(xs), tempering.init(xs, log_p, temps)
    ga, gb = torch.Generator().manual_seed(4), torch.Generator().manual_seed(4)
    for _ in range(3):
        a, _ = kernel.step(a, ga)
        b, _ = tempering.step(b, gb, log_p, 0.3, 5)
    assert torch.equal(a.position, b.position)
    with pytest.raises(ValueError, match="temperatures"):
        tempering.build(log_p, torch.tensor([1.0, -2.0]), 0.3)


def test_chains_that_do_not_fit_the_device_are_one_clear_error(monkeypatch):
    from inference.mcmc import hmc

    x = torch.zeros(1000, 10, dtype=torch.float64)

    def oom(position):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 40.00 GiB")
    with pytest.raises(ValueError, match="1000 chains do not fit in cpu memory.*fewer chains"):
        hmc.init(x, oom)
    monkeypatch.setattr(hmc.os, "sysconf", lambda name: 1)        # one free byte
    with pytest.raises(ValueError, match="1000 chains of dimension 10 need about .* fewer chains"):
        hmc.build(lambda p: -(p * p).sum(-1), 0.1).init(x)


@pytest.mark.slow
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_compiled_hmc_gives_the_eager_draws(device):
    """hmc.build(compile=True): one torch.compile'd transition, the same draws as the eager kernel for the same
    generator (to floating-point tolerance), with either kinetic energy (slow: compiling takes tens of seconds).
    Every kept draw is compared: on CUDA the transition may be a replayed CUDA graph, whose outputs the next replay
    would overwrite if they were not copied out."""
    scales = torch.linspace(0.5, 1.5, 5, dtype=torch.float64, device=device)

    def log_p(x):
        return -0.5 * ((x / scales) ** 2).sum(-1)
    x0 = torch.randn(8, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0)).to(device)
    for kin in (None, kinetic.RelativisticKinetic(1.0, 2.0)):
        eager, compiled = (hmc.build(log_p, 0.3, 7, kinetic=kin, compile=c) for c in (False, True))
        _, xa, ia = hmc.sample(eager.step, eager.init(x0), 10, torch.Generator(device).manual_seed(1))
        _, xb, ib = hmc.sample(compiled.step, compiled.init(x0), 10, torch.Generator(device).manual_seed(1))
        assert xb.device.type == device and torch.allclose(xa, xb, atol=1e-10)
        assert torch.equal(ia["is_accepted"], ib["is_accepted"]) and 0 < float(ia["is_accepted"].float().mean())


def test_a_density_that_cannot_be_compiled_is_one_clear_error():
    def through_python(x):                        # leaves torch: dynamo cannot trace it into one graph
        return torch.tensor([-0.5 * sum(v * v for v in row) for row in x.tolist()]) + 0.0 * x.sum(-1)
    kernel = hmc.build(through_python, 0.1, 3, compile=True)
    state = kernel.init(torch.zeros(4, 2, dtype=torch.float64))
    with pytest.raises(ValueError, match="cannot be compiled into one graph.*compile=False"):
        kernel.step(state, gen())


@pytest.mark.slow
@pytest.mark.parametrize("method", sgmcmc.METHODS)
def test_compiled_sgmcmc_gives_the_eager_draws(method):
    """sgmcmc.build(compile=True): the update compiled, the noise and the minibatch gradient drawn before it as in
    the eager kernel, so the same draws for the same generator (slow: compiling)."""
    data = torch.randn(50, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) + 1.0

    def minibatch_grad(x, generator):              # N(mean of the data, I/N) posterior, 10 of 50 points per step
        batch = data[torch.randint(0, 50, (10,), generator=generator)]
        return -(x - batch.mean(0)) * 50
    x0 = torch.zeros(6, 3, dtype=torch.float64)
    eager, compiled = (sgmcmc.build(minibatch_grad, 1e-3, method, compile=c) for c in (False, True))
    ga, gb = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    a, b = eager.init(x0, ga), compiled.init(x0, gb)
    for _ in range(20):
        a, ia = eager.step(a, ga)
        b, ib = compiled.step(b, gb)
    assert torch.allclose(a.position, b.position, atol=1e-10) and torch.allclose(a.thermostat, b.thermostat)
    assert torch.allclose(ia.kinetic_energy, ib.kinetic_energy) and not bool(a.position.eq(0).all())


@pytest.mark.slow
def test_compiled_tempering_gives_the_eager_draws():
    """tempering.build(compile=True): each rung's trajectory on its tempered target compiled, the swaps eager; the
    eager kernel's draws and swaps for the same generator (slow: compiling)."""
    def logp(x):                                     # two modes, so rungs swap
        return torch.logsumexp(torch.stack([-0.5 * ((x - 2) ** 2).sum(-1), -0.5 * ((x + 2) ** 2).sum(-1)]), 0)
    temps = tempering.ladder(4)
    x0 = torch.randn(5, 4, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    eager, compiled = (tempering.build(logp, temps, 0.3 * temps.sqrt(), 5, compile=c) for c in (False, True))
    a, b = eager.init(x0), compiled.init(x0)
    ga, gb = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    swapped = False
    for _ in range(10):
        a, ia = eager.step(a, ga)
        b, ib = compiled.step(b, gb)
        assert torch.allclose(a.position, b.position, atol=1e-10) and torch.allclose(a.log_density, b.log_density)
        assert torch.equal(ia.swap_accepted, ib.swap_accepted)
        swapped |= bool(ia.swap_accepted.any())
    assert swapped
