"""The tracking planner (agents/mpc.py): its model of the environment is the environment, its score is the env's
reward, and planning tracks a clip longer than the feed-forward controller it starts from."""
import json
from pathlib import Path

import mujoco
import numpy as np
import pytest

import envs
from agents.mpc import (COMIC_TERMS, REFERENCE_KEYS, MPCConfig, PlannedTrackingEnv, TrackingPlanner, comic_reward,
                        interpolation_matrix)
from agents.config import ConfigError
from tests.test_cli import assert_one_line_error, scalars

SNIPPET = "09_01-0"   # a 1.2 s run: the feed-forward controller alone falls after 18 of its 35 steps


def full_state(model, data) -> np.ndarray:
    state = np.empty(mujoco.mj_stateSize(model, mujoco.mjtState.mjSTATE_FULLPHYSICS))
    mujoco.mj_getState(model, data, state, mujoco.mjtState.mjSTATE_FULLPHYSICS)
    return state


@pytest.fixture
def env():
    env = envs.make(f"humanoid-track:{SNIPPET}", seed=0, clip_start=True)
    env.reset(seed=0)
    yield env
    env.close()


def test_rollout_and_score_reproduce_the_environment(env):
    planner = TrackingPlanner(env, MPCConfig(candidates=2, method="ps", feedback_gain=0.0, threads=1))
    model, nq, nv = planner.model, planner.model.nq, planner.model.nv
    for _ in range(4):
        t = env.time_step
        command = env.feed_forward_actions()[t + 1] + 0.05 * np.sin(np.arange(56))
        correction = command - env.feed_forward_actions()[t + 1]   # on top of the servo feed-forward
        predicted = planner._rollout(full_state(model, env.physics.data.ptr), correction[None, None], t)[0, 0]
        _, reward, *_ = env.step(command)
        actual = full_state(model, env.physics.data.ptr)
        np.testing.assert_allclose(predicted, actual, atol=1e-4)   # MuJoCo's warm start differs, nothing else
        features = planner.features(actual[None, 1:1 + nq], actual[None, 1 + nq:1 + nq + nv])
        reference = {k: env.clip_reference()[k][[t + 1]] for k in REFERENCE_KEYS}
        mine, error = comic_reward(features, reference)
        assert mine[0] == pytest.approx(reward, abs=1e-6)
        assert error[0] == pytest.approx(env._env.task._termination_error, abs=1e-9)
        terms = planner.reward_terms()   # what this step earned, term by term
        assert sum(terms[name] for name in COMIC_TERMS) == pytest.approx(reward, abs=1e-6)
        assert terms["joints_velocity"] == pytest.approx(0.5 * np.exp(-0.1 * terms["joints_velocity_error"]))


def test_interpolation_and_warm_start_shift():
    weights = interpolation_matrix(10, 4)
    np.testing.assert_allclose(weights.sum(axis=1), 1.0)
    np.testing.assert_allclose(weights[0], [1, 0, 0, 0])
    np.testing.assert_allclose(weights[-1], [0, 0, 0, 1])
    shift = np.linalg.pinv(weights) @ interpolation_matrix(10, 4, shift=1.0)
    np.testing.assert_allclose(shift @ np.ones((4, 3)), np.ones((4, 3)), atol=1e-12)   # a constant plan stays
    # the warm start is the least-squares fit of the plan one step later: its residual is orthogonal to the spline
    knots = np.random.default_rng(0).normal(size=(4, 3))
    residual = weights @ (shift @ knots) - interpolation_matrix(10, 4, shift=1.0) @ knots
    np.testing.assert_allclose(weights.T @ residual, 0.0, atol=1e-10)
    np.testing.assert_allclose(interpolation_matrix(5, 1), np.ones((5, 1)))


@pytest.mark.parametrize("bad", [{"method": "mppi"}, {"horizon": 0}, {"knots": 11, "horizon": 10},
                                 {"noise_std": float("nan")}, {"method": "cem", "elites": 40},
                                 {"warm_start_decay": 1.5}, {"warm_start_decay": -0.1},
                                 {"joint_velocity_weight": -1e-3}])
def test_bad_settings(bad):
    with pytest.raises(ConfigError):
        MPCConfig(**bad).validate()


def run_episode(env, act) -> tuple[int, float]:
    obs, _ = env.reset(seed=0)
    steps, total = 0, 0.0
    while True:
        obs, reward, terminated, truncated, _ = env.step(act())
        steps, total = steps + 1, total + reward
        if terminated or truncated:
            return steps, total


