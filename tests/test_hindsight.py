"""Hindsight goals for the clip high level (agents/hindsight.py; docs/npmp.md, "A high level that learns, in part"): the
task's features recomputed for a moved target, the relabelled copies of an episode, and the loop writing them into
replay."""
import numpy as np
import pytest

from agents.actors import Transition
from agents.hindsight import relabel_episode
from envs.locomotion import STEPS_BEFORE_RESPAWN, TOLERANCE, relabelled_features, target_of_features

TASK = slice(2, 5)   # the task features' place in the synthetic flat observation below


def walk_along_x(decisions=3, steps=20, speed=0.0937, yaw_deg=0.0):
    """An episode of a walker going straight along world x at ``speed`` m per control step, turned by ``yaw_deg``
    (its egocentric x axis is world x turned by yaw), with a target far to the side."""
    yaw = np.radians(yaw_deg)
    xmat = np.array([[np.cos(yaw), -np.sin(yaw), 0.0], [np.sin(yaw), np.cos(yaw), 0.0], [0.0, 0.0, 1.0]])

    def pose(x):
        return np.concatenate([[x, 0.0, 1.0], xmat.ravel()]).astype(np.float32)

    target = np.array([0.0, 50.0, 0.0])
    first = np.zeros(6, np.float32)
    first[TASK] = relabelled_features(pose(0.0), target)
    transitions, x = [], 0.0
    for d in range(decisions):
        path = np.stack([[x + speed * (k + 1), 0.0, 1.0] for k in range(steps)])
        start, x = pose(x), x + speed * steps
        obs = np.zeros(6, np.float32)
        obs[TASK] = relabelled_features(pose(x), target)
        obs[5] = d   # something the relabelling must leave alone
        over = d == decisions - 1
        info = {"start_pose": start, "root_path": path, "root_pose": pose(x), "control_steps": steps}
        transitions.append(Transition(0, d % 2, 0.0, 0.0, over, obs, over, info, None))
    return first, transitions, pose


@pytest.mark.parametrize("yaw_deg", [0.0, 70.0])
def test_an_episode_is_relabelled_towards_where_the_walker_went(yaw_deg):
    first, steps, pose = walk_along_x(yaw_deg=yaw_deg)
    goal_and_features = target_of_features(pose(0.0), first[TASK])
    assert goal_and_features[2] == pytest.approx(0.0, abs=1e-5)   # the real target's height, seen back
    copies = relabel_episode(first, steps, TASK, goals=5, rng=np.random.default_rng(0))
    assert len(copies) == 5
    for copy_first, rows in copies:
        goal = target_of_features(pose(0.0), copy_first[TASK])
        assert goal[2] == pytest.approx(0.0, abs=1e-5) and abs(goal[1]) < 1e-5
        assert 2.0 <= goal[0] <= 3 * 20 * 0.0937 + 1e-5   # on the path, at least 2 m from the start
        # the copy ends on the first decision whose segment comes within the tolerance of the goal
        reached_at = next(d for d, s in enumerate(steps) if np.any(np.abs(s.info["root_path"][:, 0] - goal[0])
                                                                     < TOLERANCE))
        assert len(rows) == reached_at + 1
        *before, last = rows
        assert all(r[2] == 0.0 and not r[3] and not r[5] for r in before)
        hits = np.sum(np.abs(steps[reached_at].info["root_path"][:, 0] - goal[0]) < TOLERANCE)
        assert last[2] == min(hits, STEPS_BEFORE_RESPAWN) > 0 and last[3] and last[5]
        for i, (action, _, _, _, obs, _) in enumerate(rows):   # the target where the walker was going to be
            assert action == steps[i].action and obs[5] == i
            np.testing.assert_allclose(obs[TASK], relabelled_features(steps[i].info["root_pose"], goal), atol=1e-5)


def test_nothing_is_relabelled_without_a_path_or_goals_or_far_enough_to_go():
    first, steps, _ = walk_along_x()
    rng = np.random.default_rng(0)
    assert relabel_episode(first, steps, TASK, goals=0, rng=rng) == []
    bare = [s._replace(info={"control_steps": 20}) for s in steps]
    assert relabel_episode(first, bare, TASK, goals=3, rng=rng) == []
    first, short, _ = walk_along_x(decisions=1, steps=10)   # 1 m walked: no goal 2 m away
    assert relabel_episode(first, short, TASK, goals=3, rng=rng) == []


def test_the_task_features_of_the_real_target_are_its_relabelled_features():
    import envs

    env = envs.make("humanoid", seed=0)
    obs, info = env.reset(seed=3)
    physics, objective = env.unwrapped._env.physics, env.unwrapped.task.objective
    for _ in range(3):
        target = objective.positions(physics)[0]
        np.testing.assert_allclose(relabelled_features(info["root_pose"], target), obs["task"], atol=1e-4)
        np.testing.assert_allclose(target_of_features(info["root_pose"], obs["task"]), target, atol=1e-4)
        obs, *_, info = env.step(np.zeros(env.action_space.shape, np.float32))


def test_hindsight_goals_fill_replay_beyond_the_decisions_taken(tmp_path, capsys):
    """``--set hindsight_goals=N``: finished episodes come back as relabelled ones (more transitions in replay than
    decisions); a high level that does not see the task cannot be relabelled."""
    import train

    run_dir = tmp_path / "run"
    assert train.main(["--env", "humanoid", "--agent", "npmp-clips", "--steps", "600", "--logdir", str(run_dir),
                       "--set", "hindsight_goals=3", "--set", "learning_starts=2", "--eval-every", "1000",
                       "--eval-episodes", "1", "--video-every", "0"]) == 0, capsys.readouterr().err
    from agents import checkpoint

    meta, _, _ = checkpoint.load(checkpoint.latest(run_dir / "checkpoints"))
    decisions, stored = meta["counters"]["actor_steps"], meta["replay"]["steps_added"]
    assert meta["counters"]["episodes"] >= 1 and stored > decisions
    from tests.test_cli import scalars

    assert "eval/task/targets_reached" in scalars(run_dir)   # what the greedy policy reaches, in TensorBoard
    capsys.readouterr()
    assert train.main(["--env", "humanoid", "--agent", "npmp-clips", "--steps", "10", "--logdir",
                       str(tmp_path / "bad"), "--set", "hindsight_goals=2", "--set", "high_level_obs=clip"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "high_level_obs must include task" in err
