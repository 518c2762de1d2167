"""Ch. 7 locomotion tasks (envs/locomotion.py): observation groups, task-free proprioception, each task's reward,
termination and time limit, the half-way direction switch, multitask ``info["task"]``, seeding and names."""
import numpy as np
import pytest
from dm_control import mjcf

import envs
from envs import EnvError, UnknownEnvError, locomotion
from tests.conftest import run_cli

WALKER_SIZES = {"jumping_ball": 3, "ant": 8, "cmu_humanoid": 56}  # actuators


def rollout(env, actions):
    """Proprio, task, rewards, terminated, truncated and infos of one env driven by ``actions``."""
    out = {k: [] for k in ("proprio", "task", "reward", "terminated", "truncated", "info")}
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action)
        for key, value in zip(out, (obs["proprio"], obs["task"], reward, terminated, truncated, info)):
            out[key].append(value)
        if terminated or truncated:
            break
    return out


@pytest.mark.parametrize("walker", list(WALKER_SIZES))
def test_names_groups_and_spaces(walker):
    sizes = {}
    for task in (*locomotion.TASKS, "multitask"):
        env = envs.make(f"{walker}-{task}", seed=0)
        obs, info = env.reset()
        assert set(obs) == {"proprio", "task"} and env.observation_space.contains(obs)
        assert env.action_space.shape == (WALKER_SIZES[walker],)
        assert env.action_space.low.min() == -1.0 and env.action_space.high.max() == 1.0
        assert env.render().shape == (240, 320, 3)
        sizes[task] = (obs["proprio"].size, obs["task"].size)
        assert ("task" in info) == (task == "multitask")
    assert len({p for p, _ in sizes.values()}) == 1  # the same body in every task
    k = 2  # default number of targets: walk 4 + 3, go-to-target 3 + 3K, moving target 3, multitask 3 + max
    assert [t for _, t in sizes.values()] == [7, 3 + 3 * k, 3, 3 + 3 + 3 * k]


@pytest.mark.parametrize("walker", list(WALKER_SIZES))
def test_proprio_does_not_depend_on_the_task(walker):
    """The same seed gives the same body in every task (the walker is placed before the task is drawn); the same
    actions then give the same proprio, whatever the targets or the direction."""
    actions = np.random.default_rng(0).uniform(-1, 1, (40, WALKER_SIZES[walker]))
    runs = []
    for task in locomotion.TASKS:
        env = envs.make(f"{walker}-{task}", seed=7)
        env.reset()
        runs.append(rollout(env, actions))
    steps = min(len(run["proprio"]) for run in runs)  # the humanoid's walk ends when it falls
    assert steps >= 10
    for run in runs[1:]:
        np.testing.assert_array_equal(np.array(run["proprio"][:steps]), np.array(runs[0]["proprio"][:steps]))

    # moving the targets mid-episode changes only the task group
    a, b = (envs.make(f"{walker}-go-to-target", seed=3) for _ in range(2))
    a.reset(), b.reset()
    b.task.objective.set_position(b.physics, 0, [-30.0, 30.0])
    b.task.objective.goal = 1
    run_a, run_b = rollout(a, actions), rollout(b, actions)
    np.testing.assert_array_equal(np.array(run_a["proprio"]), np.array(run_b["proprio"]))
    assert not np.allclose(np.array(run_a["task"]), np.array(run_b["task"]))


def test_walk_reward_is_one_at_the_target_velocity():
    env = envs.make("ant-walk", seed=1)
    env.reset()
    task, physics = env.task, env.physics
    target = task.objective.target_velocity()
    assert np.linalg.norm(target) == pytest.approx(3.0)
    free = mjcf.get_frame_freejoint(task.walker.mjcf_model)
    for offset, expected in (((0.0, 0.0), 1.0), ((1.0, 0.0), np.exp(-1.0)), ((0.6, -0.8), np.exp(-1.0))):
        physics.bind(free).qvel[:] = [target[0] + offset[0], target[1] + offset[1], 0.0, 0.0, 0.0, 0.0]
        physics.forward()
        np.testing.assert_allclose(task.planar_velocity(physics), target + offset, atol=1e-9)
        task.after_step(physics, np.random.RandomState(0))
        assert task.get_reward(physics) == pytest.approx(expected)
        assert task.get_discount(physics) == 1.0
    assert locomotion.walk_reward([0.0, 0.0], [3.0, 0.0]) == pytest.approx(np.exp(-9.0))
    rotation = physics.bind(task.walker.root_body).xmat.reshape(3, 3)
    np.testing.assert_allclose(task.objective.features(task, physics)[4:], np.append(target, 0.0) @ rotation,
                               atol=1e-9)


