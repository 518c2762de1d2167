"""dqn (agents/dqn.py): Double-DQN targets, where NoisyNet noise is redrawn, bootstrap masks, frozen priors,
Thompson heads, UCB acting, checkpoints, a short DeepSea learning run and the train.py path."""
import copy

import numpy as np
import pytest
import torch
from torch import nn

import agents
from agents import checkpoint
from agents.config import ConfigError
from agents.dqn import DQNAgent
from envs.spaces import group_space
from gymnasium import spaces
from inference.layers import Ensemble, NoisyLinear, ucb_action

OBS_DIM = 6


def make_agent(exploration: str, **overrides) -> DQNAgent:
    config = agents.resolve_config("dqn", {"exploration": exploration, "hidden": "16,16",
                                           **{k: str(v) for k, v in overrides.items()}})
    return DQNAgent(group_space({"proprio": OBS_DIM}), spaces.Discrete(3), config)


def random_batch(n: int = 16, seed: int = 0, write_id: bool = True) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    batch = {"obs": torch.randn(n, 2, OBS_DIM, generator=g),
             "action": torch.randint(3, (n, 1, 1), generator=g).float(),
             "reward": torch.randn(n, 1, generator=g), "discount": torch.ones(n, 1),
             "mask": torch.ones(n, 1), "behaviour_log_prob": torch.zeros(n, 1)}
    if write_id:
        batch["write_id"] = torch.arange(100, 100 + n)
    return batch


# -- Double DQN ------------------------------------------------------------------------------------------------
def linear_ensemble(weight) -> Ensemble:
    net = Ensemble(lambda: nn.Linear(2, 2, bias=False), 1)
    with torch.no_grad():
        net.members[0].weight.copy_(torch.tensor(weight, dtype=torch.float32))
    return net


def test_double_dqn_target_on_a_hand_made_batch():
    agent = DQNAgent(group_space({"proprio": 2}), spaces.Discrete(2),
                     agents.resolve_config("dqn", {"discount": "0.9"}))
    # online: Q_O(s) = [1, 3], Q_O(s') = [2, 1] -> a' = 0;  target: Q_T(s') = [5, 7]
    agent.online = linear_ensemble([[1.0, 2.0], [3.0, 1.0]])
    agent.target = linear_ensemble([[0.0, 5.0], [0.0, 7.0]])
    agent.optimizer = torch.optim.SGD(agent.online.parameters(), lr=0.0)
    s, s2 = [1.0, 0.0], [0.0, 1.0]
    batch = {"obs": torch.tensor([[s, s2], [s, s2]]), "action": torch.tensor([[[1.0]], [[0.0]]]),
             "reward": torch.tensor([[0.5], [2.0]]), "discount": torch.tensor([[1.0], [0.0]]),
             "mask": torch.ones(2, 1), "behaviour_log_prob": torch.zeros(2, 1)}
    metrics = agent.update(batch)
    # Double DQN: y = r + 0.9 * Q_T(s', argmax Q_O(s')) = 0.5 + 0.9 * 5 = 5.0 (vanilla DQN would use 7);
    # the terminal row bootstraps nothing: y = 2.0
    assert metrics["q/target_mean"] == pytest.approx((5.0 + 2.0) / 2)
    # Q_O(s, 1) = 3, Q_O(s, 0) = 1: squared errors (5-3)^2 and (2-1)^2
    assert metrics["loss/q"] == pytest.approx((4.0 + 1.0) / 2)


# -- NoisyNet: where noise is redrawn --------------------------------------------------------------------------
def count_resets(monkeypatch) -> dict[int, int]:
    calls: dict[int, int] = {}
    original = NoisyLinear.reset_noise

    def counting(self, generator=None):
        calls[id(self)] = calls.get(id(self), 0) + 1
        original(self, generator)

    monkeypatch.setattr(NoisyLinear, "reset_noise", counting)
    return calls


def noisy_layers(net) -> list[NoisyLinear]:
    return [m for m in net.modules() if isinstance(m, NoisyLinear)]


def test_noise_is_redrawn_only_where_documented(monkeypatch):
    agent = make_agent("noisy")
    online, target = noisy_layers(agent.online), noisy_layers(agent.target)
    assert len(online) == 3 and len(target) == 3  # every linear layer of the MLP is noisy
    calls = count_resets(monkeypatch)
    obs = np.random.default_rng(0).normal(size=OBS_DIM).astype(np.float32)

    agent.begin_episode()  # noise_resample=step: nothing per episode
    agent.act(obs, deterministic=True)
    assert calls == {}
    agent.act(obs)  # one fresh online sample per actor step
    assert calls == {id(m): 1 for m in online}
    calls.clear()
    agent.update(random_batch())  # once for the online and once for the target network
    assert calls == {id(m): 1 for m in online + target}


