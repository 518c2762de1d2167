"""svg0 learns: cartpole-balance (dm_control) in a few minutes on one CPU thread, far above a random policy."""
import numpy as np
import pytest

import agents
import envs
from agents.loop import RunConfig, Trainer


def random_policy_return(env_name, repeat, episodes=3):
    env = envs.make(env_name, seed=123, action_repeat=repeat)
    env.action_space.seed(0)
    total = 0.0
    for episode in range(episodes):
        env.reset(seed=episode)
        done = False
        while not done:
            _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            total += reward
            done = terminated or truncated
    return total / episodes


@pytest.mark.slow
def test_svg0_solves_cartpole_balance(tmp_path):
    """9,000 actor steps (36k simulator steps) with one update per actor step: about 4 minutes on one core.

    With the default two actor steps per update the same return needs about twice the actor steps.
    """
    config, schedule = agents.resolve("svg0", {"learning_starts": "200", "update_every": "1"})
    run = RunConfig(env="cartpole-balance", agent="svg0", steps=36_000, seed=0, action_repeat=4, device="cpu",
                    logdir=str(tmp_path), eval_every=36_000, eval_episodes=2, checkpoint_every=36_000,
                    schedule=schedule)
    result = Trainer(run, config).train()
    random_return = random_policy_return("cartpole-balance", 4)
    print(f"svg0 eval return {result['eval_return']:.1f}, random policy {random_return:.1f}")
    assert result["eval_return"] > 700, result  # the maximum is 1000
    assert result["eval_return"] > random_return + 300