@pytest.mark.slow   # ~40 s: the default planner over a whole 1.2 s run
def test_planning_tracks_longer_than_the_feed_forward_controller(env):
    ff_steps, ff_return = run_episode(env, env.reference_action)
    planned = PlannedTrackingEnv(env, MPCConfig(seed=0))
    steps, total = run_episode(planned, lambda: None)
    assert steps > ff_steps + 5 and total > ff_return, (steps, ff_steps, total, ff_return)


def test_train_mpc_logs_tracking_and_rejects_other_envs(cli, tmp_path):
    run_dir = tmp_path / "mpc"
    result = cli("--env", f"humanoid-track:{SNIPPET}", "--agent", "mpc", "--steps", "20", "--logdir", run_dir,
                 "--eval-every", "20", "--eval-episodes", "1", "--set", "horizon=4", "--set", "knots=2",
                 "--set", "candidates=4", "--set", "method=ps", "--set", "iterations=1")
    assert result.returncode == 0, result.stderr
    tags = scalars(run_dir)
    assert "eval/return" in tags and tags["eval/return"][-1][1] > 0
    assert_one_line_error(cli("--env", "cartpole-swingup", "--agent", "mpc", "--steps", "10",
                              "--logdir", tmp_path / "bad"), "humanoid-track")
    assert not (tmp_path / "bad").exists()


def test_joint_velocity_shaping_charges_the_summed_squared_velocity_error(env):
    """``joint_velocity_weight`` W lowers a candidate's score by W x E summed over the horizon, E the squared
    joint-velocity error the reward's term exp(-0.1 E) is made of."""
    plain = TrackingPlanner(env, MPCConfig(threads=1, horizon=5, candidates=3, method="ps"))
    shaped = TrackingPlanner(env, MPCConfig(threads=1, horizon=5, candidates=3, method="ps",
                                            joint_velocity_weight=0.01))
    state = full_state(plain.model, env.physics.data.ptr)
    corrections = np.random.default_rng(0).normal(scale=0.1, size=(3, 5, len(plain.actuators)))
    states = plain._rollout(state, corrections, env.time_step)
    reference = plain._reference(np.arange(env.time_step + 1, env.time_step + 6))
    nq, nv = plain.model.nq, plain.model.nv
    qpos, qvel = states[..., 1:1 + nq].reshape(15, nq), states[..., 1 + nq:1 + nq + nv].reshape(15, nv)
    error = ((plain.features(qpos, qvel)["joints_velocity"].reshape(3, 5, -1) - reference["joints_velocity"]) ** 2
             ).sum(axis=(1, 2))
    assert (error > 0).all()
    np.testing.assert_allclose(shaped._score(states, reference), plain._score(states, reference) - 0.01 * error)


def test_a_walker_that_lags_is_scored_as_if_it_stood_over_the_reference_with_follow_walker(env):
    """``follow_walker``: the reference's world positions are moved under the walker's root, so a walker shifted
    1.5 m over the ground scores what it scores in place; without it the shift exceeds the termination error and
    every step's reward is masked (the planner goes blind: docs/npmp.md, "Teachers that lose the pace")."""
    planner = TrackingPlanner(env, MPCConfig(threads=1, horizon=5, candidates=2, method="ps"))
    follow = TrackingPlanner(env, MPCConfig(threads=1, horizon=5, candidates=2, method="ps", follow_walker=True))
    state = full_state(planner.model, env.physics.data.ptr)
    corrections = np.random.default_rng(0).normal(scale=0.05, size=(2, 5, len(planner.actuators)))
    t = env.time_step
    frames = np.arange(t + 1, t + 6)
    in_place = planner._score(planner._rollout(state, corrections, t), planner._reference(frames))
    assert (in_place > 0).all()
    moved = state.copy()
    moved[1:3] += (1.2, -0.9)   # the root's ground position (the state: time, then qpos)
    states = planner._rollout(moved, corrections, t)
    np.testing.assert_allclose(planner._score(states, planner._reference(frames)), 0.0, atol=1e-12)
    followed = follow._score(states, follow._moved_over_walker(follow._reference(frames), moved, t))
    np.testing.assert_allclose(followed, in_place, rtol=1e-6)


