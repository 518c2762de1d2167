"""SVG(0) learner structure (seed 000 Alg 9): what each loss may change, target copies, config errors."""
import numpy as np
import pytest
import torch
from gymnasium import spaces

import agents
from agents.config import ConfigError
from agents.replay import SequenceReplay

OBS = spaces.Dict({"proprio": spaces.Box(-np.inf, np.inf, (3,), np.float32),
                   "task": spaces.Box(-np.inf, np.inf, (2,), np.float32)})
ACT = spaces.Box(-1, 1, (2,), np.float32)


def make_agent(**overrides):
    config = agents.resolve_config("svg0", {"hidden": "16,16", **overrides})
    return agents.make("svg0", OBS, ACT, config)


def batch_for(agent, seed=0):
    rng = np.random.default_rng(seed)
    replay = SequenceReplay(200, 5, 2, agent.config.sequence_length, rng)
    for _ in range(5):
        replay.start_episode(rng.normal(size=5).astype(np.float32))
        for t in range(12):
            action, log_prob = agent.act(rng.normal(size=5).astype(np.float32))
            replay.add(action, log_prob, rng.normal(), t == 11, rng.normal(size=5).astype(np.float32), t == 11)
    return replay.sample(8)


def params(module):
    return [p.detach().clone() for p in module.parameters()]


def changed(before, module):
    return any(not torch.equal(a, b) for a, b in zip(before, module.parameters()))


def test_update_changes_online_networks_only_and_copies_targets_every_period():
    torch.manual_seed(0)
    agent = make_agent(target_period="3")
    batch = batch_for(agent)
    target_policy, target_critic = params(agent.target_policy), params(agent.target_critic)
    policy, critic = params(agent.policy), params(agent.critic)
    agent.update(batch)
    assert changed(policy, agent.policy) and changed(critic, agent.critic)
    assert not changed(target_policy, agent.target_policy) and not changed(target_critic, agent.target_critic)
    agent.update(batch)
    agent.update(batch)  # third update: hard copy online -> target (Alg 9 step 5)
    for online, target in ((agent.policy, agent.target_policy), (agent.critic, agent.target_critic)):
        for a, b in zip(online.parameters(), target.parameters()):
            assert torch.equal(a, b)


def test_policy_gradient_flows_only_through_the_reparameterised_action():
    """The policy loss must not move the critic: its only path into Q^T is the sampled action (Alg 9 step 4)."""
    torch.manual_seed(1)
    agent = make_agent(entropy_auto="false", entropy_coef="0")
    agent.update(batch_for(agent))
    assert all(not p.requires_grad and p.grad is None for p in agent.target_critic.parameters())
    assert all(p.grad is None for p in agent.target_policy.parameters())
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in agent.policy.parameters())


@pytest.mark.parametrize("critics", ["1", "2"])
def test_metrics_are_finite_and_importance_weights_bounded(critics):
    torch.manual_seed(2)
    agent = make_agent(retrace_lambda="0.9", critics=critics)
    metrics = agent.update(batch_for(agent))
    assert all(np.isfinite(v) for v in metrics.values())
    assert 0.0 <= metrics["retrace/mean_c"] <= 0.9 + 1e-6


def test_state_dict_round_trip_reproduces_actions():
    agent = make_agent()
    agent.update(batch_for(agent))
    other = make_agent()
    other.load_state_dict(agent.state_dict())
    obs = np.ones(5, np.float32)
    np.testing.assert_array_equal(agent.act(obs, deterministic=True)[0], other.act(obs, deterministic=True)[0])


def test_discrete_action_space_is_rejected_with_a_clear_message():
    with pytest.raises(ConfigError, match="continuous"):
        agents.make("svg0", OBS, spaces.Discrete(3), agents.resolve_config("svg0", {}))
