"""Sequence replay: sequences stop at episode ends and at the ring's write position (agents/replay.py)."""
import numpy as np
import pytest

from agents.replay import SequenceReplay


def fill(replay, episodes, rng):
    """Write episodes whose observations are [episode id, step]; return {episode: (length, terminated)}."""
    info = {}
    for ep in range(episodes):
        length, terminated = int(rng.integers(1, 15)), bool(rng.random() < 0.5)
        replay.start_episode(np.array([ep, 0], np.float32))
        for t in range(length):
            last = t == length - 1
            replay.add(np.array([t / 20.0]), -1.0, reward=float(100 * ep + t), terminated=terminated and last,
                       next_obs=np.array([ep, t + 1], np.float32), episode_over=last)
        info[ep] = (length, terminated)
    return info


def check(batch, info, K):
    obs, mask = batch["obs"].numpy(), batch["mask"].numpy()
    for b in range(obs.shape[0]):
        ep, start = int(obs[b, 0, 0]), int(obs[b, 0, 1])
        length, terminated = info[ep]
        n = int(mask[b].sum())
        assert np.all(mask[b, :n] == 1) and np.all(mask[b, n:] == 0), "mask must be a prefix of ones"
        assert n == min(K, length - start), "sequence must run to the window or the episode end, no further"
        np.testing.assert_array_equal(obs[b, : n + 1, 0], ep)  # never straddles episodes
        np.testing.assert_array_equal(obs[b, : n + 1, 1], np.arange(start, start + n + 1))
        np.testing.assert_array_equal(batch["reward"][b, :n].numpy(), 100 * ep + np.arange(start, start + n))
        discounts = batch["discount"][b, :n].numpy()
        ends_here = start + n == length
        expected_last = 0.0 if (terminated and ends_here) else 1.0
        assert np.all(discounts[:-1] == 1) and discounts[-1] == expected_last


@pytest.mark.parametrize("capacity", [10_000, 97])  # 97: the ring wraps many times
def test_sequences_respect_episode_boundaries_and_wraparound(capacity):
    rng = np.random.default_rng(0)
    replay = SequenceReplay(capacity, obs_dim=2, action_dim=1, sequence_length=5, rng=rng)
    info = fill(replay, 60, rng)
    for _ in range(20):
        check(replay.sample(64), info, K=5)


def test_open_episode_is_sampled_only_up_to_its_newest_state():
    replay = SequenceReplay(100, obs_dim=2, action_dim=1, sequence_length=8, rng=np.random.default_rng(1))
    replay.start_episode(np.array([0, 0], np.float32))
    for t in range(3):
        replay.add(np.zeros(1), 0.0, 1.0, False, np.array([0, t + 1], np.float32), episode_over=False)
    batch = replay.sample(32)
    starts = batch["obs"][:, 0, 1].numpy().astype(int)
    np.testing.assert_array_equal(batch["mask"].sum(1).numpy(), 3 - starts)


def test_add_before_start_episode_is_an_error():
    replay = SequenceReplay(100, obs_dim=1, action_dim=1, sequence_length=2)
    with pytest.raises(RuntimeError, match="start_episode"):
        replay.add(np.zeros(1), 0.0, 0.0, False, np.zeros(1), False)


def test_arrays_round_trip():
    rng = np.random.default_rng(2)
    a = SequenceReplay(50, obs_dim=2, action_dim=1, sequence_length=4, rng=np.random.default_rng(3))
    info = fill(a, 5, rng)
    b = SequenceReplay(50, obs_dim=2, action_dim=1, sequence_length=4, rng=np.random.default_rng(3))
    b.load(a.arrays(), a.counters())
    for name, array in a.arrays().items():
        np.testing.assert_array_equal(array, b.arrays()[name])
    check(b.sample(16), info, K=4)
