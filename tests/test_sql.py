"""Soft Q-learning (agents/sql.py; Haarnoja et al. 2017): the soft value estimate (eq. 10), the soft Bellman target
(eq. 11), the amortised-SVGD sampler (eqs. 13-14) on a known bimodal Q, acting, targets, config errors, the CLI."""
import math

import numpy as np
import pytest
import torch
from gymnasium import spaces
from torch import nn

import agents
from agents.config import ConfigError
from agents.replay import SequenceReplay
from agents.sql import log_one_minus_tanh_sq, soft_value

OBS = spaces.Dict({"proprio": spaces.Box(-np.inf, np.inf, (3,), np.float32)})
ACT = spaces.Box(-1, 1, (2,), np.float32)
CENTRES = torch.tensor([[0.5, 0.5], [-0.5, -0.5]])


def make_agent(batch_size=8, **overrides):
    config = agents.resolve_config("sql", {"hidden": "16,16", "sampler_hidden": "16",
                                           **{k: str(v) for k, v in overrides.items()}})
    agent = agents.make("sql", OBS, ACT, config)
    agent.test_batch_size = batch_size   # what batch_for samples
    return agent


class FixedQ(nn.Module):
    """A critic with a known Q(s, a) (the state is ignored): Q = alpha * log_density(a)."""

    def __init__(self, log_density, alpha=1.0):
        super().__init__()
        self.log_density, self.alpha = log_density, alpha

    def forward(self, obs, action):
        return (self.alpha * self.log_density(action)).unsqueeze(-1)


def mixture_log_density(sigma):
    """Equal mixture of N(+-(0.5, 0.5), sigma^2 I), unnormalised."""
    return lambda a: torch.logsumexp(-((a.unsqueeze(-2) - CENTRES) ** 2).sum(-1) / (2 * sigma ** 2), -1)


def batch_for(agent, terminal_every=5, seed=0):
    rng = np.random.default_rng(seed)
    replay = SequenceReplay(200, 3, 2, agent.config.sequence_length, rng)
    for _ in range(4):
        replay.start_episode(rng.normal(size=3).astype(np.float32))
        for t in range(terminal_every):
            action, log_prob = agent.act(rng.normal(size=3).astype(np.float32))
            last = t == terminal_every - 1
            replay.add(action, log_prob, rng.normal(), last, rng.normal(size=3).astype(np.float32), last)
    return replay.sample(agent.test_batch_size)


# -- the soft value, eq. 10 ----------------------------------------------------------------------------------------
def test_soft_value_of_a_constant_q_is_exact():
    """Q = c everywhere: V = alpha log int_[-1,1]^d exp(c/alpha) da = c + alpha d log 2, for any sample size."""
    q = torch.full((5, 7), 1.3)
    for alpha in (0.1, 1.0, 4.0):
        torch.testing.assert_close(soft_value(q, alpha, 2), torch.full((5,), 1.3 + alpha * 2 * math.log(2)))


def test_soft_value_of_a_quadratic_q_matches_the_closed_form():
    """Q(a) = -k ||a||^2 on [-1, 1]^d: V = alpha d log( sqrt(pi alpha / k) erf(sqrt(k / alpha)) )."""
    torch.manual_seed(0)
    k, alpha, d, m = 2.0, 0.5, 2, 200_000
    a = torch.rand(m, d, dtype=torch.float64) * 2 - 1
    estimate = soft_value(-k * (a ** 2).sum(-1), alpha, d).item()
    exact = alpha * d * math.log(math.sqrt(math.pi * alpha / k) * math.erf(math.sqrt(k / alpha)))
    assert estimate == pytest.approx(exact, abs=0.01)
    assert soft_value(-k * (a[:16] ** 2).sum(-1), alpha, d).item() != pytest.approx(exact, abs=1e-6)  # it is random