def test_noise_off_when_deterministic_and_evaluation_is_repeatable():
    agent = make_agent("noisy")
    obs = np.random.default_rng(1).normal(size=OBS_DIM).astype(np.float32)
    buffers = [b.clone() for b in agent.online.buffers()]
    q1, q2 = agent.q_values(obs, deterministic=True), agent.q_values(obs, deterministic=True)
    assert torch.equal(q1, q2) and all(torch.equal(a, b) for a, b in zip(buffers, agent.online.buffers()))
    x = torch.as_tensor(obs)
    for layer in noisy_layers(agent.online):  # the means only
        x = nn.functional.linear(x, layer.weight_mu, layer.bias_mu)
        x = x.relu() if layer.out_features != 3 else x
    torch.testing.assert_close(q1[0], x)
    assert agent.online.training  # back in training mode after evaluation
    assert not torch.equal(agent.q_values(obs), q1)  # the noisy forward really differs
    steps = agent.actor_steps
    agent.act(obs, deterministic=True)
    assert agent.actor_steps == steps


def test_episode_noise_stays_fixed_through_updates():
    agent = make_agent("noisy", noise_resample="episode")
    obs = np.random.default_rng(2).normal(size=OBS_DIM).astype(np.float32)
    agent.begin_episode()
    agent.act(obs)
    acting = [b.clone() for b in agent.online.buffers()]
    agent.update(random_batch())  # the learner redraws the online noise ...
    assert not all(torch.equal(a, b) for a, b in zip(acting, agent.online.buffers()))
    agent.act(obs)  # ... but the actor goes on with the episode's noise
    assert all(torch.equal(a, b) for a, b in zip(acting, agent.online.buffers()))
    agent.begin_episode()
    agent.act(obs)
    assert not all(torch.equal(a, b) for a, b in zip(acting, agent.online.buffers()))


# -- ensembles: masks, priors, heads, UCB ----------------------------------------------------------------------
def test_masks_are_fixed_per_write_id():
    agent = make_agent("bootstrap")
    batch = random_batch(n=4000)
    masks = agent.head_masks(batch)
    assert torch.equal(masks, agent.head_masks(batch))  # same transition, same heads, every time
    assert abs(masks.mean().item() - 0.5) < 0.02
    shuffled = {k: v.flip(0) for k, v in batch.items()}
    assert torch.equal(agent.head_masks(shuffled), masks.flip(0))  # a function of the write id, not the row
    assert not torch.equal(make_agent("bootstrap").head_masks(batch), masks)  # another agent, another salt
    assert agent.update(batch)["bootstrap/fixed_masks"] == 1.0
    assert agent.update(random_batch(write_id=False))["bootstrap/fixed_masks"] == 0.0
    sequence_ids = {**batch, "write_id": torch.stack([batch["write_id"], batch["write_id"] + 1], 1)}
    assert torch.equal(agent.head_masks(sequence_ids), masks)  # replay's [B, K] ids: the first step's


def test_each_head_learns_only_from_its_masked_transitions():
    base = make_agent("bootstrap", ensemble_size=4)
    batch = random_batch(n=32)
    masks = base.head_masks(batch)
    k = 0
    outside = masks[:, k] == 0
    assert outside.any() and (~outside).any()

    def grads_after(rows) -> list[list[torch.Tensor]]:
        """Every head's gradient after one update on ``batch`` with the rewards of ``rows`` changed."""
        agent = copy.deepcopy(base)
        changed = {key: v.clone() for key, v in batch.items()}
        changed["reward"][rows] += 100.0
        agent.update(changed)
        return [[p.grad.clone() for p in agent.online.members[j].parameters()] for j in range(4)]

    reference = grads_after(torch.zeros(32, dtype=torch.bool))
    hidden = grads_after(outside)  # transitions head k must not see
    assert all(torch.equal(a, b) for a, b in zip(reference[k], hidden[k]))
    seen_by_others = [j for j in range(4) if (masks[outside, j] == 1).any()]
    assert seen_by_others and all(any(not torch.equal(a, b) for a, b in zip(reference[j], hidden[j]))
                                  for j in seen_by_others)
    visible = grads_after(~outside)  # head k's own transitions do move it
    assert any(not torch.equal(a, b) for a, b in zip(reference[k], visible[k]))


def test_priors_stay_frozen_and_members_learn():
    agent = make_agent("bootstrap", ensemble_size=3, target_period=2)
    assert agent.online.priors is not None and agent.target.priors is not None
    priors = copy.deepcopy(agent.online.priors.state_dict())
    target_priors = copy.deepcopy(agent.target.priors.state_dict())
    members = copy.deepcopy(agent.online.members.state_dict())
    for seed in range(5):
        agent.update(random_batch(seed=seed))
    for key, value in priors.items():
        assert torch.equal(agent.online.priors.state_dict()[key], value)  # bit-identical
        assert torch.equal(agent.target.priors.state_dict()[key], target_priors[key])
    assert any(not torch.equal(agent.online.members.state_dict()[k], v) for k, v in members.items())
    assert all(not p.requires_grad for p in agent.online.priors.parameters())
    assert all(p.grad is None for p in agent.online.priors.parameters())


