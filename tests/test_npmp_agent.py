"""``--agent npmp`` (agents/npmp.py): a frozen NPMP decoder as the low-level controller of an svg0 high-level policy
(seed 000 §8.4 reuse) -- end to end through train.py on ``humanoid`` with TensorBoard falls and latent statistics,
clipped decoder actions, the config's path resolution and one-line errors for bad primitives."""
import json

import gymnasium as gym
import numpy as np
import pytest
import torch

import envs
import train
from agents.config import ConfigError, apply_overrides
from agents.npmp import NPMPAgent, NPMPAgentConfig
from priors.npmp import NPMP, NPMPConfig, load_primitives, save_primitives
from priors.reuse import LatentActionEnv
from tests.test_cli import scalars

HUMANOID_ACTIONS = 56
SMALL = ["--set", "batch_size=4", "--set", "hidden=16,16", "--set", "learning_starts=40", "--set",
         "sequence_length=4", "--set", "replay_capacity=2000", "--eval-episodes", "1"]


def tiny_primitives(directory, state_dim=224, action_dim=HUMANOID_ACTIONS, obs_groups=None, **meta):
    torch.manual_seed(1)
    model = NPMP(NPMPConfig(state_dim, action_dim, latent_dim=4, encoder_hidden=(16,), decoder_hidden=(16,)))
    return save_primitives(model, directory, obs_groups or {"proprio": state_dim}, clips=["tiny"], **meta)


@pytest.fixture
def primitives(tmp_path):
    return tiny_primitives(tmp_path / "primitives")


def test_train_humanoid_logs_falls_and_latent_statistics(primitives, tmp_path, capsys):
    run_dir = tmp_path / "run"
    code = train.main(["--env", "humanoid", "--agent", "npmp", "--steps", "200", "--logdir", str(run_dir),
                       "--set", f"primitives={primitives}", "--eval-every", "1000", *SMALL])
    assert code == 0, capsys.readouterr().err
    logged = scalars(run_dir)
    falls = [v for _, v in logged["train/fell"]]
    assert len(falls) == len(logged["train/episode_return"]) >= 2  # one per episode
    assert set(falls) <= {0.0, 1.0} and max(falls) == 1.0  # random latents through a random decoder fall
    for tag in ("latent/abs_mean", "latent/std"):
        values = [v for _, v in logged[tag]]
        assert len(values) == len(falls) and all(0.0 < v <= 3.0 for v in values)  # |z| <= latent_scale = 3
    assert "loss/critic" in logged  # the high-level policy learned
    config = json.loads((run_dir / "config.json").read_text())["agent"]
    assert config["primitives"] == str(primitives.resolve()) and config["latent_scale"] == 3.0


def test_primitives_path_is_resolved_against_the_current_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = apply_overrides(NPMPAgentConfig(), {"primitives": "mine/npmp"})
    assert config.primitives == str(tmp_path / "mine" / "npmp")
    with pytest.raises(ConfigError, match="latent_controller"):
        apply_overrides(NPMPAgentConfig(), {"latent_controller": "x"})


class RecordActions(gym.Wrapper):
    def step(self, action):
        self.received = np.array(action)
        return self.env.step(action)


def test_env_receives_the_clipped_decoder_mean(primitives):
    model, _ = load_primitives(primitives)
    with torch.no_grad():
        model.decoder[-1].bias.mul_(0.0).add_(torch.linspace(-3.0, 3.0, HUMANOID_ACTIONS))  # some means beyond +-1
    model_dir = primitives.parent / "wide"
    save_primitives(model, model_dir, {"proprio": 224})
    recorder = RecordActions(envs.make("humanoid", seed=0))
    env = NPMPAgent.wrap_env(recorder, apply_overrides(NPMPAgentConfig(), {"primitives": str(model_dir)}), "cpu")
    assert env.action_space.shape == (4,)
    assert env.observation_space == recorder.observation_space  # the high-level policy sees proprio and task
    obs, _ = env.reset()
    for action in (np.array([0.5, -1.0, 0.0, 1.0], np.float32), np.zeros(4, np.float32)):
        z = 3.0 * torch.as_tensor(action)
        with torch.no_grad():
            mean = model.decode(torch.as_tensor(obs["proprio"]), z)[0].numpy()
        obs, _, _, _, info = env.step(action)
        np.testing.assert_allclose(recorder.received, np.clip(mean, -1.0, 1.0), atol=1e-6)
        np.testing.assert_allclose(info["latent"], z.numpy())
        assert np.abs(mean).max() > 1.0 and np.sum(np.abs(recorder.received) < 1.0) > 0  # clipped, not squashed