def test_bellman_target_bootstraps_the_soft_value_of_the_target_network_except_at_terminals():
    """With the target network fixed at Q_T = c, eq. 11's target is reward_scale r + gamma (1 - done)(c + a d log 2)."""
    torch.manual_seed(0)
    alpha, c, scale, gamma = 0.7, -2.0, 0.1, 0.9
    agent = make_agent(alpha=alpha, reward_scale=scale, discount=gamma, batch_size=64)
    agent.target_critic = FixedQ(lambda a: torch.full(a.shape[:-1], c / alpha), alpha)
    batch = batch_for(agent)
    assert 0 < batch["discount"].sum() < batch["discount"].numel()  # some terminals in the batch
    value = c + alpha * 2 * math.log(2)
    expected = scale * batch["reward"] + gamma * batch["discount"] * value
    seen = {}

    def record(module, inputs, output):  # returns None: the output is left as it is
        seen.setdefault("q", output.detach())

    agent.critic.register_forward_hook(record)
    metrics = agent.update(batch)
    loss = 0.5 * ((expected - seen["q"][..., 0]) ** 2).mean().item()
    assert metrics["loss/critic"] == pytest.approx(loss, rel=1e-5)
    assert metrics["q/soft_value_target_mean"] == pytest.approx(value, rel=1e-5)