def test_walk_direction_is_resampled_half_way_and_episode_is_10s():
    switched = 0
    for seed in range(6):
        env = envs.make("jumping_ball-walk", seed=seed)
        obs, _ = env.reset()
        run = rollout(env, np.zeros((1000, 3)))
        assert len(run["reward"]) == 400 and run["truncated"][-1] and not any(run["terminated"])  # 10 s / 0.025
        directions = [np.argmax(obs["task"][:4])] + [np.argmax(t[:4]) for t in run["task"]]
        assert all(np.sum(t[:4]) == 1.0 for t in run["task"])
        # direction after k steps: the first one up to k = 199, the second one from k = 200 (t = 5 s) on
        assert len(set(directions[:200])) == 1 and len(set(directions[200:])) == 1
        switched += directions[0] != directions[200]
    assert switched >= 2  # each switch is a fresh uniform draw from 4 directions


def test_humanoid_walk_terminates_when_the_head_drops():
    env = envs.make("cmu_humanoid-walk", seed=0)
    env.reset()
    zero = np.zeros(56)
    _, _, terminated, _, _ = env.step(zero)
    assert not terminated  # standing: head at about 1.8 m
    walker, physics = env.task.walker, env.physics
    walker.set_pose(physics, position=[0.0, 0.0, 0.3], quaternion=[np.cos(np.pi / 4), 0.0, np.sin(np.pi / 4), 0.0])
    physics.forward()
    assert physics.bind(env.task.head).xpos[2] < locomotion.HEAD_HEIGHT_LIMIT
    _, reward, terminated, truncated, _ = env.step(zero)
    assert terminated and not truncated and 0.0 <= reward <= 1.0


def test_go_to_target_reward_60_and_termination_only_at_the_goal():
    env = envs.make("ant-go-to-target", seed=2, num_targets=3)
    objective = env.task.objective
    goals = set()
    for _ in range(6):  # the first three task features are the goal's egocentric position
        obs, _ = env.reset()
        assert obs["task"].size == 3 + 9
        np.testing.assert_array_equal(obs["task"][:3], obs["task"][3 + 3 * objective.goal:6 + 3 * objective.goal])
        goals.add(objective.goal)
    assert len(goals) > 1
    physics = env.physics
    # egocentric: world offsets rotated into the root body's frame
    rotation = physics.bind(env.task.walker.root_body).xmat.reshape(3, 3)
    offsets = objective.positions(physics) - env.task.root_position(physics)
    np.testing.assert_allclose(obs["task"][3:].reshape(3, 3), offsets @ rotation, atol=1e-5)
    root = env.task.root_position(physics)
    assert np.all(np.linalg.norm(objective.positions(physics)[:, :2] - root[:2], axis=1) >= 2.0)
    other = (objective.goal + 1) % 3
    objective.set_position(physics, other, root[:2])  # standing on a target that is not the goal
    _, reward, terminated, truncated, _ = env.step(np.zeros(8))
    assert reward == 0.0 and not terminated and not truncated
    objective.set_position(physics, objective.goal, env.task.root_position(physics)[:2] + [0.5, 0.0])
    _, reward, terminated, truncated, _ = env.step(np.zeros(8))
    assert reward == locomotion.GOAL_REWARD and terminated and not truncated


def test_go_to_target_times_out_after_20s():
    env = envs.make("jumping_ball-go-to-target", seed=4)
    env.reset()
    run = rollout(env, np.zeros((2000, 3)))
    assert len(run["reward"]) == 800 and run["truncated"][-1] and not run["terminated"][-1]
    assert sum(run["reward"]) == 0.0