def test_follow_walker_slack_keeps_that_much_of_the_lag(env):
    """``follow_walker_slack``: the reference is moved toward the walker by its lag less the slack, so a walker
    1.5 m behind still has the slack's 0.4 m to make up, and one within the slack is compared where it is."""
    planner = TrackingPlanner(env, MPCConfig(threads=1, horizon=5, candidates=2, method="ps", follow_walker=True,
                                             follow_walker_slack=0.4))
    state = full_state(planner.model, env.physics.data.ptr)
    t = env.time_step
    reference = planner._reference(np.arange(t + 1, t + 6))
    root = env.clip_reference()["position"][t][:2]
    for shift, left in (((1.2, -0.9), 0.4), ((0.3, 0.0), 0.3)):
        moved = state.copy()
        moved[1:3] = root + np.array(shift)
        leashed = planner._moved_over_walker(reference, moved, t)
        offset = leashed["position"] - reference["position"]
        np.testing.assert_allclose(offset[:, 2], 0.0)
        np.testing.assert_allclose(np.linalg.norm(moved[1:3] - (root + offset[0, :2])), left, rtol=1e-9)
        np.testing.assert_allclose(leashed["body_positions"] - reference["body_positions"],
                                   np.broadcast_to(offset[:, None], reference["body_positions"].shape))
    with pytest.raises(ConfigError, match="follow_walker_slack"):
        MPCConfig(follow_walker_slack=-1.0).validate()


def test_the_warm_start_decays(env):
    """The kept plan, shifted one step, is scaled by ``warm_start_decay`` before the next step's search: with the
    nominal as the only candidate, the plan executed is exactly that."""
    for decay in (1.0, 0.5):
        planner = TrackingPlanner(env, MPCConfig(threads=1, horizon=10, knots=4, candidates=1, method="ps",
                                                 iterations=1, warm_start_decay=decay))
        kept = np.random.default_rng(0).normal(scale=0.1, size=planner.nominal.shape)
        planner.nominal = kept.copy()
        command = planner.act()
        np.testing.assert_allclose(planner.nominal, decay * planner.shift @ kept, atol=1e-12)
        base = planner._base_commands(full_state(planner.model, env.physics.data.ptr)[None], env.time_step)[0]
        np.testing.assert_allclose(command, np.clip(base + planner.weights[0] @ planner.nominal, -1, 1), atol=1e-6)


def test_a_plan_anchored_to_a_stored_run_repeats_its_commands(env):
    """``knots_along`` a planner's noise-free run gives, at the run's own states, the plan whose first command is the
    run's; the anchored expert (pipelines/npmp/data.py) labels with it and no memory: the same state and clip time
    give the same label whatever it labelled before."""
    from agents.lqr import planned_nominal
    from pipelines.npmp.data import planner_expert

    settings = dict(threads=1, horizon=6, knots=3, candidates=4, elites=2, iterations=1)
    states, commands, _ = planned_nominal(env, TrackingPlanner(env, MPCConfig(**settings)))
    nominal_only = TrackingPlanner(env, MPCConfig(**{**settings, "candidates": 1, "method": "ps"}))
    env.reset(seed=0)
    for t in range(8):
        knots = nominal_only.knots_along(states, commands, t)
        np.testing.assert_allclose(nominal_only.act(knots), commands[t], atol=1e-5)
        env.step(commands[t])
    assert not nominal_only.knots_along(states, commands, len(commands)).any()   # past the run: no correction

    expert = planner_expert(SNIPPET, {**settings, "candidates": 1, "method": "ps"},
                            plan={"physics_states": states, "commands": commands}, anchored=True)
    anchored_env = expert.make_env(0)
    try:
        anchored_env.reset(seed=0)
        first = expert.mean_command(None)
        anchored_env.step(np.zeros_like(first))
        expert.mean_command(None)   # a label elsewhere ...
        anchored_env.reset(seed=0)
        np.testing.assert_array_equal(expert.mean_command(None), first)   # ... leaves no trace
        np.testing.assert_allclose(first, commands[0], atol=1e-5)
    finally:
        expert.planner.close()
        anchored_env.close()
    with pytest.raises(ConfigError, match="anchored"):
        planner_expert(SNIPPET, settings, lqr={}, anchored=True)