# -- the sampler, eqs. 13-14 ---------------------------------------------------------------------------------------
def test_svgd_score_is_the_gradient_of_the_boltzmann_density_through_tanh():
    sigma, alpha = 0.3, 0.5
    agent = make_agent(alpha=alpha)
    agent.critic = FixedQ(mixture_log_density(sigma), alpha)
    u = torch.randn(4, 6, 2, dtype=torch.float32)
    score = agent.svgd_score(torch.zeros(4, 3))(u)
    a = torch.tanh(u).detach().requires_grad_(True)
    (grad_a,) = torch.autograd.grad(mixture_log_density(sigma)(a).sum(), a)
    expected = grad_a * (1 - torch.tanh(u) ** 2) - 2 * torch.tanh(u)  # chain rule + d/du log(1 - tanh^2 u)
    torch.testing.assert_close(score, expected, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(log_one_minus_tanh_sq(u), torch.log(1 - torch.tanh(u) ** 2), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("seed", [0, 1])
def test_sampler_trained_by_amortised_svgd_covers_both_modes_of_a_bimodal_q(seed):
    """The sampler starts where SQL's starts while Q is still flat: trained towards exp(0), i.e. spread over the box
    (first phase). Then amortised SVGD towards exp(Q/alpha) with Q/alpha a two-mode mixture must put about half
    of the draws on each mode, each with roughly the mode's width: a collapsed sampler (one mode, or the
    repulsion-free MAP point per noise) fails. Known limit: started from the network's initial, narrow output
    the same training collapses onto one mode (docs/exploration.md, experiment 3)."""
    torch.manual_seed(seed)
    sigma = 0.2
    agent = make_agent(sampler_hidden=64, svgd_particles=32, sampler_lr=1e-3)
    state = torch.zeros(1, 3)
    agent.critic = FixedQ(lambda a: torch.zeros(a.shape[:-1]))
    for _ in range(200):
        agent.sampler_step(state)
    agent.critic = FixedQ(mixture_log_density(sigma))
    for _ in range(800):
        metrics = agent.sampler_step(state)
    assert math.isfinite(metrics["loss"]) and metrics["phi_norm"] > 0
    with torch.no_grad():
        draws = agent.sample(state[0], 4000)
    assert draws.abs().max() <= 1
    nearest = ((draws.unsqueeze(-2) - CENTRES) ** 2).sum(-1).argmin(-1)
    share = nearest.float().mean().item()
    assert 0.35 < share < 0.65, f"mode shares {share:.2f} / {1 - share:.2f}"
    for k in range(2):
        mode = draws[nearest == k]
        assert (mode.mean(0) - CENTRES[k]).abs().max() < 0.1
        assert 0.7 * sigma < mode.std(0).mean() < 1.2 * sigma


# -- acting and learning -------------------------------------------------------------------------------------------
def test_act_returns_a_draw_in_the_box_and_a_zero_behaviour_log_prob():
    agent = make_agent()
    obs = np.ones(3, np.float32)
    action, log_prob = agent.act(obs)
    assert action.shape == (2,) and np.all(np.abs(action) <= 1) and log_prob == 0.0
    torch.manual_seed(5)
    first = agent.act(obs)[0]
    assert not np.allclose(first, agent.act(obs)[0])  # stochastic


def test_deterministic_act_is_the_draw_that_q_ranks_highest():
    agent = make_agent(eval_draws=16)
    agent.critic = FixedQ(lambda a: -((a - torch.tensor([0.3, -0.2])) ** 2).sum(-1))
    obs = np.zeros(3, np.float32)
    torch.manual_seed(3)
    action, log_prob = agent.act(obs, deterministic=True)
    torch.manual_seed(3)
    with torch.no_grad():
        draws = agent.sample(torch.zeros(3), 16)
    best = draws[(-((draws - torch.tensor([0.3, -0.2])) ** 2).sum(-1)).argmax()]
    np.testing.assert_allclose(action, best.numpy(), rtol=1e-6)
    assert log_prob == 0.0


def params(module):
    return [p.detach().clone() for p in module.parameters()]


def changed(before, module):
    return any(not torch.equal(a, b) for a, b in zip(before, module.parameters()))


def test_update_moves_critic_and_sampler_and_copies_the_target_every_period():
    torch.manual_seed(0)
    agent = make_agent(target_period=3)
    batch = batch_for(agent)
    critic, sampler, target = params(agent.critic), params(agent.sampler), params(agent.target_critic)
    metrics = agent.update(batch)
    assert all(math.isfinite(v) for v in metrics.values())
    assert changed(critic, agent.critic) and changed(sampler, agent.sampler)
    assert not changed(target, agent.target_critic)
    agent.update(batch)
    agent.update(batch)
    assert all(torch.equal(a, b) for a, b in zip(agent.critic.parameters(), agent.target_critic.parameters()))


def test_sampler_step_leaves_the_critic_untouched():
    torch.manual_seed(0)
    agent = make_agent()
    critic = params(agent.critic)
    agent.sampler_step(torch.randn(5, 3))
    assert not changed(critic, agent.critic) and all(p.grad is None for p in agent.critic.parameters())


def test_state_dict_round_trip():
    torch.manual_seed(0)
    agent = make_agent()
    agent.update(batch_for(agent))
    other = make_agent()
    other.load_state_dict(agent.state_dict())
    assert other.updates == 1
    for name in ("critic", "target_critic", "sampler"):
        for a, b in zip(getattr(agent, name).parameters(), getattr(other, name).parameters()):
            assert torch.equal(a, b)


@pytest.mark.parametrize("key,value", [("alpha", "0"), ("svgd_particles", "1"), ("value_particles", "0"),
                                       ("kernel_bandwidth", "median"), ("target_period", "0")])
def test_bad_settings_are_config_errors(key, value):
    with pytest.raises(ConfigError):
        agents.resolve_config("sql", {key: value})


def test_discrete_actions_are_refused():
    with pytest.raises(ConfigError, match="continuous"):
        agents.make("sql", OBS, spaces.Discrete(3), agents.config_class("sql")())


def test_cli_trains_and_resumes_on_multigoal(cli, tmp_path):
    run = tmp_path / "run"
    first = cli("--env", "multigoal", "--agent", "sql", "--steps", "200", "--logdir", run, "--eval-episodes", "1",
                "--set", "learning_starts=50", "--set", "hidden=32,32", "--set", "sampler_hidden=32",
                "--checkpoint-every", "100")
    assert first.returncode == 0, first.stderr[-2000:]
    second = cli("--resume", run, "--steps", "300", "--eval-episodes", "1")
    assert second.returncode == 0, second.stderr[-2000:]
    assert (run / "checkpoints" / "latest").read_text().strip().endswith("300")
