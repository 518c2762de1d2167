import math

import pytest
import torch
from torch import nn

from inference import targets
from inference.stein import (RBF, AttentionSampler, MLPSampler, amortised_svgd_loss, amortised_svgd_step,
                             kde_score, ksd, mmd2, score_matching_score, stein_score, svgd_direction,
                             train_amortised_svgd)
from inference.stein import svgd

pytestmark = pytest.mark.usefixtures("float64")

def gen(seed=0):
    return torch.Generator().manual_seed(seed)


# ----------------------------------------------------------------------------- kernel and SVGD direction

def test_median_heuristic_conventions():
    x = torch.tensor([[0.0, 0.0], [3.0, 0.0], [0.0, 4.0]])      # distances 3, 4, 5 -> median 4
    assert RBF("seed002").h(x).item() == pytest.approx(16 / (2 * math.log(4)))
    assert RBF("liu2016").h(x).item() == pytest.approx(16 / math.log(3))
    assert RBF(0.7).h(x).item() == pytest.approx(0.7)
    with pytest.raises(ValueError, match="bandwidth"):
        RBF("nope")


def test_svgd_direction_matches_brute_force_algorithm_3_1():
    x = torch.randn(2, 7, 3, generator=gen())                    # two independent particle sets
    s = torch.randn(2, 7, 3, generator=gen(1))
    kern = RBF("seed002")
    phi = svgd_direction(x, s, kern)
    for b in range(2):
        h = kern.h(x[b]).item()
        for i in range(7):
            acc = torch.zeros(3)
            for j in range(7):
                xj = x[b, j].clone().requires_grad_(True)
                k = torch.exp(-((xj - x[b, i]) ** 2).sum() / h)
                (gk,) = torch.autograd.grad(k, xj)
                acc += k.detach() * s[b, j] + gk
            assert torch.allclose(phi[b, i], acc / 7, atol=1e-12)


def test_svgd_with_one_particle_finds_the_mode():
    # one particle: no repulsion, SVGD is gradient ascent on log p (seed 002 Sec. 3.3) -> the MAP
    mu = torch.tensor([1.0, -2.0])
    prec = torch.tensor([[2.0, 0.6], [0.6, 1.0]])
    logp = lambda x: -0.5 * torch.einsum("...i,ij,...j->...", x - mu, prec, x - mu)
    for opt in ["sgd", "adam"]:
        x = svgd.run(logp, torch.tensor([[4.0, 3.0]]), 600, step_size=0.1, optimizer=opt)
        assert torch.allclose(x, mu[None], atol=1e-4), (opt, x)


def test_svgd_spreads_particles_on_a_gaussian():
    # seed 002 Fig. 3.1: N(0, I), 10 particles, 150 steps, eps = 0.1, Adam
    t = targets.std_normal(2)
    x = svgd.run(t.log_prob, torch.randn(10, 2, generator=gen()) * 0.5 + 3.0, 150, 0.1)
    assert x.mean(0).abs().max() < 0.3
    d = torch.cdist(x, x) + torch.eye(10) * 1e9
    assert d.min() > 0.1                                          # repulsion: no collapse
    assert 0.5 < x.var(0).mean() < 1.5


def test_svgd_covers_both_mog2_modes():
    t = targets.mog2()
    x = svgd.run(t.log_prob, torch.randn(50, 2, generator=gen()) * 2.0, 500, 0.1)
    right = (x[:, 0] > 0).sum().item()
    assert 10 <= right <= 40
    assert ((x[:, 0].abs() - 5).abs() < 1.5).all()


def test_svgd_errors():
    with pytest.raises(ValueError, match="score must match"):
        svgd_direction(torch.zeros(3, 2), torch.zeros(3, 3))
    with pytest.raises(ValueError, match="optimizer"):
        svgd.init(torch.zeros(3, 2), optimizer="rmsprop")


# ----------------------------------------------------------------------------- KSD and MMD

