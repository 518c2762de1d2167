"""svg0 exploration options (seed 004 §4): NoisyNet reset points, bootstrapped critic heads with randomised priors
and fixed masks, Thompson-style and UCB acting."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from agents.config import ConfigError
from agents.exploration import CUT_TRACES, ExplorationSection
from agents.svg0 import SVG0Agent, SVG0Config
from inference.layers import NoisyLinear, fixed_bootstrap_mask, ucb_action

OBS = spaces.Dict({"proprio": spaces.Box(-np.inf, np.inf, (4,), np.float32)})
ACTIONS = spaces.Box(-1.0, 1.0, (2,), np.float32)


def agent(kind, core=None, **section) -> SVG0Agent:
    """svg0 exploring by ``kind``; ``section``: the exploration settings, ``core``: svg0's own. Raw observations:
    these tests recompute the agent's choices from the states they feed it."""
    return SVG0Agent(OBS, ACTIONS, SVG0Config(hidden=(16, 16), exploration=ExplorationSection(kind=kind, **section),
                                              obs_norm=False, **(core or {})))


def batch(write_id=None, B=4, K=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {"obs": torch.randn(B, K + 1, 4, generator=g), "action": torch.rand(B, K, 2, generator=g) * 2 - 1,
            "behaviour_log_prob": torch.randn(B, K, generator=g), "reward": torch.randn(B, K, generator=g),
            "discount": torch.ones(B, K), "mask": torch.ones(B, K),
            "write_id": write_id if write_id is not None else torch.arange(B * K).reshape(B, K)}


def noise_state(network):
    return [m.eps_in.clone() for m in network.modules() if isinstance(m, NoisyLinear)]


def same(a, b):
    return all(torch.equal(x, y) for x, y in zip(a, b))


def test_noisy_resets_noise_only_where_documented_and_evaluates_without_noise():
    a = agent("noisy")
    obs = np.random.default_rng(0).normal(size=4).astype(np.float32)
    networks = (a.policy, a.critic, a.target_policy, a.target_critic)
    before = [noise_state(n) for n in networks]
    first, _ = a.act(obs, deterministic=True)
    second, _ = a.act(obs, deterministic=True)
    np.testing.assert_array_equal(first, second)  # evaluation is deterministic ...
    assert all(same(b, noise_state(n)) for b, n in zip(before, networks))  # ... and redraws nothing
    a.policy.eval()
    expected = a.policy(torch.as_tensor(obs)[None]).mode[0].detach().numpy()  # the noise-free mean network
    a.policy.train()
    np.testing.assert_allclose(first, expected)

    a.act(obs)  # a stochastic action redraws the acting policy's noise, nothing else
    assert not same(before[0], noise_state(a.policy))
    assert all(same(b, noise_state(n)) for b, n in zip(before[1:], networks[1:]))

    after_act = [noise_state(n) for n in networks]
    a.update(batch())  # every learner update redraws all four networks' noise
    assert all(not same(b, noise_state(n)) for b, n in zip(after_act, networks))
    assert a.policy.training  # evaluation restored training mode


def test_bootstrap_heads_train_only_on_their_masked_transitions():
    a = agent("bootstrap", ensemble_size=3)
    ids = torch.arange(5000)
    masks = fixed_bootstrap_mask(ids, 3, a.config.exploration.mask_prob, a.exploration.mask_salt)
    chosen = ids[(masks[:, 0] == 0) & (masks[:, 1] == 1)][:12].reshape(4, 3)  # head 0 sees none of them
    def head(k):  # head k's slice of every batched parameter of the critic
        return [p[k].detach().clone() for p in a.critic.body.parameters()]

    before = [head(k) for k in range(3)]
    a.update(batch(write_id=chosen))
    assert same(before[0], head(0))
    assert not same(before[1], head(1))
    torch.testing.assert_close(a.exploration.critic_weights(batch(write_id=chosen)), masks[chosen])


@pytest.mark.parametrize("exploration", ["bootstrap", "ucb"])
def test_randomised_prior_networks_stay_frozen(exploration):
    a = agent(exploration, core={"target_period": 1})
    priors = [p.clone() for p in a.critic.prior.parameters()]
    assert all(not p.requires_grad for p in a.critic.prior.parameters())
    for seed in range(3):
        a.update(batch(seed=seed))
    assert same(priors, list(a.critic.prior.parameters()))
    assert same(priors, list(a.target_critic.prior.parameters()))


def test_ensemble_heads_differ_through_their_priors():
    a = agent("bootstrap")
    q = a.critic(torch.randn(7, 4), torch.rand(7, 2) * 2 - 1)
    assert q.shape == (7, a.config.exploration.ensemble_size)
    assert q.std(-1).min() > 0


def test_thompson_acting_uses_the_episode_head_and_cuts_traces():
    a = agent("bootstrap", ensemble_size=4, candidate_actions=16)
    obs = np.zeros(4, np.float32)
    heads = set()
    for _ in range(20):
        a.begin_episode()
        heads.add(a.exploration.head)
    assert len(heads) > 1  # a head drawn per episode
    torch.manual_seed(3)
    action, log_mu = a.act(obs)
    torch.manual_seed(3)
    state = torch.as_tensor(obs)[None]
    candidates, _ = a.policy(state).rsample_with_log_prob(16)
    q = a.critic(state, candidates)[:, 0]
    np.testing.assert_allclose(action, candidates[q[:, a.exploration.head].argmax(), 0].detach().numpy())
    assert log_mu == CUT_TRACES
    b = batch()
    b["behaviour_log_prob"][:] = CUT_TRACES
    _, metrics = a.retrace_targets(b)
    assert metrics["retrace/mean_c"] == 0.0  # one-step targets for actions with an intractable density


def test_ucb_acts_on_mean_plus_lambda_std_over_candidates():
    a = agent("ucb", ucb_lambda=2.0, candidate_actions=16)
    obs = np.ones(4, np.float32)
    torch.manual_seed(4)
    action, _ = a.act(obs)
    torch.manual_seed(4)
    state = torch.as_tensor(obs)[None]
    candidates, _ = a.policy(state).rsample_with_log_prob(16)
    q = a.critic(state, candidates)[:, 0]  # [M, heads]
    best = int(ucb_action(q.T, 2.0))
    np.testing.assert_allclose(action, candidates[best, 0].detach().numpy())
    assert best == int((q.mean(-1) + 2.0 * q.std(-1, correction=0)).argmax())


def test_exploration_settings_are_validated():
    with pytest.raises(ConfigError, match="exploration"):
        SVG0Config(exploration=ExplorationSection(kind="thompson")).validate()
    SVG0Config(exploration=ExplorationSection(kind="bootstrap"), critics=2).validate()  # the ensemble's heads replace the twin critics
