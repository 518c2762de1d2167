"""Tests for inference.layers: BBB, NoisyLinear, ensembles, UCB, MNF and the Bayesian hypernetwork."""
import math

import pytest
import torch
import torch.nn.functional as F
from scipy import stats
from torch import nn

from inference.layers import (BayesianHypernetMLP, BayesLinear, Ensemble, GaussianPrior, MNFLinear, NoisyLinear,
                              ScaleMixturePrior, bootstrap_mask, kl_loss, masked_ensemble_loss, reset_noise,
                              ucb_action)

pytestmark = pytest.mark.usefixtures("float64")


# ---------------------------------------------------------------- Bayes by Backprop
def test_bbb_hand_gradients_equal_autograd():
    """Proposition 1 with w = mu + softplus(rho) eps: Delta_mu = df/dw + df/dmu,
    Delta_rho = df/dw * eps / (1 + exp(-rho)) + df/drho, f = log q(w) - log p(w) - log p(D|w)."""
    torch.manual_seed(0)
    layer = BayesLinear(3, 2, prior=ScaleMixturePrior(0.5, 1.0, 0.1), local_reparam=False, bias=False)
    with torch.no_grad():
        layer.weight_rho.add_(torch.randn_like(layer.weight_rho))
    x, y = torch.randn(10, 3), torch.randn(10, 2)
    eps = torch.randn(2, 3)
    prior = layer.prior()

    def f(w, mu, rho):
        q = torch.distributions.Normal(mu, F.softplus(rho))
        return (q.log_prob(w) - prior.log_prob(w)).sum() + 0.5 * ((x @ w.T - y) ** 2).sum()

    mu, rho = layer.weight_mu, layer.weight_rho
    w = mu + F.softplus(rho) * eps
    g_mu, g_rho = torch.autograd.grad(f(w, mu, rho), (mu, rho))
    w_leaf = w.detach().requires_grad_()
    mu_leaf, rho_leaf = mu.detach().requires_grad_(), rho.detach().requires_grad_()
    df_dw, df_dmu, df_drho = torch.autograd.grad(f(w_leaf, mu_leaf, rho_leaf), (w_leaf, mu_leaf, rho_leaf))
    assert torch.allclose(g_mu, df_dw + df_dmu, atol=1e-12)
    assert torch.allclose(g_rho, df_dw * eps / (1 + torch.exp(-rho.detach())) + df_drho, atol=1e-12)


def test_local_reparameterisation_matches_sampled_weights_in_distribution():
    torch.manual_seed(0)
    layer = BayesLinear(4, 3)
    with torch.no_grad():
        layer.weight_rho.fill_(-1.0)
        layer.bias_rho.fill_(-2.0)
    x = torch.randn(1, 4).expand(4000, 4)
    local = layer(x).detach()
    ws = layer.sample_weights(4000, generator=torch.Generator().manual_seed(1))
    sampled = BayesLinear.forward_sampled(x[:1], ws).squeeze(1).detach()
    for j in range(3):
        assert stats.ks_2samp(local[:, j].numpy(), sampled[:, j].numpy()).pvalue > 0.01
    # exact moments of the local path
    sig = F.softplus(layer.weight_rho)
    mean = F.linear(x[:1], layer.weight_mu, layer.bias_mu)
    var = F.linear(x[:1] ** 2, sig ** 2, F.softplus(layer.bias_rho) ** 2)
    assert torch.allclose(local.mean(0), mean[0], atol=float(4 * (var[0] / 4000).sqrt().max().detach()))
    assert torch.allclose(local.var(0), var[0], rtol=0.1)


def test_kl_analytic_and_monte_carlo():
    torch.manual_seed(0)
    lam = 4.0                                          # prior precision: N(0, 1/lam)
    layer = BayesLinear(3, 2, prior=GaussianPrior(lam ** -0.5))
    mus = torch.cat([layer.weight_mu.flatten(), layer.bias_mu])
    sig = F.softplus(torch.cat([layer.weight_rho.flatten(), layer.bias_rho]))
    closed = 0.5 * (lam * mus ** 2 - 1 + lam * sig ** 2 - math.log(lam) - 2 * sig.log()).sum()   # (2.43)
    assert torch.allclose(layer.kl(), closed)
    # log q - log p averaged over weight draws is the Monte Carlo KL
    ws = layer.sample_weights(20000, generator=torch.Generator().manual_seed(0))
    est = layer.log_ratio(ws)
    assert abs(est.mean() - closed) < 4 * est.std() / math.sqrt(20000)
    # scale mixture: Monte Carlo KL is unbiased for E[log q - log p]
    mix = BayesLinear(3, 2, prior=ScaleMixturePrior(0.25, 1.0, 0.05))
    ref = mix.log_ratio(mix.sample_weights(20000, generator=torch.Generator().manual_seed(2)))
    kls = torch.stack([mix.kl(50) for _ in range(40)]).detach()
    assert abs(kls.mean() - ref.mean()) < 4 * kls.std() / math.sqrt(40) + 4 * ref.std() / math.sqrt(20000)