def test_ksd_matches_brute_force_stein_kernel_and_vanishes_at_the_target():
    t = targets.std_normal(2)
    x = t.sample(6, gen())
    s = t.score(x)
    kern = RBF(1.3)
    h = 1.3
    u = torch.zeros(6, 6)
    for i in range(6):
        for j in range(6):
            a = x[i].clone().requires_grad_(True)
            b = x[j].clone().requires_grad_(True)
            k = torch.exp(-((a - b) ** 2).sum() / h)
            (ga,) = torch.autograd.grad(k, a, create_graph=True)
            (gb,) = torch.autograd.grad(k, b, create_graph=True)
            tr = sum(torch.autograd.grad(ga[m], b, retain_graph=True)[0][m] for m in range(2))
            u[i, j] = (s[i] @ s[j]) * k + s[i] @ gb + ga @ s[j] + tr
    assert ksd(x, s, kern, u_statistic=False).item() == pytest.approx(u.mean().item(), rel=1e-10)
    off = (u.sum() - u.diagonal().sum()) / 30
    assert ksd(x, s, kern).item() == pytest.approx(off.item(), rel=1e-10)

    y = t.sample(1000, gen(1))
    near = ksd(y, t.score(y)).item()
    far = ksd(y + 1.0, t.score(y + 1.0)).item()
    assert abs(near) < 0.01 and far > 0.05


def test_mmd_properties():
    t, single = targets.mog2(), targets.isotropic_mixture(torch.tensor([[5.0, 0.0]]), 0.5)
    x, y = t.sample(400, gen()), t.sample(400, gen(1))
    assert mmd2(x, x, unbiased=False).item() == pytest.approx(0.0, abs=1e-12)
    assert mmd2(x, y).item() == pytest.approx(mmd2(y, x).item())
    assert abs(mmd2(x, y).item()) < 0.01
    assert mmd2(x, single.sample(400, gen(2))).item() > 0.05
    # unbiased estimator: averaging over repeats gives ~0 for equal distributions (the V-statistic does not)
    reps = torch.stack([mmd2(t.sample(30, gen(10 + r)), t.sample(30, gen(100 + r))) for r in range(200)])
    assert abs(reps.mean().item()) < 3 * reps.std().item() / math.sqrt(200)
    # brute force
    k = lambda a, b: math.exp(-((a - b) ** 2).sum().item() / (2 * 0.5 ** 2))
    a, b = x[:5], y[:4]
    kxx = sum(k(a[i], a[j]) for i in range(5) for j in range(5) if i != j) / 20
    kyy = sum(k(b[i], b[j]) for i in range(4) for j in range(4) if i != j) / 12
    kxy = sum(k(a[i], b[j]) for i in range(5) for j in range(4)) / 20
    assert mmd2(a, b).item() == pytest.approx(kxx + kyy - 2 * kxy, rel=1e-10)


# ----------------------------------------------------------------------------- score estimators

def _rel_err(est, true):
    return (((est - true) ** 2).sum() / (true ** 2).sum()).item()


@pytest.mark.parametrize("d", [2, 5])
def test_stein_estimator_recovers_a_gaussian_score_and_beats_kde(d):
    errs = {"stein": 0.0, "kde": 0.0, "sm": 0.0}
    for r in range(5):
        x = torch.randn(200, d, generator=gen(r))
        true = -x
        errs["stein"] += _rel_err(stein_score(x, eta=1.0), true) / 5
        errs["kde"] += _rel_err(kde_score(x), true) / 5
        errs["sm"] += _rel_err(score_matching_score(x, eta=1.0), true) / 5
    assert errs["stein"] < 0.25 and errs["sm"] < 0.3
    assert errs["stein"] < errs["kde"]


def test_stein_estimator_needs_a_sensible_eta():
    x = torch.randn(200, 5, generator=gen())
    assert _rel_err(stein_score(x, eta=1.0), -x) < 0.5 * _rel_err(stein_score(x, eta=0.01), -x)


def test_u_statistic_estimator_is_the_v_statistic_with_eta_minus_one_for_rbf():
    # (A.7) removes diag(K) = I for the RBF kernel, so U with eta + 1 equals V with eta
    x = torch.randn(40, 3, generator=gen())
    assert torch.allclose(stein_score(x, eta=1.5, u_statistic=True), stein_score(x, eta=0.5), atol=1e-10)