def assert_one_line_error(capsys, argv, *fragments):
    assert train.main(argv) == 2
    lines = [line for line in capsys.readouterr().err.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: primitives: "), lines
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_bad_primitives_fail_with_one_line(primitives, tmp_path, capsys):
    def run(path, env="humanoid"):
        return ["--env", env, "--agent", "npmp", "--steps", "10", "--logdir", str(tmp_path / "runs" / path.name),
                "--set", f"primitives={path}"]

    assert_one_line_error(capsys, run(tmp_path / "missing"), "no NPMP primitives")
    corrupt = tiny_primitives(tmp_path / "corrupt")
    data = bytearray((corrupt / "weights.safetensors").read_bytes())
    data[-8:] = b"\xff" * 8
    (corrupt / "weights.safetensors").write_bytes(bytes(data))
    assert_one_line_error(capsys, run(corrupt), str(corrupt))
    foreign = tiny_primitives(tmp_path / "foreign")
    meta = json.loads((foreign / "meta.json").read_text())
    (foreign / "meta.json").write_text(json.dumps({**meta, "format": "probctl-prior"}))
    assert_one_line_error(capsys, run(foreign), "not a probctl-npmp-primitives file")
    mismatched = tiny_primitives(tmp_path / "mismatched")
    meta = json.loads((mismatched / "meta.json").read_text())
    (mismatched / "meta.json").write_text(json.dumps({**meta, "config": {**meta["config"], "latent_dim": 5}}))
    assert_one_line_error(capsys, run(mismatched), "do not match their config")
    other_body = tiny_primitives(tmp_path / "other_body", state_dim=200)
    assert_one_line_error(capsys, run(other_body), "observation groups {'proprio': 200}")
    other_actions = tiny_primitives(tmp_path / "other_actions", action_dim=8)
    assert_one_line_error(capsys, run(other_actions), "outputs 8 actions")
    assert not (tmp_path / "runs").exists()  # nothing written for a run that never started


def latent_humanoid(primitives):
    model, meta = load_primitives(primitives)
    return LatentActionEnv(envs.make("humanoid", seed=0), model.decode, model.config.latent_dim, meta["obs_groups"],
                           scale=1.0, mean_to_action="clip", action_dim=model.config.action_dim)


def test_latent_env_capture_replays_the_episode_exactly(primitives):
    env = latent_humanoid(primitives)
    env.reset(seed=3)
    for _ in range(3):
        env.step(np.zeros(4, np.float32))
    captured = env.get_state()
    latents = np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32)

    def run():
        return [(obs["proprio"].copy(), reward) for obs, reward, *_ in map(env.step, latents)]

    first = run()
    env.set_state(captured)
    again = run()
    assert all(np.array_equal(a[0], b[0]) and a[1] == b[1] for a, b in zip(first, again))
    env.close()


def test_latent_planner_leaves_the_episode_where_it_was(primitives):
    from benchmarks.npmp_prior_samples import LatentPlanner

    env = latent_humanoid(primitives)
    env.reset(seed=1)
    planner = LatentPlanner(env, ar_coef=0.95, candidates=3, horizon=5, replan_every=2)
    planner.reset(seed=0)
    before = env.get_state()
    z = planner.act(0)   # tries 3 candidates of 5 steps, then returns to the captured episode
    after = env.get_state()
    assert np.array_equal(before["env"]["physics"], after["env"]["physics"])
    assert np.array_equal(z, planner.plan[0]) and planner.plan.shape == (5, 4)
    env.step(z)
    assert np.array_equal(planner.act(1), planner.plan[1])   # follows its plan between replannings
    with pytest.raises(ValueError, match="replan_every"):
        LatentPlanner(env, 0.95, candidates=3, horizon=5, replan_every=6)
    with pytest.raises(ValueError, match="objective"):
        LatentPlanner(env, 0.95, candidates=3, horizon=5, replan_every=2, objective="reach")
    upright = LatentPlanner(env, 0.95, candidates=3, horizon=5, replan_every=2, objective="upright")
    upright.reset(seed=0)
    survived, steps, head_height = upright._score(np.zeros((5, 4), np.float32))
    assert steps >= 1 and 0.0 < head_height < 2.5   # ranked by the head's height in metres where the candidate ends
    env.close()


