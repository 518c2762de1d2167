"""AMLS (inference/rare_events.py): seed 003 Ch5-Alg1, validation cases 1 and 3 at test size."""
import math

import pytest
import torch

from inference.rare_events import amls, box_model, gaussian_model


def gaussian_tail_score(dim: int, t: float):
    w = torch.ones(dim, dtype=torch.float64) / math.sqrt(dim)
    return lambda x: x @ w - t


def test_a_gaussian_tail_of_1e_minus_8_is_estimated_within_a_fifth_of_a_decade():
    t = 5.612001244174965   # 1 - Phi(t) = 1e-8
    sample, log_density = gaussian_model(5)
    estimates = [amls(sample, log_density, gaussian_tail_score(5, t), n=500, mh_steps=50,
                      generator=torch.Generator().manual_seed(r)).log_probability / math.log(10) for r in range(6)]
    assert abs(sum(estimates) / len(estimates) + 8.0) < 0.2, estimates
    assert max(estimates) - min(estimates) < 1.0, estimates


def test_a_frequent_event_takes_one_level_and_is_the_naive_fraction():
    sample, log_density = gaussian_model(1)
    g = torch.Generator().manual_seed(0)
    result = amls(sample, log_density, lambda x: x[:, 0], n=1000, rho=0.1, generator=g)
    assert result.levels == [0.0]
    x = gaussian_model(1)[0](1000, torch.Generator().manual_seed(0))
    assert result.log_probability == pytest.approx(math.log(float((x[:, 0] >= 0).double().mean())))
    assert (result.samples[:, 0] >= 0).all()


def test_box_model_chains_stay_in_the_box_and_end_in_the_event():
    sample, log_density = box_model(torch.zeros(4), torch.ones(4))
    result = amls(sample, log_density, lambda x: x.sum(-1) - 3.6, n=400, mh_steps=30,
                  generator=torch.Generator().manual_seed(1))
    exact = 0.4 ** 4 / 24                       # P(sum of 4 U[0,1] >= 3.6) = (4 - 3.6)^4 / 4!
    assert abs(result.log_probability - math.log(exact)) < math.log(3.0)
    assert ((result.samples >= 0) & (result.samples <= 1)).all() and (result.samples.sum(-1) >= 3.6).all()
    assert all(0.0 < a < 1.0 for a in result.acceptance)


def test_an_impossible_event_stops_at_p_min_with_a_non_increasing_estimate():
    sample, log_density = gaussian_model(2)
    result = amls(sample, log_density, lambda x: -1.0 - x.norm(dim=-1), n=500, mh_steps=10, log_p_min=-20.0,
                  generator=torch.Generator().manual_seed(0))
    assert result.terminated and result.log_probability == -math.inf and result.probability == 0.0
    # 9 ln(0.1) = -20.7 is the first below -20; ties among resampled chains that did not move give P_k > rho
    assert 9 <= len(result.levels) <= 12
    assert all(b <= a for a, b in zip(result.log_history, result.log_history[1:]))
    assert len(result.samples) == 0


def test_bad_settings_are_refused():
    sample, log_density = gaussian_model(1)
    for kwargs in ({"rho": 0.0}, {"rho": 1.0}, {"n": 5, "rho": 0.1}, {"mh_steps": 0}, {"initial_step": 0.0}):
        with pytest.raises(ValueError):
            amls(sample, log_density, lambda x: x[:, 0], **kwargs)


def test_a_score_with_a_plateau_below_zero_ends_with_zero_instead_of_stalling():
    sample, log_density = box_model(torch.zeros(2), torch.ones(2))
    result = amls(sample, log_density, lambda x: x[:, 0].clamp(max=0.5) - 1.0, n=200, mh_steps=5,
                  generator=torch.Generator().manual_seed(0), max_levels=50)
    assert result.terminated and result.log_probability == -math.inf and len(result.levels) < 50


def test_a_score_returning_nan_or_the_wrong_shape_is_one_clear_error():
    sample, log_density = gaussian_model(3)
    with pytest.raises(ValueError, match="returned NaN"):
        amls(sample, log_density, lambda x: torch.where(x[:, 0] > 1, float("nan"), x[:, 0] - 5.0), n=100)
    with pytest.raises(ValueError, match="must map points"):
        amls(sample, log_density, lambda x: x - 5.0, n=100)