def test_stein_estimator_satisfies_its_ridge_regression_optimality():
    # (6.8): G minimises ||<grad,K> + K G||^2_F / K^2 + eta/K^2 ||G||^2 -> gradient (K^2 + eta I) G + K <grad,K> = 0
    # for symmetric K this is K (K G + <grad,K>) + eta G = 0, implied by (K + eta I) G = -<grad,K>
    x = torch.randn(30, 2, generator=gen())
    g = stein_score(x, eta=0.5, sigma2=1.0)
    k = torch.exp(-torch.cdist(x, x) ** 2 / 2.0)
    grad_k = x * k.sum(-1, keepdim=True) - k @ x
    assert torch.allclose((k + 0.5 * torch.eye(30)) @ g, -grad_k, atol=1e-10)


# ----------------------------------------------------------------------------- amortised SVGD

def test_amortised_loss_gradient_is_equation_4_3():
    lin = nn.Linear(3, 2)
    z = torch.randn(8, 3, generator=gen())
    x = lin(z)
    score = -x.detach()
    phi = svgd_direction(x.detach(), score)
    amortised_svgd_loss(x, score).backward()
    assert torch.allclose(lin.bias.grad, -phi.sum(0))
    assert torch.allclose(lin.weight.grad, -phi.T @ z)


def test_mlp_sampler_learns_a_shifted_gaussian():
    torch.manual_seed(0)
    mu = torch.tensor([2.0, -1.0])
    sampler = MLPSampler(2, 2).double()
    hist = train_amortised_svgd(sampler, lambda x: -0.5 * ((x - mu) ** 2).sum(-1), 300, batch_size=100,
                                lr=1e-2, generator=gen(), dtype=torch.float64)
    assert all(math.isfinite(h["loss"]) for h in hist)
    with torch.no_grad():
        x = sampler(torch.randn(4000, 2, generator=gen(1)))
    # starts near 0 with a tiny spread; after 300 steps it sits on the target with a spread of the right order
    # (the spread is still growing at this point, hence the loose bounds)
    assert torch.allclose(x.mean(0), mu, atol=0.25)
    assert bool(((torch.cov(x.T).diagonal() > 0.35) & (torch.cov(x.T).diagonal() < 1.3)).all())


def test_attention_sampler_trains_and_supports_context():
    torch.manual_seed(0)
    mu = torch.tensor([1.5, 1.5])
    sampler = AttentionSampler(2, 2, hidden=16, heads=2, num_layers=1).double()
    hist = train_amortised_svgd(sampler, lambda x: -0.5 * ((x - mu) ** 2).sum(-1), 300, batch_size=64,
                                lr=1e-2, generator=gen(), dtype=torch.float64)
    assert all(math.isfinite(h["loss"]) for h in hist)
    sampler.eval()
    with torch.no_grad():
        x = sampler(torch.randn(256, 2, generator=gen(1)))
    assert (x.mean(0) - mu).norm() < 0.5
    # permutation equivariance over the particle set (eval mode: no neighbour dropout)
    z = torch.randn(10, 2, generator=gen(2))
    perm = torch.randperm(10, generator=gen(3))
    with torch.no_grad():
        assert torch.allclose(sampler(z)[perm], sampler(z[perm]), atol=1e-12)
    # batched particle sets with a per-set context (the soft-Q use: one set per state)
    ctx_sampler = MLPSampler(2, 3, context_dim=4).double()
    opt = torch.optim.Adam(ctx_sampler.parameters(), lr=1e-3)
    out = amortised_svgd_step(ctx_sampler, opt, lambda a: -a, torch.randn(5, 16, 2), torch.randn(5, 4))
    assert math.isfinite(out["loss"])
    with pytest.raises(ValueError, match="context"):
        ctx_sampler(torch.randn(5, 16, 2))


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_stein_functions_follow_the_input_device_and_dtype(device):
    x = torch.randn(20, 2, dtype=torch.float32, device=device)
    outs = [svgd_direction(x, -x), stein_score(x), kde_score(x), score_matching_score(x), ksd(x, -x), mmd2(x, x + 1)]
    sampler = MLPSampler(2, 2).to(device=device, dtype=torch.float32)
    opt = torch.optim.Adam(sampler.parameters(), lr=1e-3)
    amortised_svgd_step(sampler, opt, lambda a: -a, torch.randn(16, 2, dtype=torch.float32, device=device))
    outs.append(sampler(torch.randn(4, 2, dtype=torch.float32, device=device)))
    for out in outs:
        assert out.device.type == device and out.dtype == torch.float32
