"""EP / SEP / ADF for MoG clustering (inference/ep/mixture.py, seed 001 §3.2.4, case 7)."""
import pytest
import torch

from inference.ep import mixture


def data(n=60, seed=0):
    g = torch.Generator().manual_seed(seed)
    true = 2.0 * torch.randn(3, 2, dtype=torch.float64, generator=g)
    X = true[torch.randint(3, (n,), generator=g)] + 0.5 * torch.randn(n, 2, dtype=torch.float64, generator=g)
    return X, X[torch.randperm(n, generator=g)[:3]]


def test_sep_tracks_ep_and_adf_collapses():
    X, init = data()
    fits = {m: [mixture.fit(X, 3, 0.5, init, m, passes=p, generator=torch.Generator().manual_seed(1))
                for p in (1, 4)] for m in mixture.METHODS}
    ep, sep, adf = fits["ep"][1], fits["sep"][1], fits["adf"]
    assert torch.allclose(sep.means, ep.means, atol=0.1)
    assert (torch.logdet(sep.covs) - torch.logdet(ep.covs)).abs().max() < 0.5
    # ADF counts every point again on each pass: its covariance shrinks by about the number of passes
    shrink = torch.logdet(adf[0].covs) - torch.logdet(adf[1].covs)
    assert bool((shrink > 2.0).all()) and bool((torch.logdet(adf[1].covs) < torch.logdet(ep.covs) - 2.0).all())
    assert ep.site_numbers == 60 * 3 * 6 and sep.site_numbers == 3 * 6 and adf[1].site_numbers == 0


def test_ep_fixed_point_is_stable():
    X, init = data()
    a = mixture.fit(X, 3, 0.5, init, "ep", passes=24, generator=torch.Generator().manual_seed(1))
    b = mixture.fit(X, 3, 0.5, init, "ep", passes=48, generator=torch.Generator().manual_seed(1))
    assert torch.allclose(a.means, b.means, atol=1e-5) and torch.allclose(a.covs, b.covs, atol=1e-6)


def test_bad_input_is_one_clear_error():
    X, init = data()
    with pytest.raises(ValueError, match="method"):
        mixture.fit(X, 3, 0.5, init, "vb")
    with pytest.raises(ValueError, match="init_means"):
        mixture.fit(X, 4, 0.5, init, "ep")
    with pytest.raises(ValueError, match="positive"):
        mixture.fit(X, 3, 0.0, init, "ep")