def test_innovation_latents_follow_the_ar1_prior_and_are_observed(primitives):
    model, meta = load_primitives(primitives)
    alpha = model.config.ar_coef
    env = LatentActionEnv(envs.make("humanoid", seed=0), model.decode, model.config.latent_dim, meta["obs_groups"],
                          scale=2.0, mean_to_action="clip", action_dim=model.config.action_dim,
                          latent_mode="innovation", ar_coef=alpha)
    assert env.observation_space["latent"].shape == (4,)
    obs, _ = env.reset(seed=0)
    assert np.array_equal(obs["latent"], np.zeros(4, np.float32))   # z_{-1} = 0 at every reset
    actions = np.random.default_rng(1).uniform(-1, 1, size=(3, 4)).astype(np.float32)
    z = np.zeros(4, np.float32)
    for a in actions:
        obs, *_ = env.step(a)
        z = alpha * z + np.sqrt(1 - alpha**2) * 2.0 * a   # eq 8.2 with the action as the innovation
        np.testing.assert_allclose(obs["latent"], z, rtol=1e-5, atol=1e-6)
    captured = env.get_state()
    after, *_ = env.step(actions[0])
    env.set_state(captured)
    again, *_ = env.step(actions[0])
    assert np.array_equal(after["latent"], again["latent"]) and np.array_equal(after["proprio"], again["proprio"])
    with pytest.raises(ValueError, match="ar_coef"):
        LatentActionEnv(envs.make("humanoid", seed=0), model.decode, 4, meta["obs_groups"], latent_mode="innovation")
    env.close()


def test_repeat_keeps_the_decoder_closed_loop_on_every_control_step(primitives):
    """A held high-level action equals k single steps with the same action: the decoder re-reads every state."""
    model, meta = load_primitives(primitives)

    def env(repeat):
        return LatentActionEnv(envs.make("humanoid", seed=0), model.decode, model.config.latent_dim,
                               meta["obs_groups"], scale=2.0, mean_to_action="clip",
                               action_dim=model.config.action_dim, latent_mode="innovation",
                               ar_coef=model.config.ar_coef, repeat=repeat)

    held, single = env(3), env(1)
    held.reset(seed=2)
    single.reset(seed=2)
    action = np.random.default_rng(0).uniform(-1, 1, size=4).astype(np.float32)
    obs, reward, terminated, _, info = held.step(action)
    total = 0.0
    for _ in range(3):
        expected, r, done, *_ = single.step(action)
        total += r
        if done:
            break
    assert np.array_equal(obs["proprio"], expected["proprio"]) and np.array_equal(obs["latent"], expected["latent"])
    assert reward == pytest.approx(total) and held.metadata["render_fps"] == 11   # 33 control steps/s, 1 in 3
    with pytest.raises(ValueError, match="repeat"):
        env(0)
    held.close()
    single.close()


def test_npmp_action_repeat_is_the_controllers_and_counts_env_steps(primitives, tmp_path):
    """--action-repeat on npmp holds the latent, not the decoder's action; the run still counts control steps."""
    from agents.loop import make_run_env

    config = apply_overrides(NPMPAgentConfig(), {"primitives": str(primitives)})
    env = make_run_env("humanoid", 3, "npmp", config, "cpu", 0)
    assert env.repeat == 3 and env.unwrapped.action_repeat == 1
    env.close()
    assert train.main(["--env", "humanoid", "--agent", "npmp", "--steps", "60", "--action-repeat", "3",
                       "--logdir", str(tmp_path / "r"), "--set", f"primitives={primitives}", "--eval-every",
                       "1000", "--checkpoint-every", "60", *SMALL, "--set", "learning_starts=5"]) == 0
    state = json.loads((tmp_path / "r" / "checkpoints" / "step-000000060" / "state.json").read_text())
    counters = state["counters"]   # 20 decisions of 3 control steps each (as the env's own repeat is counted)
    assert counters["env_steps"] == 60 and counters["actor_steps"] == 20