def test_scale_mixture_prior_density():
    prior = ScaleMixturePrior(0.3, 2.0, 0.1)()
    w = torch.linspace(-20, 20, 200001)
    dens = prior.log_prob(w).exp()
    assert abs(dens.sum() * (w[1] - w[0]) - 1) < 1e-6
    ref = 0.3 * torch.distributions.Normal(0, 2.0).log_prob(w).exp() + 0.7 * torch.distributions.Normal(0, 0.1).log_prob(w).exp()
    assert torch.allclose(dens, ref)


def test_bayesian_linear_regression_recovers_mean_field_optimum():
    """y = X w + N(0, s^2), prior N(0, 1): the mean-field VI optimum has mean = posterior mean and
    variance 1 / Lambda_ii (seed 001, Sec. 2.2); with an orthogonal design this is the exact posterior."""
    g = torch.Generator().manual_seed(0)
    n, s = 40, 0.5
    X = torch.linalg.qr(torch.randn(n, 2, generator=g))[0] * math.sqrt(n / 4)   # X^T X = (n/4) I
    y = X @ torch.tensor([1.0, -0.5]) + s * torch.randn(n, generator=g)
    Lam = torch.eye(2) + X.T @ X / s ** 2
    post_mean = torch.linalg.solve(Lam, X.T @ y / s ** 2)
    post_std = torch.linalg.inv(Lam).diagonal().sqrt()
    torch.manual_seed(0)
    layer = BayesLinear(2, 1, prior=GaussianPrior(1.0), bias=False, init_sigma=0.1)
    opt = torch.optim.Adam(layer.parameters(), lr=0.02)
    for step in range(1500):
        opt.zero_grad()
        out = layer(X.unsqueeze(0).expand(16, n, 2)).squeeze(-1)        # 16 draws per step
        nll = 0.5 * ((out - y) ** 2).sum(-1).mean() / s ** 2
        (nll + layer.kl()).backward()
        opt.step()
    q_std = F.softplus(layer.weight_rho.detach()[0])
    assert torch.allclose(layer.weight_mu.detach()[0], post_mean, atol=0.02)
    assert torch.allclose(q_std, post_std, rtol=0.1)


def test_bad_layer_inputs():
    with pytest.raises(ValueError, match="0 < pi < 1"):
        ScaleMixturePrior(1.5)
    with pytest.raises(ValueError, match="expected input"):
        BayesLinear(3, 2)(torch.randn(4, 5))
    with pytest.raises(ValueError, match="features"):
        NoisyLinear(0, 2)


# ---------------------------------------------------------------- NoisyLinear
@pytest.mark.parametrize("factorised", [True, False])
def test_noisy_linear_noise_changes_only_on_reset(factorised):
    torch.manual_seed(0)
    layer = NoisyLinear(5, 3, factorised=factorised)
    x = torch.randn(8, 5)
    a, b = layer(x), layer(x)
    assert torch.equal(a, b)
    layer.reset_noise()
    assert not torch.allclose(layer(x), a)
    # explicit weight formula of (24)
    ew, eb = layer.noise()
    w = layer.weight_mu + layer.weight_sigma * ew
    assert torch.allclose(layer(x), F.linear(x, w, layer.bias_mu + layer.bias_sigma * eb))
    # eval: the means, deterministic, unaffected by resets
    layer.eval()
    e1 = layer(x)
    layer.reset_noise()
    assert torch.equal(e1, layer(x)) and torch.allclose(e1, F.linear(x, layer.weight_mu, layer.bias_mu))


def test_noisy_linear_factorised_structure_and_init():
    torch.manual_seed(0)
    layer = NoisyLinear(16, 4)
    assert torch.allclose(layer.weight_sigma, torch.full((4, 16), 0.5 / 4)) and (layer.weight_mu.abs() <= 0.25).all()
    ew, eb = layer.noise()
    assert torch.linalg.matrix_rank(ew) == 1 and torch.equal(eb, layer.eps_out)
    gen = torch.Generator().manual_seed(3)
    raw = torch.randn(16, generator=gen)
    layer.reset_noise(torch.Generator().manual_seed(3))
    assert torch.allclose(layer.eps_in, raw.sign() * raw.abs().sqrt())          # f(x) = sgn(x) sqrt|x|
    ind = NoisyLinear(12, 4, factorised=False)
    assert torch.allclose(ind.weight_sigma, torch.full((4, 12), 0.017)) and (ind.weight_mu.abs() <= 0.5).all()
    layer(torch.randn(3, 16)).sum().backward()
    assert layer.weight_sigma.grad.abs().sum() > 0 and layer.bias_sigma.grad.abs().sum() > 0
    net = nn.Sequential(NoisyLinear(3, 3), nn.ReLU(), NoisyLinear(3, 2))
    before = [m.eps_in.clone() for m in net if isinstance(m, NoisyLinear)]
    reset_noise(net)
    assert all(not torch.equal(b, m.eps_in) for b, m in zip(before, [m for m in net if isinstance(m, NoisyLinear)]))


