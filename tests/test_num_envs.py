"""Several environments per actor (--num-envs): interleaved replay streams, the update schedule, worker processes."""
import functools
import os
import signal

import numpy as np
import pytest

from agents.schedule import Schedule
from agents.replay import SequenceReplay
from agents.vector import EnvPool, EnvWorkerError
from tests.conftest import run_cli
from tests.test_cli import assert_one_line_error, scalars


def test_interleaved_streams_keep_their_own_sequences():
    """Three streams write rows in turn; every sampled sequence follows one stream's episode, step by step."""
    rng = np.random.default_rng(0)
    replay = SequenceReplay(500, 2, 1, 4, rng)
    lengths = {0: 7, 1: 3, 2: 11}
    t = {s: 0 for s in lengths}
    for s in lengths:
        replay.start_episode(np.array([s, 0], np.float32), stream=s)
    for _ in range(40):
        for s, length in lengths.items():
            t[s] += 1
            over = t[s] % length == 0
            replay.add(np.array([s]), 0.0, float(s), False, np.array([s, t[s]], np.float32), over, stream=s)
            if over:
                t[s] += 1  # the new episode's first row gets the next counter value
                replay.start_episode(np.array([s, t[s]], np.float32), stream=s)
    batch = replay.sample(256)
    obs, mask = batch["obs"].numpy(), batch["mask"].numpy()
    for b in range(256):
        steps = int(mask[b].sum())
        assert steps >= 1
        stream = obs[b, 0, 0]
        assert np.all(obs[b, :steps + 1, 0] == stream)  # never another stream's row
        assert np.all(np.diff(obs[b, :steps + 1, 1]) == 1)  # consecutive steps of one episode
        assert np.all(batch["reward"].numpy()[b, :steps] == stream)


def test_update_points_keep_the_ratio_for_any_number_of_envs():
    every2 = Schedule(learning_starts=3, update_every=2)
    assert [every2.updates_between(k - 1, k) for k in range(1, 9)] == [0, 0, 0, 1, 0, 1, 0, 1]
    assert every2.updates_between(0, 8) == 3 and every2.updates_between(8, 16) == 4
    assert Schedule(learning_starts=3, update_every=1).updates_between(0, 2) == 0
    every3 = Schedule(learning_starts=5, update_every=3, updates_per_step=2)
    single = sum(every3.updates_between(k - 1, k) for k in range(1, 101))
    assert single == 2 * 32 and sum(every3.updates_between(k - 4, k) for k in range(4, 101, 4)) == single


def _counter_env(seed):
    import gymnasium as gym

    class Counter(gym.Env):
        observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        action_space = gym.spaces.Box(-1, 1, (1,), np.float32)

        def reset(self, seed=None, options=None):
            self.t = 0
            return np.array([seed or 0, 0], np.float32), {}

        def step(self, action):
            self.t += 1
            return np.array([float(action[0]), self.t], np.float32), 1.0, False, self.t == 3, {"pid": os.getpid()}

    return Counter()


def test_pool_steps_every_env_in_its_own_process_and_resets_at_episode_ends():
    pool = EnvPool(functools.partial(_counter_env), [0, 1])
    try:
        assert pool.reset(0)[0] == 0 and pool.reset(1, seed=7)[0] == 7
        for t in range(1, 4):
            results = pool.step([np.array([0.5]), np.array([-0.5])])
            assert [r.obs[0] for r in results] == [0.5, -0.5] and all(r.obs[1] == t for r in results)
        assert all(r.truncated and r.reset_obs is not None for r in results)
        pids = {r.info["pid"] for r in results}
        assert len(pids) == 2 and os.getpid() not in pids
        os.kill(results[1].info["pid"], signal.SIGKILL)
        with pytest.raises(EnvWorkerError, match="worker 1 died"):
            pool.step([np.array([0.0]), np.array([0.0])])
    finally:
        pool.close()


def test_cli_runs_two_envs_and_resumes_with_one(tmp_path):
    run_dir = tmp_path / "run"
    common = ["--set", "batch_size=4", "--set", "hidden=16,16", "--set", "learning_starts=20", "--eval-episodes", "1"]
    result = run_cli("--env", "cartpole-balance", "--agent", "svg0", "--steps", 400, "--num-envs", 2,
                     "--action-repeat", 2, "--logdir", run_dir, "--checkpoint-every", 400, *common)
    assert result.returncode == 0, result.stderr
    assert (run_dir / "checkpoints" / "latest").exists()
    result = run_cli("--resume", run_dir, "--steps", 600, "--num-envs", 1)
    assert result.returncode == 0, result.stderr
    assert "done: 600 env steps" in result.stdout
    assert max(step for step, _ in scalars(run_dir)["eval/return"]) == 600


@pytest.mark.parametrize("flag", [["--num-envs", "0"], ["--num-envs", "-3"]])
def test_bad_num_envs_is_one_line(flag, tmp_path):
    result = run_cli("--env", "cartpole-balance", "--agent", "svg0", "--logdir", tmp_path / "r", *flag)
    assert_one_line_error(result, "num_envs must be positive")
    assert not (tmp_path / "r").exists()


def test_a_stream_whose_open_row_was_overwritten_never_links_into_another_stream():
    """Stream 1 writes more than a capacity of rows while stream 0 waits: stream 0's next step must not land on
    (and link from) stream 1's row that took its place."""
    replay = SequenceReplay(6, 2, 1, 3, np.random.default_rng(0))
    replay.start_episode(np.array([0, 0], np.float32), stream=0)
    replay.start_episode(np.array([1, 0], np.float32), stream=1)
    for t in range(1, 9):
        replay.add(np.array([1.0]), 0.0, 1.0, False, np.array([1, t], np.float32), False, stream=1)
    replay.add(np.array([0.0]), 0.0, 0.0, False, np.array([0, 1], np.float32), False, stream=0)  # its row is gone
    replay.add(np.array([0.0]), 0.0, 0.0, False, np.array([0, 2], np.float32), False, stream=0)
    batch = replay.sample(200)
    obs, mask = batch["obs"].numpy(), batch["mask"].numpy()
    for b in range(200):
        steps = int(mask[b].sum())
        assert np.all(obs[b, :steps + 1, 0] == obs[b, 0, 0])  # one stream per sequence
        assert np.all(np.diff(obs[b, :steps + 1, 1]) == 1)
        assert np.all(batch["reward"].numpy()[b, :steps] == obs[b, 0, 0])
