import warnings

import numpy as np
import pytest
import torch

from inference import diagnostics as D

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import arviz as az

def _ar1_chains(chains=4, draws=501, dims=3, rho=0.9, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(chains, draws, dims, generator=g, dtype=torch.float64)
    for t in range(1, draws):
        x[:, t] = rho * x[:, t - 1] + 0.3 * x[:, t]
    return x


def _oracle(x):
    ds = az.convert_to_dataset(x.numpy())
    return {"bulk": az.ess(ds, method="bulk")["x"].values, "tail": az.ess(ds, method="tail")["x"].values,
            "rhat": az.rhat(ds, method="rank")["x"].values, "mean": az.ess(ds, method="mean")["x"].values}


@pytest.mark.parametrize("case", ["ar1", "ties_and_shifted_chain", "one_chain_odd_draws", "short_iid"])
def test_ess_and_rhat_match_arviz(case):
    if case == "ar1":
        x = _ar1_chains()
    elif case == "ties_and_shifted_chain":
        x = _ar1_chains(dims=2, draws=300)
        x[..., 0] = x[..., 0].round()            # many ties: average ranks
        x[1, :, 1] += 0.7                        # a chain that disagrees: R-hat > 1
    elif case == "one_chain_odd_draws":
        x = _ar1_chains(chains=1, draws=777, dims=2, rho=0.5)
    else:
        x = torch.randn(3, 20, 2, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    ref = _oracle(x)
    np.testing.assert_allclose(D.ess_bulk(x).numpy(), ref["bulk"], rtol=1e-10)
    np.testing.assert_allclose(D.ess_tail(x).numpy(), ref["tail"], rtol=1e-10)
    if x.shape[0] > 1:        # ArviZ returns NaN for one chain; we still split it in two halves
        np.testing.assert_allclose(D.rhat(x).numpy(), ref["rhat"], rtol=1e-10)
    np.testing.assert_allclose(D.ess_basic(x).numpy(), ref["mean"], rtol=1e-10)


def test_rhat_flags_disagreeing_chains_and_ess_tracks_autocorrelation():
    x = _ar1_chains(rho=0.0)
    assert D.rhat(x).max() < 1.01
    y = x.clone()
    y[0] += 3.0
    assert D.rhat(y).min() > 1.1
    slow = _ar1_chains(rho=0.95)
    assert (D.ess_bulk(slow) < D.ess_bulk(x) / 5).all()


def test_constant_chain_and_shapes():
    x = torch.ones(2, 50)
    assert D.ess_bulk(x).item() == 100
    assert D.ess_bulk(torch.randn(2, 50, 3, 4)).shape == (3, 4)


def test_summary_with_sampler_info():
    x = _ar1_chains(rho=0.0)
    info = {"acceptance_rate": torch.full((4, 501), 0.7), "is_divergent": torch.zeros(4, 501, dtype=torch.bool),
            "num_grad_evals": 5010}
    s = D.summary(x, info)
    assert s["acceptance_mean"] == pytest.approx(0.7) and s["divergences"] == 0 and s["num_grad_evals"] == 5010
    assert s["ess_bulk"].shape == (3,)


def test_bad_inputs():
    with pytest.raises(ValueError, match="chains, draws"):
        D.ess_bulk(torch.randn(10))
    with pytest.raises(ValueError, match="at least 4 draws"):
        D.rhat(torch.randn(2, 3))
    with pytest.raises(ValueError, match="prob"):
        D.ess_tail(torch.randn(2, 30), prob=0.7)
