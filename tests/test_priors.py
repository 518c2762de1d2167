"""Behaviour priors (seed 000 Ch 7): KL estimates, gradient isolation, information asymmetry, the latent bound
(eq 7.12), transfer by saved priors, latent-space reuse."""
from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
import torch
from gymnasium import spaces

import priors
from agents.config import ConfigError
from agents.distributions import SquashedGaussian
from agents.behaviour_prior import PriorSection
from agents.svg0 import SVG0Agent, SVG0Config
from priors.models import PriorConfig, gaussian_kl
from priors.reuse import LatentActionEnv

OBS = spaces.Dict({"proprio": spaces.Box(-np.inf, np.inf, (5,), np.float32),
                   "task": spaces.Box(-np.inf, np.inf, (3,), np.float32)})
ACTIONS = spaces.Box(-1.0, 1.0, (2,), np.float32)


def agent(prior="mlp", core=None, **section) -> SVG0Agent:
    """svg0 with a ``prior`` of that kind; ``section``: the prior's settings, ``core``: svg0's own."""
    config = SVG0Config(hidden=(32, 32), prior=PriorSection(kind=prior, hidden=(32, 32), **section), **(core or {}))
    return SVG0Agent(OBS, ACTIONS, config)


def batch(B=6, K=4, seed=0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    mask = torch.ones(B, K)
    mask[0, 2:] = 0  # one sequence ends early
    return {"obs": torch.randn(B, K + 1, 8, generator=g), "action": torch.rand(B, K, 2, generator=g) * 2 - 1,
            "behaviour_log_prob": torch.randn(B, K, generator=g), "reward": torch.randn(B, K, generator=g),
            "discount": torch.ones(B, K), "mask": mask}


@pytest.mark.parametrize("kind", ["mlp", "lstm", "normal"])
def test_analytic_kl_matches_monte_carlo_of_the_squashed_policies(kind):
    """KL(pi || pi_0) computed on the pre-squash Gaussians equals E_pi[log pi(a) - log pi_0(a)] over tanh actions."""
    prior = priors.build(PriorConfig(kind, 5, 2, (16, 16), std=0.7))
    obs = torch.randn(3, 4, 5)
    p_mean, p_std = torch.randn(3, 4, 2), torch.rand(3, 4, 2) + 0.2
    analytic, _ = prior.kl(obs, p_mean, p_std)
    q_mean, q_std = prior.distribution(obs)
    policy, prior_dist = SquashedGaussian(p_mean, p_std), SquashedGaussian(q_mean.detach(), q_std.detach())
    actions, log_p = policy.rsample_with_log_prob(200_000)
    monte_carlo = (log_p - prior_dist.log_prob(actions)).mean(0)
    assert analytic.shape == (3, 4)
    torch.testing.assert_close(monte_carlo, analytic.detach(), atol=0.03, rtol=0.03)


def test_prior_gets_gradients_only_from_its_own_loss_and_the_policy_none_from_it():
    a = agent()
    b = batch()

    def grads(module):
        return [p.grad for p in module.parameters()]

    loss, _ = a.behaviour_prior.loss(b, a.policy)
    loss.backward()
    assert all(g is not None and g.abs().sum() > 0 for g in grads(a.behaviour_prior.prior))
    assert all(g is None for g in grads(a.policy)) and all(g is None for g in grads(a.critic))
    a.behaviour_prior.prior.zero_grad(set_to_none=True)

    policy_loss, _, metrics = a.policy_loss(b)
    policy_loss.backward()
    assert "prior/kl_policy_term" in metrics
    assert all(g is not None for g in grads(a.policy))
    part = a.behaviour_prior
    assert all(g is None for g in grads(part.prior)) and all(g is None for g in grads(part.target_prior))

    targets, metrics = a.retrace_targets(b)
    assert not targets.requires_grad and "prior/kl_target" in metrics


def test_update_changes_the_prior_and_the_target_prior_only_every_period():
    a = agent(core={"target_period": 2})
    before = [p.clone() for p in a.behaviour_prior.prior.parameters()]
    a.update(batch())
    assert any(not torch.equal(p, q) for p, q in zip(a.behaviour_prior.prior.parameters(), before))
    assert all(torch.equal(p, q) for p, q in zip(a.behaviour_prior.target_prior.parameters(), before))
    metrics = a.update(batch(seed=1))
    part = a.behaviour_prior
    assert all(torch.equal(p, q) for p, q in zip(part.target_prior.parameters(), part.prior.parameters()))
    assert {"loss/prior", "prior/kl_online", "prior/kl_target"} <= set(metrics)


def test_a_frozen_prior_does_not_move():
    a = agent(trainable=False)
    before = [p.clone() for p in a.behaviour_prior.prior.parameters()]
    a.update(batch())
    assert all(torch.equal(p, q) for p, q in zip(a.behaviour_prior.prior.parameters(), before))


@pytest.mark.parametrize("kind", ["mlp", "lstm", "latent"])
def test_the_prior_sees_exactly_the_configured_observation_groups(kind):
    b = batch()
    changed = {**b, "obs": b["obs"].clone()}
    changed["obs"][..., 5:] += 10.0 * torch.randn_like(changed["obs"][..., 5:])  # the task group only

    def prior_kl(a, data):
        torch.manual_seed(1)  # the latent prior samples z
        dist = a.policy(b["obs"][:, :4])  # the same policy distribution for both
        kl, _ = a.behaviour_prior.kl(a.behaviour_prior.prior, data, dist)
        return kl

    asymmetric = agent(kind, obs=("proprio",))
    assert asymmetric.behaviour_prior.prior.config.obs_dim == 5
    torch.testing.assert_close(prior_kl(asymmetric, b), prior_kl(asymmetric, changed), rtol=0, atol=0)
    symmetric = agent(kind, obs=("proprio", "task"))
    assert not torch.allclose(prior_kl(symmetric, b), prior_kl(symmetric, changed))


def test_unknown_prior_groups_and_kinds_fail_clearly():
    with pytest.raises(ConfigError, match="prior.obs"):
        agent(obs=("vision",))
    with pytest.raises(ConfigError, match="prior.kind must be"):
        SVG0Config(prior=PriorSection(kind="gmm")).validate()


def test_ar1_latent_chain_has_a_standard_normal_marginal():
    prior = priors.build(PriorConfig("latent", 3, 2, (8,), latent_dim=2, ar_coef=0.9))
    z = torch.randn(20_000, 2)
    for _ in range(50):
        z = prior.config.ar_coef * z + prior.innovation_std * torch.randn_like(z)
    torch.testing.assert_close(z.mean(0), torch.zeros(2), atol=0.03, rtol=0)
    torch.testing.assert_close(z.var(0), torch.ones(2), atol=0.04, rtol=0)


def test_latent_bound_is_above_the_true_kl_and_tightens_when_the_inference_network_learns():
    """One step with a 1-d latent: pi_0(u) = int N(u; dec(z)) N(z) dz by quadrature, so KL(pi || pi_0) is exact."""
    torch.manual_seed(3)
    prior = priors.build(PriorConfig("latent", 2, 1, (32, 32), latent_dim=1, lookahead=0))
    with torch.no_grad():
        prior.decoder[0].weight[:, 2:] *= 8.0  # a decoder that depends strongly on z: a broad, non-Gaussian marginal
    obs = torch.randn(1, 1, 2).expand(4096, 1, 2)
    p_mean, p_std = torch.full((4096, 1, 1), 0.3), torch.full((4096, 1, 1), 0.5)
    mask = torch.ones(4096, 1)

    with torch.no_grad():  # exact KL by quadrature over z and u
        zs = torch.linspace(-8, 8, 4001).unsqueeze(-1)
        dec_mean, dec_std = prior.decode(obs[0, 0].expand(4001, 2), zs)
        us = torch.linspace(-6, 6, 6001)
        log_dec = torch.distributions.Normal(dec_mean, dec_std).log_prob(us)  # [z, u]
        log_marginal = torch.logsumexp(log_dec + torch.distributions.Normal(0, 1).log_prob(zs), 0) + math.log(16 / 4000)
        log_pi = torch.distributions.Normal(0.3, 0.5).log_prob(us)
        true_kl = (log_pi.exp() * (log_pi - log_marginal)).sum().item() * (12 / 6000)

    def bound():
        u = p_mean + p_std * torch.randn_like(p_mean)  # actions drawn from pi, as the bound's expectation requires
        K, _ = prior.kl(obs, p_mean, p_std, torch.tanh(u), mask)
        return K.mean()

    with torch.no_grad():
        untrained = bound().item()
    assert untrained >= true_kl - 0.02
    optimiser = torch.optim.Adam(prior.inference.parameters(), lr=3e-3)
    for _ in range(400):
        loss = bound()
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    with torch.no_grad():
        trained = torch.stack([bound() for _ in range(8)]).mean().item()
    assert trained >= true_kl - 0.02  # still a bound
    assert trained - true_kl < 0.5 * (untrained - true_kl)  # and much tighter


def test_latent_analytic_action_term_equals_the_expected_sampled_one():
    prior = priors.build(PriorConfig("latent", 3, 2, (16,), latent_dim=2))
    obs = torch.randn(1, 3, 3).expand(50_000, 3, 3)
    p_mean, p_std = torch.randn(1, 3, 2).expand(50_000, 3, 2), (torch.rand(1, 3, 2) + 0.3).expand(50_000, 3, 2)
    actions = torch.tanh(p_mean + p_std * torch.randn_like(p_mean))
    mask = torch.ones(50_000, 3)
    torch.manual_seed(5)
    _, sampled = prior.kl(obs, p_mean, p_std, actions, mask)
    torch.manual_seed(5)
    _, analytic = prior.kl(obs, p_mean, p_std, actions, mask, analytic=True)
    assert analytic["latent_term"] == pytest.approx(sampled["latent_term"])
    assert analytic["action_term"] == pytest.approx(sampled["action_term"], abs=0.02)


@pytest.mark.parametrize("kind", ["mlp", "lstm", "latent"])
def test_a_saved_prior_loads_into_another_run_bit_for_bit(tmp_path, kind):
    trained = agent(kind)
    trained.update(batch())
    trained.export_artifacts(tmp_path)
    meta = json.loads((tmp_path / "prior" / "meta.json").read_text())
    assert meta["obs_groups"] == {"proprio": 5} and meta["config"]["kind"] == kind
    loaded = agent(kind, init=str(tmp_path))  # a run directory or the prior directory itself
    saved = trained.behaviour_prior.prior.state_dict()
    for copy in (loaded.behaviour_prior.prior, loaded.behaviour_prior.target_prior):
        for (name, x), (_, y) in zip(saved.items(), copy.state_dict().items()):
            assert torch.equal(x, y), name


def test_bad_prior_files_fail_with_one_clear_error(tmp_path):
    trained = agent("mlp")
    trained.export_artifacts(tmp_path)
    with pytest.raises(ConfigError, match="latent prior|holds a mlp"):
        agent("latent", init=str(tmp_path))
    with pytest.raises(ConfigError, match="observation groups"):
        agent("mlp", init=str(tmp_path), obs=("proprio", "task"))
    weights = tmp_path / "prior" / "weights.safetensors"
    weights.write_bytes(weights.read_bytes()[:-8] + b"garbage!")
    with pytest.raises(ConfigError, match="corrupt"):
        agent("mlp", init=str(tmp_path))
    with pytest.raises(ConfigError, match="neither a saved prior"):
        agent("mlp", init=str(tmp_path / "nowhere"))
    with pytest.raises(ConfigError, match="needs a prior kind"):
        SVG0Config(prior=PriorSection(init=str(tmp_path))).validate()


def test_latent_space_reuse_acts_through_the_frozen_decoder(tmp_path):
    import envs

    prior = priors.build(PriorConfig("latent", 5, 1, (16,), latent_dim=2))
    priors.save_prior(prior, tmp_path / "prior", {"proprio": 5})
    config = dataclasses.replace(SVG0Config(), latent_controller=str(tmp_path / "prior"), latent_scale=2.0)
    env = SVG0Agent.wrap_env(envs.make("cartpole-swingup", seed=0), config, "cpu")
    assert isinstance(env, LatentActionEnv) and env.action_space.shape == (2,)
    obs, _ = env.reset(seed=0)
    latent = np.array([0.5, -0.25], np.float32)
    expected = torch.tanh(prior.decode(torch.as_tensor(obs["proprio"]), 2.0 * torch.as_tensor(latent))[0])
    np.testing.assert_allclose(env.low_level_action(latent), expected.detach().numpy(), rtol=1e-6)
    env.step(latent)
    with pytest.raises(ConfigError, match="observation groups"):  # a decoder for another body
        SVG0Agent.wrap_env(envs.make("reacher-easy", seed=0), config, "cpu")


def test_kl_of_identical_gaussians_is_zero():
    mean, std = torch.randn(4, 3), torch.rand(4, 3) + 0.1
    torch.testing.assert_close(gaussian_kl(mean, std, mean, std), torch.zeros(4))


def test_train_cli_multitask_ant_with_an_asymmetric_prior_logs_kl_and_per_task_returns(cli, tmp_path):
    """One agent on ant-multitask trains one shared prior on proprioception; TensorBoard shows its KL terms."""
    from tests.test_cli import scalars

    run_dir = tmp_path / "run"
    result = cli("--env", "ant-multitask", "--agent", "svg0", "--steps", "1300", "--logdir", str(run_dir),
                 "--set", "prior=mlp", "--set", "prior.obs=proprio", "--set", "hidden=32,32",
                 "--set", "prior.hidden=32,32", "--set", "learning_starts=900", "--set", "update_every=4",
                 "--set", "batch_size=8", "--eval-episodes", "1", "--set", "log_every=100")
    assert result.returncode == 0, result.stderr
    tags = scalars(run_dir)
    for tag in ("prior/kl_target", "prior/kl_online", "prior/kl_policy_term", "loss/prior"):
        assert tag in tags and all(math.isfinite(v) for _, v in tags[tag]), tag
    assert any(tag.startswith("train/episode_return/") for tag in tags)  # per-task returns
    meta = json.loads((run_dir / "prior" / "meta.json").read_text())  # exported for transfer
    assert meta["obs_groups"] == {"proprio": 153}


def test_the_normal_prior_is_fixed_and_pulls_the_policy_to_its_mean():
    """prior=normal: N(0, std^2) whatever the state, no parameters and no optimiser; its KL is zero for a policy equal
    to it and grows with the policy's mean, so eq 7.2 pulls the policy's actions towards 0."""
    a = agent("normal", std=0.5)
    assert a.behaviour_prior.optimiser is None and not list(a.behaviour_prior.prior.parameters())
    obs = torch.randn(2, 3, 5)
    kl = lambda mean: a.behaviour_prior.prior.kl(obs, torch.full((2, 3, 2), mean), torch.full((2, 3, 2), 0.5))[0]
    torch.testing.assert_close(kl(0.0), torch.zeros(2, 3))
    torch.testing.assert_close(kl(1.0), torch.full((2, 3), 2 * 0.5 / 0.25))   # sum over 2 dims of mean^2 / (2 std^2)
    metrics = a.update(batch())
    assert metrics["prior/kl_target"] >= 0 and "loss/prior" not in metrics
    with pytest.raises(ConfigError, match="prior.std"):
        SVG0Config(prior=PriorSection(kind="normal", std=0.0)).validate()
