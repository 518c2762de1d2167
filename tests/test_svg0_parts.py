"""svg0's learner options (issue 12): one batched critic module, observation normalisation, target updates."""
import numpy as np
import pytest
import torch

import agents
from agents.networks import Critic, polyak_update
from agents.observations import RunningNormalizer
from inference.layers.batched import BatchedMLP
from tests.test_svg0 import batch_for, make_agent


@pytest.mark.parametrize("norm", ["none", "layernorm", "residual"])
def test_batched_heads_equal_each_head_computed_alone(norm):
    """Head h of the batched module is exactly an ordinary network built from head h's slices."""
    torch.manual_seed(0)
    net = BatchedMLP(3, 5, (8, 8, 8), 2, norm)
    x = torch.randn(4, 6, 5)
    out = net(x)
    assert out.shape == (3, 4, 6, 2)
    for h in range(3):
        def linear(layer, v):
            return v @ layer.weight[h] + layer.bias[h, 0]

        def ln(norm_layer, v):
            return torch.nn.functional.layer_norm(v, v.shape[-1:]) * norm_layer.weight[h, 0] + norm_layer.bias[h, 0]

        v = x
        if norm == "residual":
            v = linear(net.hidden[0], v)
            for first, second, n in zip(net.inner, net.hidden[1:], net.norms):
                v = v + linear(second, torch.relu(linear(first, ln(n, v))))
            v = ln(net.norms[-1], v)
        else:
            for i, layer in enumerate(net.hidden):
                v = linear(layer, v)
                v = torch.relu(ln(net.norms[i], v) if norm == "layernorm" else v)
        torch.testing.assert_close(out[h], linear(net.out, v))


def test_heads_start_different_and_are_initialised_like_nn_linear():
    torch.manual_seed(0)
    net = BatchedMLP(4, 100, (50,), 1)
    w = net.hidden[0].weight
    assert w.abs().max() <= 0.1 + 1e-6 and w.std() > 0.05  # U(-1/sqrt(100), 1/sqrt(100)), like nn.Linear
    assert not torch.equal(w[0], w[1])


def test_critic_is_one_module_without_per_head_parameters():
    critic = Critic(5, 2, (16, 16), heads=4)
    names = [n for n, _ in critic.named_parameters()]
    assert len(names) == 6 and all(p.shape[0] == 4 for p in critic.parameters())  # 3 layers x (weight, bias)
    q = critic(torch.randn(7, 5), torch.rand(3, 7, 2))  # several sampled actions broadcast against the states
    assert q.shape == (3, 7, 4)


def test_min_and_mean_reduce_the_heads():
    torch.manual_seed(0)
    q = torch.tensor([[1.0, -2.0, 4.0]])
    for reduce, expected in (("min", -2.0), ("mean", 1.0)):
        agent = make_agent(critics="3", critic_reduce=reduce)
        assert agent.exploration.target_heads(q, reduce).item() == pytest.approx(expected)
        assert agent.exploration.policy_value(q, reduce).item() == pytest.approx(expected)
    ensemble = make_agent(exploration="ucb", **{"exploration.ensemble_size": "3"})
    torch.testing.assert_close(ensemble.exploration.target_heads(q, "min"), q)   # every head its own targets
    assert ensemble.exploration.policy_value(q, "min").item() == pytest.approx(1.0)   # the policy: the heads' mean


def test_normalizer_matches_numpy_over_many_batches():
    rng = np.random.default_rng(0)
    data = rng.normal(3.0, [0.5, 20.0, 1e-3], size=(1000, 3))
    norm = RunningNormalizer(3)
    for chunk in np.array_split(data, 37):
        norm.update(torch.as_tensor(chunk, dtype=torch.float32))
    np.testing.assert_allclose(norm.mean.numpy(), data.astype(np.float32).mean(0), rtol=1e-5)
    np.testing.assert_allclose(norm.var.numpy(), data.astype(np.float32).var(0), rtol=1e-4)
    z = norm(torch.as_tensor(data, dtype=torch.float32))
    np.testing.assert_allclose(z.mean(0).numpy(), 0.0, atol=1e-3)
    np.testing.assert_allclose(z.std(0).numpy(), 1.0, atol=1e-2)
    assert norm(torch.full((1, 3), 1e6)).max() == norm.clip


def test_obs_norm_follows_observed_states_only_and_round_trips_through_state_dict():
    agent = make_agent(obs_norm="true")
    rng = np.random.default_rng(1)
    agent.observe((rng.normal(size=(20, 5)) * 10 + 4).astype(np.float32))
    for _ in range(5):  # acting, stochastic or not, reads the statistics but never changes them
        agent.act(np.zeros(5, np.float32))
    agent.act(np.zeros(5, np.float32), deterministic=True)
    assert agent.obs_norm.count.item() == 20
    metrics = agent.update(batch_for(agent))
    assert all(torch.isfinite(torch.as_tensor(v)) for v in metrics.values())
    fresh = make_agent(obs_norm="true")
    fresh.load_state_dict(agent.state_dict())
    torch.testing.assert_close(fresh.obs_norm.mean, agent.obs_norm.mean)
    torch.testing.assert_close(fresh.obs_norm.var, agent.obs_norm.var)
    x = torch.randn(3, 5)
    torch.testing.assert_close(fresh.obs_norm(x), agent.obs_norm(x))


