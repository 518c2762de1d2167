"""Distributed actors on Ray (--actors): they feed the learner's replay, survive being killed, and resume."""
import functools
import os
import signal

import pytest

import agents
from agents.actors import RayActors
from agents.loop import make_run_env
from tests.test_cli import assert_one_line_error, scalars
from tests.conftest import run_cli

SMALL = {"hidden": "16,16"}


@pytest.fixture(scope="module")
def local_ray():
    import ray

    from cluster import connect_ray

    connect_ray(None, 2)
    yield
    ray.shutdown()


def collect_until(actors, done, limit=2000):
    seen = []
    while not done(seen):
        assert len(seen) < limit, "the actors never delivered"
        seen.append(actors.collect())
    return seen


def test_killed_actor_is_restarted_and_begins_fresh_episodes(local_ray):
    import ray

    config = agents.resolve_config("svg0", SMALL)
    make_env = functools.partial(make_run_env, "cartpole-balance", 4, "svg0", config, "cpu")
    probe = make_env(0)
    learner = agents.make("svg0", probe.observation_space, probe.action_space, config)
    actors = RayActors(make_env, [[1], [2]], "svg0", config, learner, address=None, chunk=5)
    try:
        assert actors.start().transitions == []
        first = collect_until(actors, lambda seen: {s for e in seen for s, _ in e.starts} == {0, 1})
        streams = [stream for experience in first for stream, _ in experience.starts]
        assert sorted(streams) == [0, 1]  # each actor begins its episode with its first chunk, once
        assert all(len(e.transitions) == 5 and all(t.log_prob != 0 for t in e.transitions) for e in first)
        pid = ray.get(actors.actors[1].pid.remote())
        os.kill(pid, signal.SIGKILL)
        seen = collect_until(actors, lambda seen: any(e.starts for e in seen))
        assert actors.failing == [0, 0]  # both deliver again; chunks asked of the dead process were lost
        assert [s for s, _ in seen[-1].starts] == [1] and len(seen[-1].transitions) == 5  # stream 1 afresh
        assert ray.get(actors.actors[1].pid.remote()) != pid
    finally:
        for actor in actors.actors:
            ray.kill(actor)


@pytest.mark.slow   # ~25 s: two Ray actors; test_killed_actor_* covers Ray in the default suite
def test_cli_trains_with_two_actors_and_resumes_without_them(tmp_path):
    run_dir = tmp_path / "run"
    common = ["--set", "batch_size=4", "--set", "hidden=16,16", "--set", "learning_starts=20", "--eval-episodes", "1"]
    result = run_cli("--env", "cartpole-balance", "--agent", "svg0", "--steps", 800, "--actors", 2,
                     "--action-repeat", 4, "--logdir", run_dir, "--checkpoint-every", 800, *common, timeout=400)
    assert result.returncode == 0, result.stderr
    logged = scalars(run_dir)
    assert max(step for step, _ in logged["eval/return"]) >= 800 and logged["replay/size"][-1][1] >= 200
    result = run_cli("--resume", run_dir, "--steps", 1200, "--actors", 0)
    assert result.returncode == 0, result.stderr
    assert max(step for step, _ in scalars(run_dir)["eval/return"]) >= 1200


def test_bad_actor_settings_are_one_line(tmp_path):
    assert_one_line_error(run_cli("--env", "cartpole-balance", "--agent", "svg0", "--actors", "-1",
                                  "--logdir", tmp_path / "a"), "actors must be >= 0")
    assert_one_line_error(run_cli("--env", "cartpole-balance", "--agent", "svg0", "--actors", "1", "--address",
                                  "127.0.0.1:1", "--logdir", tmp_path / "b"), "cannot reach the Ray cluster")
    assert_one_line_error(run_cli("--env", "cartpole-balance", "--agent", "svg0", "--address", "auto",
                                  "--logdir", tmp_path / "c"), "set actors >= 1")
    assert not any((tmp_path / d).exists() for d in "abc")