def test_npmp_innovation_mode_trains_and_rejects_unknown_modes(primitives, tmp_path, capsys):
    def run(mode):
        return train.main(["--env", "humanoid", "--agent", "npmp", "--steps", "120", "--logdir",
                           str(tmp_path / mode), "--set", f"primitives={primitives}", "--set", f"latent_mode={mode}",
                           "--eval-every", "1000", *SMALL])

    assert run("innovation") == 0, capsys.readouterr().err
    assert "loss/critic" in scalars(tmp_path / "innovation")   # the policy, observing z_{t-1}, learned
    capsys.readouterr()
    assert run("white") == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "latent_mode must be one of" in lines[0], lines
    assert not (tmp_path / "white").exists()


@pytest.fixture(scope="module")
def steer_walk(tmp_path_factory):
    """A walk looped to 4 s with its arcs at 15 deg/s, and tiny primitives that read the reference's path."""
    from envs.mocap import convert

    root = tmp_path_factory.mktemp("steer")
    mocap = root / "walk.h5"
    assert convert.main(["--clips", "07_01", "--loop", "4", "--curve", "15", "--output", str(mocap)]) == 0
    torch.manual_seed(2)
    model = NPMP(NPMPConfig(224, HUMANOID_ACTIONS, latent_dim=4, encoder_hidden=(16,), decoder_hidden=(16,),
                            lookahead=2, lookahead_source="reference", path_offsets=(15, 30)))
    return save_primitives(model, root / "pathed", {"proprio": 224}, clips=["tiny"]), mocap, "07_01-0-loop4"


def test_a_yaw_rate_steers_the_walk_the_primitives_read(steer_walk):
    """steer_walk: the episode starts on the walk's first frame, the action is a yaw rate held at 0 through the
    lead-in and slewed after it, and the env receives the decoder's clipped mean with the latent the encoder gives
    for the walk bent at that rate."""
    from agents.npmp import walk_references
    from envs.mocap.tracking import MocapStarts
    from priors.npmp.reference import bent_reference_input

    primitives, mocap, walk = steer_walk
    config = apply_overrides(NPMPAgentConfig(), {"primitives": str(primitives), "steer_walk": walk,
                                                 "steer_mocap": str(mocap)})
    recorder = RecordActions(envs.make("humanoid", seed=0, **NPMPAgent.env_options(config)))
    env = NPMPAgent.wrap_env(recorder, config, "cpu")
    assert env.action_space.shape == (1,) and set(env.observation_space.spaces) == {"proprio", "task", "steer"}
    obs, _ = env.reset(seed=1)
    first = MocapStarts(mocap, snippet=walk).frames["joints"][0]
    np.testing.assert_allclose(recorder.env.physics.bind(recorder.env.task.walker.mocap_joints).qpos, first,
                               atol=1e-6)
    model, _ = load_primitives(primitives)
    read = bent_reference_input(model, walk_references(walk, 15.0, str(mocap)), 15.0)
    z = torch.zeros(4)
    rates = []
    for t in range(80):
        state = torch.as_tensor(obs["proprio"])
        obs, _, terminated, _, info = env.step(np.array([1.0], np.float32))
        rates.append(info["yaw_rate"])
        with torch.no_grad():
            z, _ = model.encode_step(z, torch.cat([state, read(t, rates[-1])]))
            mean = model.decode(state, z)[0].numpy()
        np.testing.assert_allclose(recorder.received, np.clip(mean, -1.0, 1.0), atol=1e-5)
        assert obs["steer"][0] == pytest.approx(rates[-1] / 15.0)
        if terminated:
            break
    hold = round(2.0 / 0.03)
    assert rates[:hold] == [0.0] * min(hold, len(rates))   # the walk's lead-in is its own
    if len(rates) > hold + 1:   # then the rate climbs by the slew, 15 deg/s per s
        assert rates[hold] == pytest.approx(15.0 * 0.03) and rates[hold + 1] == pytest.approx(2 * 15.0 * 0.03)


