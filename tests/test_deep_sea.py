"""DeepSea (envs/deep_sea.py) against bsuite's definition: mapping, costs, optimal return, episode length, seeds."""
import numpy as np
import pytest

import envs
from envs import EnvError
from envs.deep_sea import DeepSea


def play(env: DeepSea, choose) -> tuple[float, list[bool], list[np.ndarray]]:
    """Run one episode; ``choose(env)`` picks each action. Returns the return, terminated flags, observations."""
    obs, _ = env.reset()
    observations, flags, total = [obs["proprio"]], [], 0.0
    done = False
    while not done:
        obs, reward, terminated, truncated, _ = env.step(choose(env))
        assert truncated is False
        total += reward
        flags.append(terminated)
        observations.append(obs["proprio"])
        done = terminated
    return total, flags, observations


@pytest.mark.parametrize("size", [1, 2, 5, 10, 30])
def test_optimal_return_is_099_and_episode_lasts_n_steps(size):
    env = envs.make(f"deep-sea-{size}", seed=0)
    total, flags, observations = play(env, lambda e: e.right_action(e.row, e.column))
    # bsuite: N "right" moves at 0.01/N each, +1 for "right" in the last column -> 1 - 0.01
    assert total == pytest.approx(0.99, abs=1e-12)
    assert env.optimal_return == pytest.approx(0.99)
    assert flags == [False] * (size - 1) + [True]
    assert not observations[-1].any()  # bsuite's null observation after the last step


def test_other_trajectories_are_not_rewarded():
    env = envs.make("deep-sea-6")
    left = lambda e: 1 - e.right_action(e.row, e.column)  # noqa: E731
    assert play(env, left)[0] == 0.0
    # one right move at the start, then left: pays exactly one move cost
    total, _, _ = play(env, lambda e: e.right_action(e.row, e.column) if e.row == 0 else left(e))
    assert total == pytest.approx(-0.01 / 6)
    # right everywhere except the very last step: reaches the last column but never gets the +1
    total, _, _ = play(env, lambda e: e.right_action(e.row, e.column) if e.row < 5 else left(e))
    assert total == pytest.approx(-5 * 0.01 / 6)


def test_action_mapping_is_bsuites_and_moves_the_agent():
    size = 8
    env = envs.make(f"deep-sea-{size}", mapping_seed=3)
    expected = np.random.RandomState(3).binomial(1, 0.5, [size, size])
    np.testing.assert_array_equal(env.action_mapping, expected)
    assert 0 < expected.sum() < size * size  # really randomised per cell
    rng = np.random.default_rng(0)
    obs, _ = env.reset()
    for row in range(size):
        assert obs["proprio"].reshape(size, size)[row, env.column] == 1.0 and obs["proprio"].sum() == 1.0
        action = int(rng.integers(2))
        column = env.column
        went_right = action == expected[row, column]
        obs, *_ = env.step(action)
        assert env.column == (min(column + 1, size - 1) if went_right else max(column - 1, 0))
        assert env.row == row + 1


def test_seeds_mapping_fixed_per_instance():
    a = envs.make("deep-sea-10", seed=1).action_mapping
    b = envs.make("deep-sea-10", seed=2).action_mapping  # the env seed does not pick the problem instance
    np.testing.assert_array_equal(a, b)
    c = envs.make("deep-sea-10", mapping_seed=1).action_mapping
    assert not np.array_equal(a, c)
    env = envs.make("deep-sea-10", mapping_seed=1)
    env.reset(seed=123)
    np.testing.assert_array_equal(env.action_mapping, c)


def test_spaces_and_names():
    env = envs.make("deep-sea-7")  # any N builds, listed or not
    assert env.observation_space["proprio"].shape == (49,) and env.action_space.n == 2
    assert env.render().shape == (56, 56, 3)
    listed = envs.names()
    for n in (10, 14, 20, 30):
        assert f"deep-sea-{n}" in listed


@pytest.mark.parametrize("name, kwargs, fragment", [
    ("deep-sea-0", {}, "size must be"),
    ("deep-sea--3", {}, "size must be"),
    ("deep-sea-5", {"action_repeat": 2}, "action_repeat must be 1"),
    ("deep-sea-5", {"mapping_seed": -1}, "mapping_seed"),
    ("deep-sea-5", {"wind": 1}, "unknown option"),
])
def test_bad_construction_is_one_clear_error(name, kwargs, fragment):
    with pytest.raises(EnvError, match=fragment):
        envs.make(name, **kwargs)


def test_bad_steps_are_clear_errors():
    env = envs.make("deep-sea-3")
    with pytest.raises(EnvError, match="reset"):
        env.step(0)
    env.reset()
    for bad in (2, -1, 0.5, [0, 1]):
        with pytest.raises(EnvError, match="0 or 1"):
            env.step(bad)
    env.step(np.float32(1.0))  # the index as replay stores it is fine