def test_the_aligned_walker_is_the_same_body_on_the_reference(env):
    """benchmarks/planner_label_noise.py moves the walker onto the reference's root (ground plane and heading) to
    ask whether that offset moves the planner's label: inside the block the offset is zero and proprioception is
    unchanged; after it the simulator state is exactly what it was."""
    from benchmarks.planner_label_noise import AlignedWalker

    feed_forward = env.feed_forward_actions()
    for t in range(12):
        env.step(feed_forward[t + 1])
    physics = env.physics
    physics.data.qpos[0] += 0.3   # push the walker off the reference and turn it
    physics.data.qpos[3:7] = [np.cos(0.2), 0.0, 0.0, np.sin(0.2)]
    physics.forward()
    def proprio() -> np.ndarray:   # the observation the walker would get now
        updater = env._env._observation_updater
        updater.update()
        return env._grouped(updater.get_observation())["proprio"]

    model = physics.model.ptr
    before, seen = full_state(model, physics.data.ptr), proprio()
    align = AlignedWalker(env)
    distance, heading_error = align.offset()
    assert distance > 0.25 and heading_error > 0.3
    with align:
        physics.forward()
        np.testing.assert_allclose(align.offset(), (0.0, 0.0), atol=1e-9)
        np.testing.assert_allclose(proprio(), seen, atol=1e-5)
    np.testing.assert_array_equal(full_state(model, physics.data.ptr), before)


def test_the_plan_stops_where_the_episode_does(env):
    """Past the episode's last frame the planner would chase the clip's last frame held still: it plans (and
    scores) only the steps left. The horizon here is longer than the whole 35-step snippet."""
    horizon = 40
    planner = TrackingPlanner(env, MPCConfig(threads=1, horizon=horizon, knots=2, candidates=3, elites=1,
                                             iterations=1))
    seen, done = [], False
    while not done and len(seen) < 8:
        left = env.last_step - env.time_step
        command = planner.act()
        seen.append((left, planner.last_info.horizon))
        _, _, terminated, truncated, _ = env.step(command)
        done = terminated or truncated
    assert seen[0] == (35, 35)
    assert all(planned == min(horizon, left) for left, planned in seen)
    # last_step is where the episode really ends: kinematic playback runs exactly that many steps
    from pipelines.npmp.experts import reference_score

    assert reference_score(SNIPPET)["full_steps"] == 35


def test_feedback_jacobian_is_the_derivative_of_the_executed_command(env):
    planner = TrackingPlanner(env, MPCConfig(threads=1))
    state = full_state(planner.model, env.physics.data.ptr)
    command = np.clip(planner._base_commands(state[None], env.time_step)[0], -1, 1)
    jacobian = planner.feedback_jacobian(command)
    joints = env.observation_slices("proprio")["walker/joints_pos"]
    names = [j.name for j in env.walker.observable_joints]
    for actuator in (0, 7, 30):
        joint = names.index(env.walker.actuators[actuator].joint.name)
        moved = state.copy()
        moved[planner.actuator_qpos[actuator]] += 1e-4   # the actuator's own joint angle (full-state index)
        changed = np.clip(planner._base_commands(moved[None], env.time_step)[0], -1, 1)
        expected = (changed - command) / 1e-4
        np.testing.assert_allclose(jacobian[:, joints.start + joint], expected, atol=1e-3)
    assert np.count_nonzero(jacobian) <= 56


def test_a_diverged_simulator_is_a_clear_error(env):
    planner = TrackingPlanner(env, MPCConfig(threads=1, candidates=4, elites=2, iterations=1))
    env.physics.data.qvel[3] = np.nan
    with pytest.raises(envs.EnvError, match="not finite"):
        planner.act()


def test_planner_expert_collects_bc_and_lfpc_data(tmp_path):
    from pipelines.npmp import data

    tiny = {"horizon": 4, "knots": 1, "candidates": 4, "iterations": 1, "method": "ps"}
    result = data.collect_planner("09_02-0", trajectories=2, action_noise_std=0.1, perturbation_trajectories=1,
                                  seed=0, settings=tiny)
    bc, nominal = result["bc"], result["nominal"]
    assert len(bc["lengths"]) == 2 and nominal["jacobians"].shape[1:] == (56, bc["states"].shape[1])
    assert len(bc["mean_actions"]) == bc["lengths"].sum() and np.all(np.abs(bc["actions"]) <= 1.0)
    # the executed actions are the planner's commands plus noise; the logged targets are the planner's own
    assert 0.02 < np.abs(bc["actions"] - bc["mean_actions"]).mean() < 0.12
    assert result["attrs"]["env"] == "humanoid-track-time:09_02-0"
    dataset = data.NPMPDataset(data.write_dataset(tmp_path / "data.h5", [result]))
    states, actions, mask, *_ = dataset.sample_bc(4, 10)
    assert states.shape[0] == 4 and actions.shape == (4, 10, 56) and mask.sum() > 0
    assert dataset.sample_lfpc(2, 10, 2)[1].shape == (4, 10, 56)
    # without feedback the planner has no Jacobian: BC data only, and LFPC says so
    plain = data.collect_planner("09_02-0", trajectories=1, action_noise_std=0.1, perturbation_trajectories=1,
                                 seed=0, settings={**tiny, "feedback_gain": 0.0})
    assert "jacobians" not in plain["nominal"]
    with pytest.raises(ConfigError, match="no LFPC Jacobians"):
        data.NPMPDataset(data.write_dataset(tmp_path / "plain.h5", [plain])).sample_lfpc(2, 10, 2)


