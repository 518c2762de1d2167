"""Tests for inference.flows: log-dets vs autograd Jacobians, inverses, normalisation, Sylvester conditions."""

import pytest
import torch

from inference.flows import (Coupling, Flow, HouseholderSylvester, OrthogonalSylvester, StandardNormal,
                             SylvesterTransform, bjorck_orthonormalise, householder_product, iaf_flow, planar_flow,
                             radial_flow, sylvester_flow)

pytestmark = pytest.mark.usefixtures("float64")


FACTORIES = {
    "planar": lambda d, c: planar_flow(d, 3, c),
    "radial": lambda d, c: radial_flow(d, 3, c),
    "iaf": lambda d, c: iaf_flow(d, 3, c, hidden=16),
    "o_snf": lambda d, c: sylvester_flow(d, 3, "orthogonal", c, bottleneck=2),
    "h_snf": lambda d, c: sylvester_flow(d, 3, "householder", c, reflections=3),
    "t_snf": lambda d, c: sylvester_flow(d, 3, "triangular", c),
    "coupling": lambda d, c: Flow([Coupling(d, 8, parity=k % 2 == 1) for k in range(3)], StandardNormal(d)),
}


def _make(kind, d=4, context=0, seed=0, scale=0.5):
    torch.manual_seed(seed)
    flow = FACTORIES[kind](d, context)
    with torch.no_grad():                  # move away from the near-identity initialisation
        for name, p in flow.named_parameters():
            if "base" not in name:
                p.add_(scale * torch.randn_like(p))
    return flow


def _chain(transforms, x):
    for t in transforms:
        x = t(x)
    return x


@pytest.mark.parametrize("kind,context", [(k, c) for k in FACTORIES for c in (0, 3) if k != "coupling" or c == 0])
def test_logdet_equals_autograd_jacobian(kind, context):
    flow = _make(kind, context=context)
    c = torch.randn(1, context) if context else None
    dist = flow(c)
    z0 = torch.randn(5, 1, 4) if context else torch.randn(5, 4)
    zk = _chain(dist.transforms, z0)
    lp = dist.log_prob(zk)
    for i in range(5):
        jac = torch.autograd.functional.jacobian(
            lambda v: _chain(flow(c).transforms, v.reshape(z0[i].shape)).reshape(-1), z0[i].reshape(-1))
        _, logabsdet = torch.linalg.slogdet(jac)
        expected = dist.base_dist.log_prob(z0[i]) - logabsdet
        assert torch.allclose(lp[i], expected, atol=1e-9), (kind, lp[i], expected)


@pytest.mark.parametrize("kind", list(FACTORIES))
def test_inverse_round_trip_and_log_prob_of_fresh_points(kind):
    flow = _make(kind, seed=1)
    dist = flow()
    z = dist.rsample((64,))
    lp_cached = dist.log_prob(z)
    lp_inverted = dist.log_prob(z.clone())      # a new tensor: forces the inverse path
    assert torch.allclose(lp_cached, lp_inverted, atol=1e-8)
    for t in dist.transforms:
        x = torch.randn(32, 4)
        assert torch.allclose(t.inv(t(x).clone()), x, atol=1e-8)


@pytest.mark.parametrize("kind", ["planar", "radial", "iaf", "o_snf", "h_snf", "t_snf", "coupling"])
def test_density_integrates_to_one_in_2d(kind):
    """Riemann sum of exp(log_prob) over [-9, 9]^2 (inverse path for every grid point) is 1 within 1e-2."""
    two_d = {"o_snf": lambda: sylvester_flow(2, 3, "orthogonal", bottleneck=1),
             "h_snf": lambda: sylvester_flow(2, 3, "householder", reflections=2)}
    torch.manual_seed(2)
    flow = two_d[kind]() if kind in two_d else FACTORIES[kind](2, 0)
    with torch.no_grad():
        for n, p in flow.named_parameters():
            if "base" not in n:
                p.add_(0.3 * torch.randn_like(p))
    g = torch.linspace(-9, 9, 361)
    xx, yy = torch.meshgrid(g, g, indexing="ij")
    pts = torch.stack([xx, yy], -1).reshape(-1, 2)
    with torch.no_grad():
        dens = flow().log_prob(pts).exp()
    h = (g[1] - g[0]) ** 2
    assert abs(dens.sum().item() * h - 1.0) < 1e-2