# ---------------------------------------------------------------- ensembles and UCB
def test_bootstrap_mask_rate():
    for p in [0.1, 0.5, 0.9]:
        m = bootstrap_mask(20000, 5, p, generator=torch.Generator().manual_seed(0))
        assert m.shape == (20000, 5) and set(m.unique().tolist()) <= {0.0, 1.0}
        assert (m.mean(0) - p).abs().max() < 4 * math.sqrt(p * (1 - p) / 20000)
    with pytest.raises(ValueError, match="bootstrap probability"):
        bootstrap_mask(3, 2, 0.0)


def test_ensemble_randomised_priors_are_frozen():
    torch.manual_seed(0)
    ens = Ensemble(lambda: nn.Linear(3, 2), size=4, prior_scale=3.0)
    x = torch.randn(6, 3)
    out = ens(x)
    assert out.shape == (4, 6, 2)
    assert torch.allclose(out[1], ens.members[1](x) + 3.0 * ens.priors[1](x))
    prior_state = [p.clone() for p in ens.priors.parameters()]
    assert all(not p.requires_grad for p in ens.priors.parameters())
    opt = torch.optim.SGD(ens.parameters(), lr=0.1)
    mask = bootstrap_mask(6, 4, 0.5, generator=torch.Generator().manual_seed(1))
    loss = masked_ensemble_loss((out ** 2).sum(-1), mask)
    loss.backward()
    opt.step()
    assert all(torch.equal(a, b) for a, b in zip(prior_state, ens.priors.parameters()))
    # members whose mask is all zero get no gradient
    for k in range(4):
        has_grad = ens.members[k].weight.grad.abs().sum() > 0
        assert bool(has_grad) == bool(mask[:, k].sum() > 0)
    assert not torch.allclose(ens.members[0].weight, ens.members[1].weight)
    idx = [ens.sample_member(torch.Generator().manual_seed(s)) for s in range(400)]
    assert set(idx) == {0, 1, 2, 3}


def test_ucb_picks_argmax_mean_plus_lambda_std():
    g = torch.Generator().manual_seed(0)
    q = torch.randn(7, 5, 4, generator=g)
    for lam in [0.0, 0.5, 3.0]:
        score = q.mean(0) + lam * q.std(0, correction=0)
        assert torch.equal(ucb_action(q, lam), score.argmax(-1))
    assert torch.equal(ucb_action(q, 0.0), q.mean(0).argmax(-1))
    tie = torch.tensor([[1.0, 0.0], [1.0, 2.0]])      # equal means 1.0; action 1 has the larger spread
    assert ucb_action(tie, 0.1).item() == 1
    with pytest.raises(ValueError, match="K, ..., A"):
        ucb_action(torch.zeros(3), 1.0)


# ---------------------------------------------------------------- MNF and hypernetwork
def _fit(net, steps=150, n=64):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 2, generator=g)
    y = x @ torch.tensor([[1.5], [-1.0]]) + 0.1 * torch.randn(n, 1, generator=g)
    opt = torch.optim.Adam(net.parameters(), lr=0.02)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = ((net(x) - y) ** 2).mean() + kl_loss(net) / (100 * n)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_mnf_layer_learns_and_kl_is_finite():
    torch.manual_seed(0)
    layer = MNFLinear(2, 1)
    kl = layer.kl(4)
    assert torch.isfinite(kl)
    kl.backward()
    for name in ["weight_mu", "weight_rho", "r_c", "r_b1", "r_b2"]:
        assert getattr(layer, name).grad is not None
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in layer.qz.parameters())
    losses = _fit(layer)
    assert losses[-1] < 0.1 * losses[0]


def test_hypernet_weight_norm_and_learning():
    torch.manual_seed(0)
    net = BayesianHypernetMLP([2, 8, 1])
    g = torch.randn(9)
    ws = net.weights(g)
    assert torch.allclose(ws[0].norm(dim=1), g[:8].abs()) and torch.allclose(ws[1].norm(dim=1), g[8:].abs())
    assert torch.isfinite(net.kl(3))
    losses = _fit(net)
    assert losses[-1] < 0.2 * losses[0]


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_layers_follow_module_device(device):
    x = torch.randn(4, 3, device=device)
    mods = [BayesLinear(3, 2, prior=ScaleMixturePrior()), BayesLinear(3, 2, local_reparam=False), NoisyLinear(3, 2),
            NoisyLinear(3, 2, factorised=False), MNFLinear(3, 2), BayesianHypernetMLP([3, 4, 2]),
            Ensemble(lambda: nn.Linear(3, 2), 3, prior_scale=1.0)]
    for m in mods:
        m = m.to(device)
        y = m(x)
        assert y.device.type == device
        if hasattr(m, "kl"):
            assert torch.isfinite(m.kl()) and m.kl().device.type == device
        if isinstance(m, NoisyLinear):
            m.reset_noise()
    assert ucb_action(mods[-1].to(device)(x), 1.0).device.type == device
    assert bootstrap_mask(5, 3, device=device).device.type == device