def test_moving_target_rewards_each_step_on_target_and_respawns_after_10_consecutive():
    env = envs.make("ant-moving-target", seed=5)
    env.reset()
    objective, physics, zero = env.task.objective, env.physics, np.zeros(8)

    def put_target_on_walker():
        objective.set_position(physics, 0, env.task.root_position(physics)[:2])

    put_target_on_walker()
    rewards = [env.step(zero)[1] for _ in range(5)]
    objective.set_position(physics, 0, env.task.root_position(physics)[:2] + [3.0, 0.0])  # step off: count restarts
    rewards.append(env.step(zero)[1])
    put_target_on_walker()
    placed = objective.positions(physics)[0].copy()
    for _ in range(9):
        obs, reward, *_ = env.step(zero)
        rewards.append(reward)
        np.testing.assert_array_equal(objective.positions(physics)[0], placed)
    obs, reward, terminated, truncated, _ = env.step(zero)  # the 10th consecutive step on the target
    rewards.append(reward)
    assert rewards == [1.0] * 5 + [0.0] + [1.0] * 10 and not terminated and not truncated
    root = env.task.root_position(physics)
    assert np.linalg.norm(objective.positions(physics)[0, :2] - root[:2]) >= locomotion.MIN_TARGET_DISTANCE
    assert np.linalg.norm(obs["task"][:2]) > 1.5  # the observation already shows the respawned target
    assert env.step(zero)[1] == 0.0
    assert objective.episode_metrics() == {"task/targets_reached": 1.0}   # the first five steps were not enough


def test_moving_target_progress_term_pays_the_metres_gained_and_restarts_at_a_respawn():
    env = envs.make("ant-moving-target", seed=5, progress_weight=2.0)
    env.reset()
    objective, physics, zero = env.task.objective, env.physics, np.zeros(8)
    root = env.task.root_position(physics)[:2]
    assert objective.distance == pytest.approx(np.linalg.norm(objective.positions(physics)[0, :2] - root))  # reset
    objective.distance = 3.0                                   # as if the reset had put it 3 m away
    objective.set_position(physics, 0, root + [2.5, 0.0])      # the target comes 0.5 m closer during the step
    _, reward, *_ = env.step(zero)
    moved = np.linalg.norm(env.task.root_position(physics)[:2] - root)
    assert reward == pytest.approx(2.0 * (3.0 - objective.distance)) and abs(objective.distance - 2.5) <= moved + 1e-9
    objective.set_position(physics, 0, env.task.root_position(physics)[:2])   # on it: 1 plus the progress
    rewards = [env.step(zero)[1] for _ in range(locomotion.STEPS_BEFORE_RESPAWN)]
    assert rewards[0] > 1.0 + 2.0 * 2.0 and rewards[1:] == pytest.approx([1.0] * 9, abs=0.05)
    # the respawn resets the distance to the new target: no penalty for the jump
    assert objective.targets_reached == 1 and objective.distance >= locomotion.MIN_TARGET_DISTANCE
    assert abs(env.step(zero)[1]) < 0.05


def test_progress_term_survives_capture_and_restore_and_older_captures():
    env = envs.make("ant-moving-target", seed=7, progress_weight=3.0)
    env.reset()
    zero = np.ones(8) * 0.3
    for _ in range(3):
        env.step(zero)
    captured = env.get_state()
    first = [env.step(zero)[1] for _ in range(4)]
    env.set_state(captured)
    assert [env.step(zero)[1] for _ in range(4)] == first and any(r != 0.0 for r in first)
    # an episode captured before the progress term existed (no distance): the next step earns no progress
    old = {**captured, "task": {**captured["task"], "objective": {
        k: v for k, v in captured["task"]["objective"].items() if k != "distance"}}}
    env.set_state(old)
    assert env.step(zero)[1] == 0.0 and env.step(zero)[1] == pytest.approx(first[1])


def test_alive_bonus_is_paid_on_every_step():
    env = envs.make("ant-moving-target", seed=5, alive_bonus=0.25)
    env.reset()
    objective, physics = env.task.objective, env.physics
    objective.set_position(physics, 0, env.task.root_position(physics)[:2] + [3.0, 0.0])
    assert [env.step(np.zeros(8))[1] for _ in range(3)] == [0.25] * 3   # off the target, standing still


def test_shaping_options_are_checked_and_only_for_the_moving_target():
    for key in ("progress_weight", "alive_bonus"):
        with pytest.raises(EnvError, match=f"{key} must be"):
            envs.make("ant-moving-target", **{key: -1.0})
        with pytest.raises(EnvError, match="moving-target task only"):
            envs.make("ant-walk", **{key: 1.0})
    assert envs.make("humanoid-progress", seed=0, progress_weight=0.0).task.objective.progress_weight == 0.0
    shaped = {name: envs.make(name, seed=0).task.objective
              for name in ("humanoid", "humanoid-progress", "humanoid-alive", "humanoid-shaped")}
    assert {name: (o.progress_weight, o.alive_bonus) for name, o in shaped.items()} == {
        "humanoid": (0.0, 0.0), "humanoid-progress": (5.0, 0.0), "humanoid-alive": (0.0, 1.0),
        "humanoid-shaped": (5.0, 0.2)}


