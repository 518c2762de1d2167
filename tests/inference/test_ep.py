"""EP, power EP, ADF, SEP / AEP and DSEP for probit and logistic GLMs (inference/ep/glm.py): exact identities and
the seed 001 properties that can be checked deterministically (moment matching at EP's fixed point, ADF's collapse,
state sizes)."""
import pytest
import torch

from inference.ep import glm


def probit_problem(n=60, d=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, dtype=torch.float64, generator=g)
    theta = torch.randn(d, dtype=torch.float64, generator=g)
    y = torch.where(torch.rand(n, dtype=torch.float64, generator=g) < torch.special.ndtr(X @ theta), 1.0, -1.0)
    return X, y


def test_probit_tilted_moments_closed_form_equals_quadrature():
    m = torch.linspace(-3, 3, 13, dtype=torch.float64)
    v = torch.linspace(0.1, 4.0, 13, dtype=torch.float64)
    y = torch.where(torch.arange(13) % 2 == 0, 1.0, -1.0).double()
    closed = glm.tilted_moments("probit", y, m, v)
    quad = glm.tilted_moments("probit", y, m, v, power=1.0 - 1e-12)      # forces the quadrature path
    assert torch.allclose(closed[0], quad[0], atol=1e-6) and torch.allclose(closed[1], quad[1], atol=1e-6)


@pytest.mark.parametrize("likelihood", glm.LIKELIHOODS)
def test_ep_fixed_point_matches_every_tilted_distribution(likelihood):
    """At EP's fixed point each tilted distribution (cavity x likelihood) has q's moments along its direction
    (2.20): proj[p_n] = q for every site n."""
    X, y = probit_problem()
    r = glm.ep(X, y, likelihood=likelihood, passes=40, generator=torch.Generator().manual_seed(1))
    tau, nu = r.sites
    m_q, v_q = X @ r.q.mean, ((X @ r.q.cov) * X).sum(-1)
    # the cavity's marginal along x_n: remove the site in one dimension
    v_cav = 1.0 / (1.0 / v_q - tau)
    m_cav = v_cav * (m_q / v_q - nu)
    m_t, v_t = glm.tilted_moments(likelihood, y, m_cav, v_cav)
    assert torch.allclose(m_t, m_q, atol=1e-7) and torch.allclose(v_t, v_q, atol=1e-7)


def test_adf_collapses_and_ep_does_not():
    X, y = probit_problem(n=200)
    g = torch.Generator().manual_seed(2)
    adf = glm.adf(X, y, passes=8, generator=g)
    ep = glm.ep(X, y, passes=8, generator=g)
    adf_logdet = [float(torch.logdet(c)) for _, c in adf.history]
    ep_logdet = [float(torch.logdet(c)) for _, c in ep.history]
    # pass k counts the data k times: log det shrinks by about D log((k + 1) / k) from pass k to k + 1
    import math
    assert all(b < a - 0.5 * 3 * math.log((k + 2) / (k + 1))
               for k, (a, b) in enumerate(zip(adf_logdet, adf_logdet[1:])))
    assert abs(ep_logdet[-1] - ep_logdet[-2]) < 1e-6
    # after k passes ADF has counted the data about k times: log det falls by ~ D log k
    assert adf_logdet[-1] - ep_logdet[-1] < -3 * 1.5


def test_state_sizes_and_the_averaged_limit():
    X, y = probit_problem(n=400, d=3)
    g = torch.Generator().manual_seed(3)
    ep = glm.ep(X, y, passes=6, generator=g)
    sep = glm.sep(X, y, passes=6, generator=g)
    aep = glm.sep(X, y, passes=40, minibatch=400, generator=g)
    dsep = glm.dsep(X, y, torch.arange(400) % 4, passes=6, generator=g)
    assert ep.state_numbers == 2 * 400 + 3 + 9          # N rank-one sites + q
    assert sep.state_numbers == aep.state_numbers == 3 + 9                # one tied factor, O(D^2)
    assert dsep.state_numbers == 4 * (3 + 9)
    # AEP's fixed point is close to EP's for large N (seed 001 §3.2.1); SEP's is near it too
    for other, tol in ((aep, 0.02), (sep, 0.5), (dsep, 0.5)):      # SEP and DSEP keep stochastic noise
        sd = ep.q.cov.diagonal().sqrt()
        assert ((other.q.mean - ep.q.mean).abs() / sd).max() < tol


def test_power_one_is_ep_and_other_powers_differ():
    X, y = probit_problem(n=20)
    a = glm.ep(X, y, passes=20, generator=torch.Generator().manual_seed(4))
    b = glm.ep(X, y, passes=20, power=1.0, generator=torch.Generator().manual_seed(4))
    c = glm.ep(X, y, passes=20, power=0.3, generator=torch.Generator().manual_seed(4))
    assert torch.equal(a.q.mean, b.q.mean)
    assert not torch.allclose(a.q.cov, c.q.cov, rtol=1e-3)


def test_bad_input_is_one_clear_error():
    X, y = probit_problem(n=10)
    with pytest.raises(ValueError, match="labels must be"):
        glm.ep(X, y * 2)
    with pytest.raises(ValueError, match="NaN"):
        glm.ep(X * float("nan"), y)
    with pytest.raises(ValueError, match="need features"):
        glm.sep(X[:0], y[:0])
    with pytest.raises(ValueError, match="have no data"):
        glm.dsep(X, y, torch.tensor([0] * 5 + [2] * 5))
    with pytest.raises(ValueError, match="likelihood"):
        glm.ep(X, y, likelihood="cauchit")
    with pytest.raises(ValueError, match="minibatch"):
        glm.sep(X, y, minibatch=11)