def test_expert_benchmark_report_groups_snippets_by_kind():
    from benchmarks import experts

    def row(full, mpc_steps, ff_steps):
        record = lambda steps: {"steps_tracked": steps, "tracked_to_end": steps == full,  # noqa: E731
                                "reward_per_step": 0.5, "relative_return": steps * 0.5 / (1.45 * full)}
        return {"full_steps": full, "mpc": {**record(mpc_steps), "seconds_per_control_step": 1.0},
                "feed_forward": record(ff_steps)}

    table = {"07_01-0": row(80, 80, 20), "08_02-0-mirror": row(100, 50, 10), "09_01-0": row(30, 30, 15),
             "99_01-0": row(40, 10, 10)}
    assert [experts.kind(s) for s in table] == ["walk", "walk", "run", "other"]
    lines = experts.report({"snippets": table}).splitlines()
    walk = next(line for line in lines if line.startswith("| walk |"))
    # 2 walks, mean length 90, 1 tracked to the end, median fraction tracked (1.0 + 0.5) / 2
    assert walk.split(" | ")[1:5] == ["2", "90", "1", "0.75"]
    assert next(line for line in lines if line.startswith("| **all** |")).split(" | ")[1:4] == ["4", "62", "2"]
    assert not any("reward per step goes" in line for line in lines)   # no terms recorded: no terms table

    # snippets with the reward's terms recorded get a table of where the reward goes, the others are left out of it
    for sid, error in (("07_01-0", 100.0), ("08_02-0-mirror", 300.0)):
        table[sid]["mpc"].update(median_joints_velocity_error=error, reward_terms_per_step={
            "termination": 0.3, "center_of_mass": 0.02, "joints_velocity": 0.5 * np.exp(-0.1 * error),
            "appendages": 0.01, "body_quaternions": 0.17})
    lines = experts.report({"snippets": table}).splitlines()
    terms = lines[lines.index(next(line for line in lines if "reward per step goes" in line)) + 2:]
    assert terms[0].startswith("| kind | snippets | termination (0.5) |")
    walk = next(line for line in terms if line.startswith("| walk |")).split(" | ")
    assert walk[1:3] == ["2", "0.300"] and walk[-1] == "200 |"    # the median of the two walks' E
    assert not any(line.startswith("| run |") for line in terms)
    # what the relative-return target asks of the velocity term: at that E, with every other term at its maximum,
    # the reward per step is exactly the target's share of playback's 1.45
    ceiling = next(line for line in terms if line.startswith("Without the joint-velocity term"))
    largest_error = float(ceiling.split("E <= ")[1].split()[0])
    assert "relative return of 0.655" in ceiling
    assert abs((0.95 + 0.5 * np.exp(-0.1 * largest_error)) / 1.45 - experts.RELATIVE_TARGET) < 1e-3


def test_expert_benchmark_reads_another_mocap_file(tmp_path):
    """``--mocap`` measures the snippets of another file (looped walks are not shipped); a missing file or a snippet
    it lacks is one error line."""
    import subprocess
    import sys

    from envs.mocap import convert
    from pipelines.npmp.experts import reference_score

    looped = tmp_path / "looped.h5"
    convert.convert_clips(convert.SOURCE_DIR, looped, ["07_01"], loop_seconds=4.0, log=lambda line: None)
    assert reference_score("07_01-0-loop4", looped)["full_steps"] == 134 - 6   # 4 s of frames; the task looks 6 ahead
    script = [sys.executable, "benchmarks/experts.py", "--results", str(tmp_path / "r.json")]
    missing = subprocess.run(script + ["--mocap", str(tmp_path / "nope.h5")], capture_output=True, text=True)
    assert_one_line_error(missing, "no mocap data")
    unknown = subprocess.run(script + ["--mocap", str(looped), "--snippets", "09_01-0"], capture_output=True,
                             text=True)
    assert_one_line_error(unknown, "unknown snippet", "09_01-0")