def test_moving_target_episode_is_25s():
    env = envs.make("ant-moving-target", seed=6)
    env.reset()
    run = rollout(env, np.zeros((1000, 8)))
    assert len(run["reward"]) == 500 and run["truncated"][-1] and not any(run["terminated"])  # 25 s / 0.05


def test_multitask_names_the_task_in_info_and_matches_the_one_hot():
    env = envs.make("ant-multitask", seed=0)
    seen = set()
    for episode in range(12):
        obs, info = env.reset(seed=episode)
        task = info["task"]
        seen.add(task)
        assert env.observation_space.contains(obs)
        assert np.argmax(obs["task"][:3]) == locomotion.TASKS.index(task) and obs["task"][:3].sum() == 1.0
        shown = {t: env.physics.bind(o.sites).rgba[:, 3].tolist() if o.name != "walk" else []
                 for t, o in zip(locomotion.TASKS, env.task.objectives)}  # only the episode's targets are drawn
        assert all(alpha == ([1.0] * len(alpha) if t == task else [0.0] * len(alpha)) for t, alpha in shown.items())
        run = rollout(env, np.random.default_rng(episode).uniform(-1, 1, (5, 8)))
        assert all(i["task"] == task for i in run["info"])
        assert all(np.argmax(t[:3]) == locomotion.TASKS.index(task) for t in run["task"])
    assert seen == set(locomotion.TASKS)


def test_reset_seed_reproduces_episodes():
    env = envs.make("ant-multitask", seed=1)
    fresh = envs.make("ant-multitask", seed=99)
    actions = np.random.default_rng(1).uniform(-1, 1, (20, 8))
    env.reset()
    rollout(env, actions)
    obs, info = env.reset(seed=11)
    obs_fresh, info_fresh = fresh.reset(seed=11)
    assert info.keys() == info_fresh.keys()
    for key in info:   # the root's pose among them
        np.testing.assert_array_equal(info[key], info_fresh[key])
    for key in obs:
        np.testing.assert_array_equal(obs[key], obs_fresh[key])
    np.testing.assert_array_equal(np.array(rollout(env, actions)["proprio"]),
                                  np.array(rollout(fresh, actions)["proprio"]))
    second, _ = env.reset()
    assert not np.array_equal(second["proprio"], obs["proprio"])  # episodes differ without a new seed


def test_action_repeat_sums_rewards_and_keeps_the_time_limit():
    env = envs.make("jumping_ball-walk", seed=0, action_repeat=4)
    assert env.metadata["render_fps"] == 10
    env.reset()
    run = rollout(env, np.zeros((1000, 3)))
    assert len(run["reward"]) == 100 and run["truncated"][-1]
    assert all(0.0 <= r <= 4.0 for r in run["reward"])


def test_bad_names_and_options_are_one_clear_error():
    with pytest.raises(UnknownEnvError, match="ant-walk"):
        envs.make("ant-wlak")
    with pytest.raises(UnknownEnvError):
        envs.make("humanoid-go-to-target")
    with pytest.raises(EnvError, match="unknown option"):
        envs.make("ant-walk", speed=5)
    with pytest.raises(EnvError, match="num_targets"):
        envs.make("ant-go-to-target", num_targets=0)
    with pytest.raises(EnvError, match="num_targets"):
        envs.make("ant-go-to-target", num_targets=9)
    with pytest.raises(EnvError, match="unknown locomotion task"):
        locomotion.make("ant-fly")


def test_train_list_shows_the_names():
    result = run_cli("--list")
    assert result.returncode == 0, result.stderr
    for name in locomotion.names():
        assert name in result.stdout
    assert len(locomotion.names()) == 3 * 5 + 5  # walkers x (3 Ch 7 tasks, target-speed, multitask) + 5 aliases
    assert envs.make("humanoid", seed=0).observation_space["task"].shape == (3,)
    assert envs.make("jumping_ball-target-speed", seed=0).observation_space["task"].shape == (1,)


