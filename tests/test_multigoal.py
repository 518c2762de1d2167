"""The multi-goal point environment (Haarnoja et al. 2017; envs/multigoal.py): rewards, goal termination, horizon."""
import numpy as np
import pytest

import envs
from envs.multigoal import ACTION_COST, BOUND, DISTANCE_COST, GOAL_REWARD, GOALS, HORIZON


def test_registered_with_a_proprio_group_and_unit_actions():
    assert "multigoal" in envs.names()
    env = envs.make("multigoal", seed=0)
    obs, info = env.reset()
    assert set(obs) == {"proprio"} and obs["proprio"].dtype == np.float32 and obs["proprio"].shape == (2,)
    assert env.action_space.shape == (2,) and env.action_space.low.min() == -1 and env.action_space.high.max() == 1
    np.testing.assert_array_equal(obs["proprio"], info["pos"].astype(np.float32))
    assert env.render().shape == (96, 96, 3)


def test_start_is_near_the_origin_and_seeded():
    env = envs.make("multigoal", seed=3)
    starts = np.array([env.reset(seed=s)[0]["proprio"] for s in range(400)])
    assert np.abs(starts.mean(0)).max() < 0.03 and np.allclose(starts.std(0), 0.1, atol=0.015)
    np.testing.assert_array_equal(env.reset(seed=7)[0]["proprio"], env.reset(seed=7)[0]["proprio"])


def test_reward_is_action_cost_plus_distance_cost_at_the_new_position():
    env = envs.make("multigoal", seed=0)
    start = env.reset(seed=1)[1]["pos"]
    action = np.array([0.3, -0.6])
    obs, reward, terminated, truncated, info = env.step(action)
    position = start + action
    np.testing.assert_allclose(info["pos"], position)
    distance_sq = np.min(((GOALS - position) ** 2).sum(-1))
    assert reward == pytest.approx(-(ACTION_COST * 0.45 + DISTANCE_COST * distance_sq))
    assert not terminated and not truncated and info["goal"] == -1


def test_actions_are_clipped_to_unit_velocity_and_positions_to_the_box():
    env = envs.make("multigoal", seed=0)
    env.reset(seed=0)
    start = env.position.copy()
    *_, info = env.step(np.array([5.0, 0.0]))
    np.testing.assert_allclose(info["pos"], start + [1.0, 0.0])
    env.reset(seed=0)
    for _ in range(12):  # the diagonal passes no goal: it reaches the corner of the box and stays there
        *_, terminated, truncated, info = env.step(np.array([1.0, 1.0]))
        assert not terminated
    np.testing.assert_allclose(info["pos"], [BOUND, BOUND])


@pytest.mark.parametrize("goal", range(4))
def test_reaching_a_goal_terminates_with_the_goal_reward(goal):
    env = envs.make("multigoal", seed=0)
    env.reset(seed=goal)
    direction = GOALS[goal] / 5.0
    env.position = 0.2 * direction  # a fixed start: 4 unit steps end 0.8 from the goal
    for step in range(1, 10):
        before = env.position.copy()
        _, reward, terminated, truncated, info = env.step(direction)
        if terminated:
            break
    assert step == 4 and not truncated and info["goal"] == goal
    distance_sq = float(((info["pos"] - GOALS[goal]) ** 2).sum())
    assert np.sqrt(distance_sq) < 1.0
    np.testing.assert_allclose(info["pos"], before + direction)
    assert reward == pytest.approx(GOAL_REWARD - ACTION_COST - DISTANCE_COST * distance_sq)


def test_standing_still_truncates_at_the_horizon():
    env = envs.make("multigoal", seed=0)
    env.reset(seed=0)
    for t in range(1, HORIZON + 1):
        _, reward, terminated, truncated, _ = env.step(np.zeros(2))
        assert not terminated and reward == pytest.approx(-DISTANCE_COST * 25.0, abs=1.5)  # ~5 from every goal
        assert truncated == (t == HORIZON)


def test_action_repeat_sums_rewards_and_stops_at_the_goal():
    env = envs.make("multigoal", seed=0, action_repeat=3)
    env.reset(seed=0)
    env.position = np.array([0.2, 0.0])
    _, reward, terminated, _, info = env.step(np.array([1.0, 0.0]))
    positions = env.position - np.array([[2.0, 0.0], [1.0, 0.0], [0.0, 0.0]])
    expected = sum(-(ACTION_COST + DISTANCE_COST * np.min(((GOALS - p) ** 2).sum(-1))) for p in positions)
    assert reward == pytest.approx(expected) and not terminated
    _, _, terminated, _, info = env.step(np.array([1.0, 0.0]))  # reaches (5, 0) on the first of the 3 repeats
    assert terminated and info["goal"] == 0 and env.position[0] == pytest.approx(4.2)


def test_bad_arguments_give_an_env_error():
    with pytest.raises(envs.EnvError, match="multigoal"):
        envs.make("multigoal", colour="red")