def test_expert_benchmark_draws_the_planned_episode(tmp_path):
    """``--frames``: the planner's episode as one PNG per snippet, its first pose and its last among the frames."""
    import imageio.v3 as iio

    from benchmarks import experts

    tiny = [arg for pair in ("horizon=4", "knots=1", "candidates=4", "iterations=1", "method=ps")
            for arg in ("--set", pair)]
    results = tmp_path / "r.json"
    assert experts.main(["--snippets", SNIPPET, "--workers", "1", "--results", str(results), "--frames",
                         str(tmp_path / "frames"), *tiny]) == 0
    steps = json.loads(results.read_text())["snippets"][SNIPPET]["mpc"]["steps_tracked"]
    strip = iio.imread(tmp_path / "frames" / f"{SNIPPET}.png")
    width = strip.shape[0] * 4 // 3   # the walker's camera renders 4:3
    assert strip.shape[1] % width == 0 and strip.shape[1] // width == 1 + steps // 33 + (steps % 33 > 0)


def test_velocity_term_benchmark_reads_the_joints_of_the_stored_state(env):
    """benchmarks/velocity_term.py splits the joint-velocity error of a stored run; on a reference made of the run
    itself it finds no error, and on the run two steps ahead it finds the walker's lag."""
    from benchmarks.velocity_term import joint_layout, velocity_errors

    names, qpos, qvel = joint_layout()
    planner = TrackingPlanner(env, MPCConfig(threads=1))
    np.testing.assert_array_equal(qpos, 1 + planner.features.joint_qpos)
    np.testing.assert_array_equal(qvel, 1 + planner.model.nq + planner.features.joint_dof)
    states = [full_state(planner.model, env.physics.data.ptr)]
    for t in range(12):
        env.step(env.feed_forward_actions()[t + 1])
        states.append(full_state(planner.model, env.physics.data.ptr))
    states = np.array(states)
    same = velocity_errors(states, states[:, qpos], states[:, qvel], qpos, qvel, names)
    assert same["E"] == 0 and same["velocity_term"] == 1 and same["lagged"][0] == 0 and same["jitter"] > 0
    ahead = np.concatenate([states[2:], states[-1:], states[-1:]])   # the walker two steps behind it
    lagging = velocity_errors(states, ahead[:, qpos], ahead[:, qvel], qpos, qvel, names)
    assert lagging["lagged"][2] == 0 < lagging["E"] and min(lagging["lagged"], key=lagging["lagged"].get) == 2
    assert set(lagging["joints"]) == {"knees", "ankles", "toes", "hips", "spine and neck", "arms"}


def test_mirror_symmetry_benchmark_carries_nothing_from_one_run_to_the_next(capsys):
    """benchmarks/mirror_symmetry.py: a bent walk and its mirror image under mirrored servo commands. Each run starts
    from a reset simulator (a solver warm start left by the previous run once changed the first step's numbers,
    and made the noslip setting look like it mattered), so a first step reads the same however many follow."""
    from benchmarks.mirror_symmetry import main

    def first_step(steps):
        assert main(["--clip", "07_01", "--rate", "-45", "--steps", str(steps), "--noslip", "5", "0"]) == 0
        rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith(("| 5 ", "| 0 "))]
        return [float(row.split("|")[2].split("/")[0]) for row in rows]

    one, three = first_step(1), first_step(3)
    assert one == three and len(one) == 2 and 0 < one[0] < 0.5


def test_experts_noslip_sets_the_arena_option_and_wants_a_number(capsys, monkeypatch):
    import subprocess
    import sys

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "experts_noslip.py"
    done = subprocess.run([sys.executable, str(script), "--snippets", "07_01-0"], capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.strip().startswith("error: need --noslip")
    monkeypatch.setenv("PROBCTL_NOSLIP_ITERATIONS", "0")
    from dm_control import composer
    original = composer.Arena._build
    try:
        import importlib.util
        spec = importlib.util.spec_from_file_location("experts_noslip", script)
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
        env = envs.make("humanoid-track:07_01-0", seed=0)
        env.reset(seed=0)
        assert env.physics.model.opt.noslip_iterations == 0
    finally:
        composer.Arena._build = original
    assert envs.make("humanoid-track:07_01-0", seed=0).physics.model.opt.noslip_iterations == 5