def test_bjorck_converges_and_orthonormalises():
    torch.manual_seed(0)
    q0 = torch.randn(32, 16, 8)
    q, iters, res = bjorck_orthonormalise(q0, max_iters=30, tol=1e-6)
    assert iters <= 30 and res <= 1e-6
    eye = torch.eye(8)
    assert torch.allclose(q.transpose(-1, -2) @ q, eye.expand(32, 8, 8), atol=1e-6)
    # the result spans the same column space (Bjorck's iteration is the polar factor)
    proj = q @ q.transpose(-1, -2)
    assert torch.allclose(proj @ q0, q0, atol=1e-5)
    with pytest.raises(ValueError, match="M <= D"):
        bjorck_orthonormalise(torch.randn(3, 5))


def test_householder_uses_factor_two():
    torch.manual_seed(0)
    vs = torch.randn(3, 5)
    q = householder_product(vs)
    assert torch.allclose(q.T @ q, torch.eye(5), atol=1e-12)
    assert torch.allclose(torch.linalg.det(q), torch.tensor(-1.0))          # three reflections
    # the step applies the same Q as the dense matrix
    step = HouseholderSylvester(5, 3)
    with torch.no_grad():
        step.params["v"].copy_(vs)
    t = step()
    dense = SylvesterTransform(lambda z: z @ q, lambda v: v @ q.T, step.params["r"], step.params["r_tilde"],
                               step.params["b"])
    x = torch.randn(7, 5)
    assert torch.allclose(t(x), dense(x), atol=1e-12)
    # amortised path (per-datapoint vectors, reflections applied to vectors) gives the same map
    per_point = step.build({k: v.detach().expand((7,) + v.shape) for k, v in step.params.items()})
    assert torch.allclose(per_point(x), dense(x), atol=1e-12)


def test_sylvester_invertibility_condition_enforced():
    """Extreme raw diagonals of opposite signs: r_mm r~_mm stays in (-1, 1), log-det finite, inverse exact."""
    step = OrthogonalSylvester(4, 3)
    with torch.no_grad():
        step.params["r"].copy_(torch.diag(torch.tensor([20.0, -20.0, 20.0])))
        step.params["r_tilde"].copy_(torch.diag(torch.tensor([-20.0, 20.0, 20.0])))
    t = step()
    assert (t.diag_prod > -1).all() and (t.diag_prod < 1).all()
    x = torch.randn(50, 4) * 3
    y = t(x)
    assert torch.isfinite(t.log_abs_det_jacobian(x, y)).all()
    assert torch.allclose(t.inv(y.clone()), x, atol=1e-7)


def test_planar_and_radial_constraints():
    flow = planar_flow(3, 1)
    with torch.no_grad():
        p = flow.transforms[0].params
        p["w"].copy_(torch.tensor([1.0, 2.0, -1.0]))
        p["u"].copy_(-10 * p["w"])
    t = flow().transforms[0]
    assert (t.u * t.w).sum() > -1
    flow = radial_flow(3, 1)
    with torch.no_grad():
        flow.transforms[0].params["beta_raw"].fill_(-30.0)
    t = flow().transforms[0]
    assert (t.beta >= -t.alpha).all()


@pytest.mark.parametrize("reverse", [False, True])
def test_iaf_is_autoregressive(reverse):
    from inference.flows import IAF
    torch.manual_seed(0)
    step = IAF(5, 16, reverse=reverse)
    with torch.no_grad():
        for p in step.parameters():
            p.add_(torch.randn_like(p))
    t = step()
    jac = torch.autograd.functional.jacobian(t, torch.randn(5))
    if reverse:
        jac = jac.flip(0).flip(1)
    assert torch.equal(jac.triu(1), torch.zeros(5, 5))


def test_amortised_shapes_and_gradients():
    torch.manual_seed(0)
    for kind in ["planar", "radial", "iaf", "o_snf", "h_snf", "t_snf"]:
        flow = FACTORIES[kind](4, 6)
        c = torch.randn(3, 6)
        dist = flow(c)
        z = dist.rsample((5,))
        assert z.shape == (5, 3, 4) and dist.log_prob(z).shape == (5, 3)
        assert not torch.allclose(flow(c[:1]).log_prob(z[:, :1]), flow(c[1:2]).log_prob(z[:, :1]))
        dist.log_prob(z).sum().backward()
        hyper = [p for n, p in flow.named_parameters() if "transforms" in n and "weight" in n]
        assert hyper and all(p.grad is not None and p.grad.abs().sum() > 0 for p in hyper), kind