def test_polyak_targets_move_by_tau_every_update():
    torch.manual_seed(0)
    target, online = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    expected = [0.9 * t.detach() + 0.1 * o.detach() for t, o in zip(target.parameters(), online.parameters())]
    polyak_update(target, online, 0.1)
    for e, t in zip(expected, target.parameters()):
        torch.testing.assert_close(t.detach(), e)
    agent = make_agent(target_tau="0.5", target_period="1000")
    before = [p.clone() for p in agent.target_critic.parameters()]
    agent.update(batch_for(agent))
    after = list(agent.target_critic.parameters())
    for b, a, o in zip(before, after, agent.critic.parameters()):
        torch.testing.assert_close(a, 0.5 * b + 0.5 * o.detach())


def test_online_policy_critic_moves_only_the_policy_in_the_policy_step():
    torch.manual_seed(0)
    agent = make_agent(policy_critic="online", entropy_auto="false", entropy_coef="0")
    batch = batch_for(agent)
    loss, _, _ = agent.policy_loss(batch)
    loss.backward()
    assert all(p.grad is not None for p in agent.policy.parameters())
    assert all(p.grad is not None for p in agent.critic.parameters())  # the online critic is differentiated through
    agent.critic_opt.zero_grad(set_to_none=True)
    critic = [p.clone() for p in agent.critic.parameters()]
    agent.policy_opt.step()
    assert all(torch.equal(a, b) for a, b in zip(critic, agent.critic.parameters()))


@pytest.mark.parametrize("bad", [{"critic_norm": "batch"}, {"critic_reduce": "max"}, {"target_tau": "1.5"},
                                 {"policy_critic": "both"}, {"prior.kl_coef": "-1"},
                                 {"exploration.ensemble_size": "1"}, {"prior": "gmm"},
                                 {"critic_norm": "residual", "critic_hidden": "32,64"}])
def test_bad_learner_settings_are_config_errors(bad):
    with pytest.raises(agents.ConfigError):
        agents.resolve_config("svg0", bad)


def test_every_agent_implements_the_protocol():
    from agents.protocol import Agent

    methods = [name for name in dir(Agent) if not name.startswith("_")]
    for name in agents.names():
        cls = agents.agent_class(name)
        missing = [m for m in methods if m != "updates" and not callable(getattr(cls, m, None))]
        assert not missing, (name, missing)
        assert callable(cls.wrap_env)
        cls.schedule.validate(cls.Config().sequence_length)   # every agent declares the schedule it runs with


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_update_and_acting_state_on_any_device(device):
    """The learner runs where its tensors are; what actors receive is always on the CPU."""
    from tests.test_svg0 import ACT, OBS

    config = agents.resolve_config("svg0", {"hidden": "16,16"})
    agent = agents.make("svg0", OBS, ACT, config, device)
    agent.observe(np.random.default_rng(0).normal(size=(8, 5)).astype(np.float32))
    batch = {k: v.to(device) for k, v in batch_for(agent).items()}
    metrics = agent.update(batch)
    assert all(torch.isfinite(torch.as_tensor(v)).item() for v in metrics.values())
    state = agent.acting_state()
    assert all(t.device.type == "cpu" for part in state.values() for t in part.values())
    actor = agents.make("svg0", OBS, ACT, config, "cpu")
    actor.load_acting_state(state)
    obs = np.ones(5, np.float32)
    np.testing.assert_allclose(actor.act(obs, deterministic=True)[0], agent.act(obs, deterministic=True)[0],
                               rtol=1e-5, atol=1e-6)


def test_the_behaviour_prior_sees_raw_observations_under_obs_norm():
    """A saved prior is reused by runs with other statistics (prior_init) or on raw observations
    (latent_controller): it must be trained on raw observations, whatever the policy's normalisation."""
    agent = make_agent(obs_norm="true", prior="mlp")
    agent.observe((np.random.default_rng(0).normal(size=(50, 5)) * 30 + 7).astype(np.float32))
    batch = batch_for(agent)
    seen = []
    part = agent.behaviour_prior
    original = part.prior.kl

    def spy(prior_obs, *args, **kwargs):
        seen.append(prior_obs.detach().clone())
        return original(prior_obs, *args, **kwargs)

    part.prior.kl = spy
    part.loss({**batch, "obs": agent.obs_norm(batch["obs"]), "raw_obs": batch["obs"]}, agent.policy)
    K = batch["action"].shape[1]
    torch.testing.assert_close(seen[0], agent.layout.select(batch["obs"][:, :K], part.groups))


def test_a_checkpoint_with_the_old_per_head_critic_is_refused_clearly():
    agent = make_agent()
    state = agent.state_dict()
    state["critic"] = {"heads.0.0.weight": torch.zeros(16, 7), "heads.0.0.bias": torch.zeros(16)}
    with pytest.raises(ValueError, match="before the batched critic"):
        agent.load_state_dict(state)