# -- seed 000 §8.4 reuse tasks: target-speed, the humanoid aliases, falls -----------------------------------------
def test_target_speed_reward_is_one_at_the_target_and_falls_off_on_both_sides():
    assert locomotion.target_speed_reward(2.0, 2.0) == 1.0
    rewards = [locomotion.target_speed_reward(v, 2.0) for v in (2.0, 2.5, 3.0, 4.0)]
    assert all(a > b for a, b in zip(rewards, rewards[1:]))
    assert locomotion.target_speed_reward(1.5, 2.0) == pytest.approx(rewards[1])  # centred: symmetric
    sigma = locomotion.SPEED_SIGMA
    assert locomotion.target_speed_reward(2.0 + sigma, 2.0) == pytest.approx(np.exp(-0.5))

    env = envs.make("ant-target-speed", seed=1)
    obs, _ = env.reset()
    task, physics = env.task, env.physics
    target = task.objective.target_speed
    assert obs["task"].tolist() == [pytest.approx(target)] and 0.0 <= target <= 3.0
    free = mjcf.get_frame_freejoint(task.walker.mjcf_model)
    for speed in (target, target + 0.5, target + 1.0):  # horizontal speed in any direction
        physics.bind(free).qvel[:] = [0.6 * speed, -0.8 * speed, 0.7, 0.0, 0.0, 0.0]
        physics.forward()
        before = task.objective.target_speed
        task.after_step(physics, np.random.RandomState(0))
        assert task.get_reward(physics) == pytest.approx(locomotion.target_speed_reward(speed, before))
    assert locomotion.target_speed_reward(target, target) == 1.0


def test_target_speed_changes_at_random_times_within_the_range_and_episode_is_20s():
    changes = []
    for seed in range(3):
        env = envs.make("ant-target-speed", seed=seed)
        obs, _ = env.reset()
        run = rollout(env, np.zeros((1000, 8)))
        assert len(run["reward"]) == 400 and run["truncated"][-1] and not any(run["terminated"])  # 20 s / 0.05
        speeds = np.array([obs["task"][0]] + [t[0] for t in run["task"]])
        assert speeds.min() >= 0.0 and speeds.max() <= 3.0
        changes.append(int(np.sum(speeds[1:] != speeds[:-1])))
        assert "task/speed_error" in run["info"][-1]["episode_metrics"]
        assert "fell" not in run["info"][-1]  # the ant cannot fall
    assert 1 <= np.mean(changes) <= 10  # 20 s / SPEED_CHANGE_MEAN = 4 changes expected


def test_humanoid_aliases_and_their_falls():
    env = envs.make("humanoid", seed=0)
    assert isinstance(env.task.objective, locomotion.MovingTarget) and env.task.ends_on_fall
    assert not envs.make("cmu_humanoid-moving-target", seed=0).task.ends_on_fall  # Ch 7's rule kept
    speed_env = envs.make("humanoid-speed", seed=0)
    assert isinstance(speed_env.task.objective, locomotion.TargetSpeed)
    assert speed_env.task.objective.speed_range == locomotion.SPEED_RANGE["cmu_humanoid"] == (0.0, 4.0)
    for env in (env, speed_env):
        _, info = env.reset()
        zero = np.zeros(56)
        _, _, terminated, _, info = env.step(zero)
        assert not terminated and info["fell"] is False
        walker, physics = env.task.walker, env.physics
        walker.set_pose(physics, position=[0.0, 0.0, 0.3],
                        quaternion=[np.cos(np.pi / 4), 0.0, np.sin(np.pi / 4), 0.0])
        physics.forward()
        _, _, terminated, truncated, info = env.step(zero)
        assert terminated and not truncated and info["fell"] is True


@pytest.mark.parametrize("name", ["humanoid", "humanoid-speed", "cmu_humanoid-walk"])
def test_humanoid_proprio_is_the_tracking_experts_proprio(name):
    """The NPMP decoder is trained on humanoid-track-time's proprio: the reuse tasks must give the same numbers in
    the same order."""
    from envs.mocap import tracking

    track = envs.make(f"{tracking.TIMED_FAMILY}:{tracking.snippet_ids()[0]}", seed=0)
    env = envs.make(name, seed=0)
    assert env._keys["proprio"] == track._keys["proprio"]
    specs = env._env.observation_spec(), track._env.observation_spec()
    assert [specs[0][k].shape for k in env._keys["proprio"]] == [specs[1][k].shape for k in track._keys["proprio"]]
    assert env.observation_space["proprio"].shape == track.observation_space["proprio"].shape == (224,)