def test_thompson_head_is_held_for_the_episode():
    agent = make_agent("bootstrap", ensemble_size=5)
    rng = np.random.default_rng(3)
    heads = set()
    for _ in range(40):
        agent.begin_episode()
        heads.add(agent.head)
        for _ in range(3):
            obs = rng.normal(size=OBS_DIM).astype(np.float32)
            action, log_prob = agent.act(obs)
            assert action == int(agent.q_values(obs)[agent.head].argmax()) and log_prob == 0.0
    assert len(heads) == 5  # drawn uniformly: all heads show up in 40 episodes
    obs = rng.normal(size=OBS_DIM).astype(np.float32)
    assert agent.act(obs, deterministic=True)[0] == int(agent.q_values(obs).mean(0).argmax())


def test_ucb_acts_on_mean_plus_lambda_std():
    rng = np.random.default_rng(4)
    for lam in (0.0, 1.0, 5.0):
        agent = make_agent("ucb", ucb_lambda=lam)
        for _ in range(10):
            obs = rng.normal(size=OBS_DIM).astype(np.float32)
            q = agent.q_values(obs)
            assert agent.act(obs)[0] == int(ucb_action(q, lam))
            if lam == 0.0:
                assert agent.act(obs)[0] == int(q.mean(0).argmax())


def test_epsilon_schedule_and_log_probs():
    agent = make_agent("epsilon", epsilon_decay_steps=100)
    assert agent.epsilon() == 1.0
    obs = np.zeros(OBS_DIM, np.float32)
    action, log_prob = agent.act(obs)
    assert log_prob == pytest.approx(np.log(1 / 3), abs=0.02)
    agent.actor_steps = 50
    assert agent.epsilon() == pytest.approx(0.525)
    agent.actor_steps = 10_000
    assert agent.epsilon() == pytest.approx(0.05)
    greedy = int(agent.q_values(obs)[0].argmax())
    logs = {a: lp for a, lp in (agent.act(obs) for _ in range(200))}
    assert logs[greedy] == pytest.approx(np.log(0.95 + 0.05 / 3), rel=1e-3)


def test_checkpoint_round_trip(tmp_path):
    agent = make_agent("noisy", noise_resample="episode")
    agent.begin_episode()
    agent.update(random_batch())
    path = checkpoint.save(tmp_path, 1, agent.state_dict(), None, {})
    _, state, _ = checkpoint.load(path)
    other = make_agent("noisy", noise_resample="episode")
    other.load_state_dict(state)
    obs = np.ones(OBS_DIM, np.float32)
    assert other.act(obs)[0] == agent.act(obs)[0]
    torch.testing.assert_close(other.q_values(obs), agent.q_values(obs))
    assert other.updates == 1 and other.actor_steps == agent.actor_steps


@pytest.mark.parametrize("overrides, fragment", [
    ({"exploration": "boltzmann"}, "exploration must be one of"),
    ({"sequence_length": "3"}, "sequence_length must be 1"),
    ({"exploration": "ucb", "ensemble_size": "1"}, "ensemble_size >= 2"),
    ({"mask_prob": "0"}, "mask_prob"),
])
def test_bad_settings_are_clear_errors(overrides, fragment):
    with pytest.raises(ConfigError, match=fragment):
        agents.resolve_config("dqn", overrides)


def test_continuous_actions_are_refused():
    with pytest.raises(ConfigError, match="discrete action space"):
        DQNAgent(group_space({"proprio": 2}), spaces.Box(-1, 1, (2,)), agents.resolve_config("dqn", {}))


# -- learning and the command line -----------------------------------------------------------------------------
@pytest.mark.slow   # ~25 s of learning; the dqn heads and priors have fast tests of their own
def test_bootstrap_with_priors_solves_deep_sea_10():
    from benchmarks.exploration import run_deep_sea

    torch.set_num_threads(1)
    run = run_deep_sea(10, "bootstrap", seed=0, episodes=200)
    # the benchmark's seeds found the +1 at episodes 126-139 and then took it in >= 34 of every 50 episodes
    assert run["first_reward_episode"] is not None and run["first_reward_episode"] <= 175, run
    assert run["rewarded_per_50_episodes"][-1] >= 25, run  # most of the last 50 episodes reach the far corner


def test_train_py_runs_dqn_on_deep_sea(cli, tmp_path):
    listing = cli("--list")
    assert listing.returncode == 0 and "deep-sea-20" in listing.stdout and "dqn" in listing.stdout
    run_dir = tmp_path / "run"
    result = cli("--env", "deep-sea-8", "--agent", "dqn", "--set", "exploration=bootstrap", "--steps", 400,
                 "--eval-every", 200, "--checkpoint-every", 200, "--eval-episodes", 1, "--logdir", run_dir)
    assert result.returncode == 0, result.stderr
    assert (run_dir / "checkpoints" / "latest").read_text().strip() == "step-000000400"
    result = cli("--resume", run_dir, "--steps", 480)
    assert result.returncode == 0, result.stderr