def test_steered_walk_errors_are_one_line(steer_walk, tmp_path, capsys):
    primitives, mocap, walk = steer_walk
    with pytest.raises(ConfigError, match="steer_mocap"):
        apply_overrides(NPMPAgentConfig(), {"steer_walk": walk})
    with pytest.raises(ConfigError, match="latent_mode"):
        apply_overrides(NPMPAgentConfig(), {"steer_walk": walk, "steer_mocap": str(mocap),
                                            "latent_mode": "innovation"})
    with pytest.raises(ConfigError, match="steer_arc_style"):
        apply_overrides(NPMPAgentConfig(), {"steer_walk": walk, "steer_mocap": str(mocap), "steer_arc_style": "spun"})

    def run(**settings):
        sets = [x for k, v in {"primitives": primitives, "steer_walk": walk, "steer_mocap": mocap, **settings}.items()
                for x in ("--set", f"{k}={v}")]
        return ["--env", "humanoid", "--agent", "npmp", "--steps", "10", "--logdir", str(tmp_path / "runs" / "x"),
                *sets]

    for settings, fragment in (({"primitives": tiny_primitives(tmp_path / "blind")}, "do not read the path"),
                               ({"steer_walk": "07_01-0-loop9"}, "07_01-0-loop9"),
                               ({"steer_arc_rate": 30}, "07_01-0-loop4-left30"),
                               ({"steer_arc_style": "stepped"}, "07_01-0-loop4-stepleft15")):
        assert train.main(run(**settings)) == 2
        lines = [line for line in capsys.readouterr().err.strip().splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], lines
    assert not (tmp_path / "runs").exists()
    with pytest.raises(envs.EnvError, match="start='mocap'"):
        envs.make("cmu_humanoid-moving-target", start_snippet=walk, ref_path=str(mocap))


def test_train_steers_humanoid_by_yaw_rate(steer_walk, tmp_path, capsys):
    primitives, mocap, walk = steer_walk
    run_dir = tmp_path / "run"
    code = train.main(["--env", "humanoid", "--agent", "npmp", "--steps", "120", "--logdir", str(run_dir),
                       "--set", f"primitives={primitives}", "--set", f"steer_walk={walk}", "--set",
                       f"steer_mocap={mocap}", "--eval-every", "1000", *SMALL])
    assert code == 0, capsys.readouterr().err
    logged = scalars(run_dir)
    assert len(logged["steer/mean_abs_rate"]) == len(logged["train/episode_return"]) >= 1
    assert "loss/critic" in logged


def test_steer_humanoid_benchmark_measures_targets_and_resumes(steer_walk, tmp_path, capsys):
    """benchmarks/npmp_steer_humanoid.py: every controller's episodes are kept per primitives and controller, the
    same episode gives the same row, and a rerun measures nothing new."""
    from benchmarks.npmp_steer_humanoid import main, target_bearing

    assert target_bearing(np.array([0.0, -2.0, 0.0])) == 0.0   # straight ahead: along the root's -y
    assert target_bearing(np.array([2.0, 0.0, 0.0])) == pytest.approx(90.0)   # the root's +x is its left
    primitives, mocap, walk = steer_walk
    results = tmp_path / "steer.json"
    common = ["--mocap", str(mocap), "--walk", walk, "--primitives", str(primitives), "--episodes", "1",
              "--results", str(results), "--horizon", "0.3", "--replan", "0.3"]
    assert main(common) == 0
    rows = json.loads(results.read_text())["primitives"][str(primitives)]
    assert len(rows) == 3 and all(set(r) == {"0"} for r in rows.values())
    for row in (r["0"] for r in rows.values()):
        assert 1 <= row["steps"] <= 834 and row["targets_reached"] >= 0 and row["first_target_m_and_bearing"][0] >= 2
    straight = rows["straight, rate 15, slew 15"]["0"]
    assert straight["mean_abs_rate"] == 0 and straight["commanded_turn_degrees"] == 0
    capsys.readouterr()
    assert main(common) == 0 and "episode 0:" not in capsys.readouterr().out   # kept, not measured again
    with pytest.raises(SystemExit) as exited:
        main([*common, "--controllers", "planned", "--candidates", "20"])
    assert exited.value.code == 2
    # drawn: the same episode again, one strip of frames
    assert main([*common, "--controllers", "straight", "--frames", str(tmp_path / "frames")]) == 0
    assert [p.name for p in (tmp_path / "frames").iterdir()] == [f"{str(primitives).replace('/', '_')}__straight__0.png"]
    assert json.loads(results.read_text())["primitives"][str(primitives)]["straight, rate 15, slew 15"]["0"] == straight
    # how much turning the task asks for: a sharper turn reaches more of the first targets, a turn in place all
    assert main(["--mocap", str(mocap), "--walk", walk, "--reach", "40", "--results", str(results)]) == 0
    shares = [r["share_reachable"] for r in json.loads(results.read_text())["reach"]["by_max_rate_deg_per_s"].values()]
    assert shares == sorted(shares) and shares[0] < 0.5 and shares[-1] > 0.9
    assert "--candidates within --max-rate" in capsys.readouterr().err