def test_context_errors():
    flow = planar_flow(2, 1, context=3)
    with pytest.raises(ValueError, match="context"):
        flow()
    with pytest.raises(ValueError, match="context"):
        planar_flow(2, 1)(torch.randn(1, 3))
    with pytest.raises(ValueError, match="kind"):
        sylvester_flow(2, 1, "diagonal")
    with pytest.raises(ValueError, match="M <= D"):
        OrthogonalSylvester(3, 5)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_flows_follow_module_device(device):
    c = torch.randn(3, 5, device=device)
    for kind in ["planar", "radial", "iaf", "o_snf", "h_snf", "t_snf"]:
        flow = FACTORIES[kind](4, 5).to(device)
        d = flow(c)
        z = d.rsample((2,))
        lp = d.log_prob(z.clone())                   # inverse path on the device too
        assert z.device.type == device and lp.shape == (2, 3) and torch.isfinite(lp).all()
        assert torch.allclose(lp, d.log_prob(z), atol=1e-6)



def _log_banana(z):
    return -0.5 * (z[..., 0] ** 2 / 4 + (z[..., 1] - 0.5 * z[..., 0] ** 2 + 1) ** 2 / 0.25)


def _reverse_kl_fit(flow, iters, lr):
    """Adam on E_q[log q - log p~]; returns the final estimate (20000 samples) = KL[q||p] - log Z."""
    torch.manual_seed(0)
    opt = torch.optim.Adam(flow.parameters(), lr=lr)
    for _ in range(iters):
        d = flow()
        z = d.rsample((128,))
        loss = (d.log_prob(z) - _log_banana(z)).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        d = flow()
        z = d.sample((20000,))
        return (d.log_prob(z) - _log_banana(z)).mean().item()


_GAUSSIAN_FIT = -0.98   # best diagonal Gaussian on this target (-0.987 after 300 Adam steps, seed 0)


@pytest.mark.parametrize("kind,steps,iters", [
    ("planar", 4, 300), ("iaf", 4, 300), ("coupling", 4, 300),
    # Sylvester diagonals are tanh-bounded (|r_mm|, |r~_mm| < 1, as in the authors' code), and radial steps
    # are radially symmetric: both need more steps and iterations in 2-D
    pytest.param("radial", 8, 800, marks=pytest.mark.slow), pytest.param("o_snf", 8, 800, marks=pytest.mark.slow),
    pytest.param("h_snf", 8, 800, marks=pytest.mark.slow), pytest.param("t_snf", 8, 800, marks=pytest.mark.slow)])
def test_flow_learns_a_non_gaussian_target(kind, steps, iters):
    """Reverse-KL fit to a 2-D banana (seed 000 §9 V7(c), the offline fallback for the VAE comparison):
    every flow must end at least 0.1 nats below the best diagonal Gaussian."""
    from inference.flows import DiagNormal
    makers = {"planar": lambda: planar_flow(2, steps), "radial": lambda: radial_flow(2, steps),
              "iaf": lambda: iaf_flow(2, steps), "t_snf": lambda: sylvester_flow(2, steps, "triangular"),
              "o_snf": lambda: sylvester_flow(2, steps, "orthogonal", bottleneck=1),
              "h_snf": lambda: sylvester_flow(2, steps, "householder", reflections=2),
              "coupling": lambda: Flow([Coupling(2, 16, parity=k % 2 == 1) for k in range(steps)], DiagNormal(2))}
    torch.manual_seed(1)
    assert _reverse_kl_fit(makers[kind](), iters, 0.02 if iters == 300 else 0.03) < _GAUSSIAN_FIT - 0.1


def test_gaussian_reference_fit():
    """The reference value used above: a diagonal Gaussian cannot do better than about -0.99."""
    from inference.flows import DiagNormal
    torch.manual_seed(1)
    assert abs(_reverse_kl_fit(Flow([], DiagNormal(2)), 300, 0.02) - _GAUSSIAN_FIT) < 0.03