def test_suite_tasks_build_without_the_mocap_family():
    """Claiming a name must not load mocap data: a suite task builds even where the tracking module cannot load."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    code = ("import sys; sys.modules['envs.mocap.tracking'] = None\n"  # any import of it now raises ImportError
            "import envs; env = envs.make('walker-walk'); env.reset(seed=0); print('ok')")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == "ok", result.stderr


def test_mocap_family_names_match_the_tracking_module():
    import envs.mocap
    from envs.mocap import tracking

    assert envs.mocap.FAMILIES == tracking.FAMILIES
    assert envs.mocap.accepts("humanoid-track:07_01-0") and not envs.mocap.accepts("walker-walk")


def test_mocap_start_puts_the_humanoid_on_a_clip_frame_turned_to_a_random_heading():
    import mujoco

    from envs.mocap.tracking import servo_command

    env = envs.make("humanoid", seed=0)
    task = env.task
    frames = task.starts.frames
    drawn, headings = [], []
    place = task.starts.place
    task.starts.place = lambda *args: drawn.append(place(*args)) or drawn[-1]

    def heading_of_velocity(quaternion, velocity):
        """The angle from the root's x axis to the planar velocity: unchanged by a turn about the vertical."""
        matrix = np.zeros(9)
        mujoco.mju_quat2Mat(matrix, np.asarray(quaternion, dtype=np.float64))
        axis = matrix.reshape(3, 3)[:, 0]
        return np.angle(np.exp(1j * (np.arctan2(velocity[1], velocity[0]) - np.arctan2(axis[1], axis[0]))))

    for seed in range(4):
        env.reset(seed=seed)
        i, walker, physics = drawn[-1], task.walker, env.physics
        root = mjcf.get_frame_freejoint(walker.mjcf_model)
        np.testing.assert_allclose(physics.bind(walker.mocap_joints).qpos, frames["joints"][i], atol=1e-6)
        np.testing.assert_allclose(physics.bind(walker.mocap_joints).qvel, frames["joints_velocity"][i], atol=1e-5)
        qpos, qvel = physics.bind(root).qpos, physics.bind(root).qvel
        assert qpos[2] == pytest.approx(frames["position"][i][2], abs=1e-6)
        np.testing.assert_allclose(qvel[3:], frames["angular_velocity"][i], atol=1e-5)  # root frame: unturned
        np.testing.assert_allclose(np.linalg.norm(qvel[:3]), np.linalg.norm(frames["velocity"][i]), rtol=1e-5)
        if np.linalg.norm(frames["velocity"][i][:2]) > 0.3:
            assert heading_of_velocity(qpos[3:], qvel) == pytest.approx(
                heading_of_velocity(frames["quaternion"][i], frames["velocity"][i]), abs=1e-4)
        headings.append(np.arctan2(qvel[1], qvel[0]))
        actuators = physics.bind(walker.actuators)
        joints = physics.bind([a.joint for a in walker.actuators])
        np.testing.assert_allclose(actuators.act, np.clip(servo_command(joints.qpos, *joints.range.T), -1, 1))
        assert physics.bind(task.head).xpos[2] > 1.5 and task.starts.count > 1000
    assert len(set(np.round(headings, 3))) == 4
    standing = envs.make("cmu_humanoid-moving-target", seed=0)
    assert standing.task.starts is None and np.allclose(standing.reset()[0]["proprio"][:56], 0.0, atol=0.05)


def test_a_bad_start_is_one_clear_error():
    with pytest.raises(EnvError, match="start must be one of stand, mocap"):
        envs.make("cmu_humanoid-walk", start="sit")
    with pytest.raises(EnvError, match="cmu_humanoid only"):
        envs.make("ant-walk", start="mocap")
    assert envs.make("cmu_humanoid-walk", start="mocap", seed=0).task.starts is not None


def test_unreadable_start_states_are_one_clear_error(tmp_path):
    from envs.mocap.tracking import MocapStarts

    with pytest.raises(EnvError, match="cannot read start states"):
        MocapStarts(tmp_path / "missing.h5")
    (tmp_path / "corrupt.h5").write_bytes(b"not an hdf5 file")
    with pytest.raises(EnvError, match="cannot read start states"):
        MocapStarts(tmp_path / "corrupt.h5")
