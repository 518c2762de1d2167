"""Tests for inference.vi: VR/IWAE/ELBO identities, the exact 2-D VR check, gradient estimators."""
import math

import pytest
import torch
from torch.distributions import Independent, Normal

from inference.vi import (RunningBaseline, elbo, iwae_bound, kl_term, minibatch_kl_weights, reparam_surrogate,
                          score_function_surrogate, vr_bound, vr_surrogate, vr_weights)

pytestmark = pytest.mark.usefixtures("float64")



def _log_w(K=7, B=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(K, B, generator=g) * 2.0


def test_vr_special_cases():
    lw = _log_w()
    assert torch.allclose(vr_bound(lw, 1.0), lw.mean(0))
    assert torch.allclose(vr_bound(lw, 0.0), torch.logsumexp(lw, 0) - math.log(7))
    assert torch.allclose(iwae_bound(lw), vr_bound(lw, 0.0))
    assert torch.allclose(vr_bound(lw, -math.inf), lw.max(0).values)
    assert torch.allclose(vr_bound(lw, math.inf), lw.min(0).values)
    # continuity at alpha -> 1 and alpha -> -inf
    assert torch.allclose(vr_bound(lw, 1.0 - 1e-6), lw.mean(0), atol=1e-4)
    assert torch.allclose(vr_bound(lw, -1e4), lw.max(0).values, atol=1e-3)


def test_vr_monotone_non_increasing_in_alpha():
    lw = _log_w(K=20, B=5)
    alphas = [-math.inf, -10.0, -1.0, 0.0, 0.3, 0.999, 1.0, 2.0, 10.0, math.inf]
    vals = torch.stack([vr_bound(lw, a) for a in alphas])
    assert (vals[1:] <= vals[:-1] + 1e-12).all()


def test_vr_weights():
    lw = _log_w()
    assert torch.allclose(vr_weights(lw, 1.0), torch.full_like(lw, 1 / 7))
    w = vr_weights(lw, 0.5)
    assert torch.allclose(w, torch.softmax(0.5 * lw, 0)) and torch.allclose(w.sum(0), torch.ones(3))
    onehot = vr_weights(lw, -math.inf)
    assert torch.equal(onehot.argmax(0), lw.argmax(0)) and torch.equal(onehot.sum(0), torch.ones(3))


def test_vr_full_gradient_is_weighted_sum():
    """(4.6): grad of the bound = sum_k w_k grad log w_k with w = softmax((1-alpha) log w)."""
    phi = torch.tensor([0.3, -0.2], requires_grad=True)
    eps = torch.randn(6, 2, generator=torch.Generator().manual_seed(1))
    lw = -(((phi + eps) ** 2).sum(-1)) + (phi * eps).sum(-1)
    for alpha in [-2.0, 0.0, 0.5, 3.0]:
        g_full, = torch.autograd.grad(vr_bound(lw, alpha), phi, retain_graph=True)
        per = torch.stack([torch.autograd.grad(lw[k], phi, retain_graph=True)[0] for k in range(6)])
        w = vr_weights(lw.detach(), alpha)
        assert torch.allclose(g_full, (w[:, None] * per).sum(0))


def test_vr_sample_estimator_unbiased_and_max():
    """Algorithm 9: averaging single-sample gradients over the index distribution gives the full gradient."""
    g = torch.Generator().manual_seed(3)
    phi = torch.tensor([0.5], requires_grad=True)
    eps = torch.randn(5, 1, generator=g)
    lw = (-(phi + eps) ** 2 * 0.5 + 2 * eps * phi).squeeze(-1)
    full, = torch.autograd.grad(vr_bound(lw, 0.5), phi, retain_graph=True)
    n = 20000
    surr = vr_surrogate(lw.unsqueeze(-1).expand(5, n), 0.5, "sample", generator=g)
    est, = torch.autograd.grad(surr.mean(), phi, retain_graph=True)
    assert torch.allclose(est, full, rtol=0.03)
    mx, = torch.autograd.grad(vr_surrogate(lw, -math.inf, "sample"), phi, retain_graph=True)
    k = lw.argmax()
    ref, = torch.autograd.grad(lw[k], phi)
    assert torch.allclose(mx, ref)


def test_exact_2d_vr_check():
    """p = N(0, I), q = N([1,1], I): L_alpha = -alpha; K = 1 gives -1 for every alpha; large K -> -alpha
    from below for alpha < 1 and from above for alpha > 1 (Thm 4.2).  4000 repetitions, stated tolerances."""
    g = torch.Generator().manual_seed(0)
    p = Independent(Normal(torch.zeros(2), torch.ones(2)), 1)
    q = Independent(Normal(torch.ones(2), torch.ones(2)), 1)
    reps = 4000

    def mc(alpha, K):
        z = torch.ones(2) + torch.randn(K, reps, 2, generator=g)
        return vr_bound(p.log_prob(z) - q.log_prob(z), alpha).mean().item()

    for alpha in [-1.0, 0.0, 0.5, 2.0]:
        assert abs(mc(alpha, 1) + 1.0) < 0.06          # K = 1: E[log w] = -KL[q||p] = -1
    e5, e200 = mc(0.5, 5), mc(0.5, 200)
    assert -1.0 < e5 < e200 < -0.5 + 1e-2 and abs(e200 + 0.5) < 0.05
    e5, e200 = mc(2.0, 5), mc(2.0, 200)
    assert -2.0 - 0.05 < e200 < e5 < -1.0 and abs(e200 + 2.0) < 0.15


def test_elbo_identity_conjugate_gaussian():
    """z ~ N(0,1), x|z ~ N(z,1): ELBO + KL[q||posterior] = log p(x); equality at q = posterior."""
    x = torch.tensor(1.3)
    prior = Normal(0.0, 1.0)
    post = Normal(x / 2, math.sqrt(0.5))
    log_px = Normal(0.0, math.sqrt(2.0)).log_prob(x)
    q = Normal(torch.tensor(0.2), torch.tensor(0.8))
    g = torch.Generator().manual_seed(0)
    z = q.loc + q.scale * torch.randn(200_000, generator=g)
    # analytic ELBO: E_q[log N(x; z, 1)] = log N(x; m, 1) - s^2/2
    exact = Normal(q.loc, 1.0).log_prob(x) - q.scale ** 2 / 2 - kl_term(q, prior)
    assert torch.allclose(exact + kl_term(q, post), log_px)
    mc = elbo(Normal(z, 1.0).log_prob(x), q, prior)
    assert abs(mc - exact) < 5e-3
    at_post = Normal(post.loc, 1.0).log_prob(x) - post.scale ** 2 / 2 - kl_term(post, prior)
    assert torch.allclose(at_post, log_px)          # the bound is tight at the exact posterior


def test_kl_term_monte_carlo_fallback():
    from torch.distributions import Categorical, MixtureSameFamily
    q = Normal(torch.tensor(0.3), torch.tensor(0.5))
    mix = MixtureSameFamily(Categorical(torch.tensor([0.5, 0.5])), Normal(torch.zeros(2), torch.tensor([1.0, 0.1])))
    with pytest.raises(ValueError, match="Monte Carlo"):
        kl_term(q, mix)
    z = q.sample((400_000,))
    exact_like = kl_term(q, Normal(0.0, 1.0))
    assert kl_term(q, Normal(0.0, 1.0), z) == exact_like  # analytic KL used whenever torch has it
    est = kl_term(q, mix, z)
    ref = (q.log_prob(z) - mix.log_prob(z)).mean()
    assert torch.allclose(est, ref)


def test_reparam_vs_score_function_gradients():
    """grad_(mu, sigma) E[z^2] = (2 mu, 2 sigma); both estimators unbiased; reparam >= 10x lower variance;
    the leave-one-out baseline lowers the score-function variance."""
    g = torch.Generator().manual_seed(0)
    mu0, s0, K, reps = 1.0, 0.5, 100, 200
    grads = {"reparam": [], "score": [], "score_nobase": []}
    for _ in range(reps):
        mu = torch.tensor(mu0, requires_grad=True)
        s = torch.tensor(s0, requires_grad=True)
        eps = torch.randn(K, generator=g)
        z = mu + s * eps
        grads["reparam"].append(torch.stack(torch.autograd.grad(reparam_surrogate(z ** 2), (mu, s))))
        zd = z.detach()
        lq = Normal(mu, s).log_prob(zd)
        grads["score"].append(torch.stack(torch.autograd.grad(score_function_surrogate(zd ** 2, lq), (mu, s))))
        lq = Normal(mu, s).log_prob(zd)
        grads["score_nobase"].append(torch.stack(torch.autograd.grad(
            score_function_surrogate(zd ** 2, lq, baseline=None), (mu, s))))
    truth = torch.tensor([2 * mu0, 2 * s0])
    st = {k: torch.stack(v) for k, v in grads.items()}
    for k, v in st.items():
        se = v.std(0) / math.sqrt(reps)
        assert ((v.mean(0) - truth).abs() < 4 * se + 1e-3).all(), k
    assert (st["score_nobase"].var(0) > 10 * st["reparam"].var(0)).all()
    assert (st["score"].var(0) > 2 * st["reparam"].var(0)).all()
    assert (st["score_nobase"].var(0) > st["score"].var(0)).all()


def test_running_baseline():
    b = RunningBaseline(0.5)
    assert b.update(torch.tensor([2.0, 4.0])) == 0.0
    assert b.update(torch.tensor([0.0])) == 3.0
    assert float(b.value) == 1.5


def test_minibatch_kl_weights():
    for M in [1, 2, 7, 1000]:
        for scheme in ["uniform", "blundell"]:
            w = minibatch_kl_weights(M, scheme)
            assert torch.isfinite(w).all() and abs(w.sum().item() - 1.0) < 1e-12
    w = minibatch_kl_weights(5, "blundell")
    assert torch.allclose(w, torch.tensor([16, 8, 4, 2, 1]) / 31.0)
    assert (w[1:] < w[:-1]).all()


def test_bad_inputs():
    with pytest.raises(ValueError, match="sample dimension"):
        vr_bound(torch.tensor(1.0), 0.5)
    with pytest.raises(ValueError, match="NaN"):
        vr_bound(torch.tensor([0.0, float("nan")]), 0.5)
    with pytest.raises(ValueError, match="alpha"):
        vr_bound(torch.zeros(3), float("nan"))
    with pytest.raises(ValueError, match="estimator"):
        vr_surrogate(torch.zeros(3), 0.5, "nope")
    with pytest.raises(ValueError, match="K >= 2"):
        score_function_surrogate(torch.zeros(1), torch.zeros(1))
    with pytest.raises(ValueError, match="num_batches"):
        minibatch_kl_weights(0)


def test_vr_score_function_surrogate_is_unbiased_for_discrete_latents():
    """Categorical q(z) over 3 values, p(x, z) fixed table, K = 2: the exact gradient of E[L_alpha,K]
    (by enumerating all 9 sample pairs) equals the mean of the (B.24) leave-one-out estimator."""
    import itertools
    from inference.vi import vr_score_function_surrogate
    log_p = torch.tensor([-1.0, -2.5, -0.3])
    for alpha in [0.5, 0.0, -1.0]:
        logits = torch.tensor([0.2, -0.4, 0.1], requires_grad=True)
        lq = torch.log_softmax(logits, 0)
        exact = 0.0
        for i, j in itertools.product(range(3), repeat=2):
            z = torch.tensor([i, j])
            exact = exact + lq[z].sum().exp() * vr_bound(log_p[z] - lq[z], alpha)
        g_exact, = torch.autograd.grad(exact, logits)
        gen = torch.Generator().manual_seed(0)
        n = 40000
        z = torch.multinomial(lq.detach().exp(), 2 * n, replacement=True, generator=gen).reshape(2, n)
        lq = torch.log_softmax(logits, 0)
        surr = vr_score_function_surrogate(log_p[z] - lq[z], lq[z], alpha)
        assert torch.allclose(surr.detach(), vr_bound(log_p[z] - lq[z].detach(), alpha))
        g_est, = torch.autograd.grad(surr.mean(), logits)
        assert torch.allclose(g_est, g_exact, atol=0.02), (alpha, g_est, g_exact)
    with pytest.raises(ValueError, match="K >= 2"):
        vr_score_function_surrogate(torch.zeros(1, 3), torch.zeros(1, 3), 0.5)
