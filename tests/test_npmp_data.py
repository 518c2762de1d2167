"""NPMP data (pipelines/npmp/data.py, seed 000 §8.2): real tracking rollouts of tiny real svg0 experts.

Two experts (two snippets) are trained for a few hundred steps with tiny networks; they fall early, which is what
the masks of short trajectories need."""
import json
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from agents.config import ConfigError
from agents.loop import RunConfig, Trainer
from agents.schedule import Schedule
from agents.svg0 import SVG0Config
from pipelines.npmp import data
from priors.npmp import NPMP, NPMPConfig
from pipelines.npmp.data import LOOKAHEAD, Expert, NPMPDataset

SNIPPETS = ("07_01-0", "09_01-0")
FAMILIES = ("humanoid-track-residual", "humanoid-track-time")  # a residual expert and a plain one
TRAJECTORIES, PERTURBATION_TRAJECTORIES, NOISE = 4, 2, 0.2


@pytest.fixture(scope="module")
def experts(tmp_path_factory):
    root = tmp_path_factory.mktemp("experts")
    dirs = []
    for i, (family, snippet) in enumerate(zip(FAMILIES, SNIPPETS)):
        run = RunConfig(env=f"{family}:{snippet}", agent="svg0", steps=150, seed=i, device="cpu",
                        logdir=str(root / snippet), eval_every=10_000, eval_episodes=1, checkpoint_every=10_000,
                        schedule=Schedule(replay_capacity=1000, learning_starts=50, update_every=4, batch_size=4))
        config = SVG0Config(hidden=(32, 32))
        Trainer(run, config).train()
        dirs.append(root / snippet)
    return dirs


@pytest.fixture(scope="module")
def collected(experts, tmp_path_factory):
    results = [data.collect_expert(d, TRAJECTORIES, NOISE, PERTURBATION_TRAJECTORIES, seed=i)
               for i, d in enumerate(experts)]
    path = tmp_path_factory.mktemp("data") / "npmp.h5"
    data.write_dataset(path, results, data.estimate_delta_std(results), {"note": "test"})
    return results, path


def test_expert_loads_newest_checkpoint_and_acts_with_its_mean(experts):
    residual, plain = Expert(experts[0]), Expert(experts[1])
    assert residual.snippet == SNIPPETS[0] and residual.steps == 150 and residual.residual_scale == 0.3
    assert plain.residual_scale is None
    assert (residual.state_dim, residual.action_dim) == (224, 56)
    rng = np.random.default_rng(0)
    obs = rng.standard_normal((3, residual.layout.dim)).astype(np.float32)
    mean = plain.mean_action(obs)
    # the policy reads observations normalised with the checkpoint's statistics (svg0's obs_norm), as in act()
    normalised = plain.obs_norm(torch.as_tensor(obs))
    np.testing.assert_allclose(mean, torch.tanh(plain.policy(normalised).mean).numpy(), rtol=1e-6)
    assert mean.shape == (3, 56) and np.abs(mean).max() <= 1
    # the residual expert's action is the walker's command: clip(a_ref + scale * tanh(mean), -1, 1)
    reference = rng.uniform(-1, 1, (3, 56)).astype(np.float32)
    # the policy reads the observations normalised with the statistics saved in the checkpoint (svg0 obs_norm)
    assert residual.obs_norm is not None and residual.obs_norm.count > 0
    policy_mean = torch.tanh(residual.policy(residual.obs_norm(torch.as_tensor(obs))).mean).numpy()
    np.testing.assert_allclose(residual.mean_action(obs), policy_mean, rtol=1e-6)  # what its env steps with
    np.testing.assert_allclose(residual.mean_command(obs, reference), np.clip(reference + 0.3 * policy_mean, -1, 1),
                               rtol=1e-6)
    np.testing.assert_array_equal(plain.mean_command(obs), mean)
    with pytest.raises(ValueError, match="residual expert"):
        residual.mean_command(obs)
    with pytest.raises(ConfigError, match="not a single-snippet mocap tracking expert"):
        (experts[0] / "bad").mkdir()
        cfg = json.loads((experts[0] / "config.json").read_text())
        cfg["run"]["env"] = "cartpole-swingup"
        (experts[0] / "bad" / "config.json").write_text(json.dumps(cfg))
        Expert(experts[0] / "bad")


@pytest.mark.parametrize("which", [0, 1], ids=FAMILIES)
def test_jacobian_matches_finite_differences_in_float64(experts, which):
    expert = Expert(experts[which], dtype=torch.float64)
    nominal = data.rollout(expert, expert.make_env(0), 0.0, np.random.default_rng(0), with_jacobians=True)
    flat = expert.flat_obs(nominal["states"][3], nominal["task"][3]).astype(np.float64)
    reference = nominal.get("reference_actions", [None] * 4)[3]
    assert (reference is None) == (which == 1)
    a_star, jacobian = expert.mean_command_and_jacobian(flat, reference)
    assert jacobian.shape == (56, 224) and np.abs(jacobian).max() > 0
    np.testing.assert_allclose(a_star, expert.mean_command(flat, reference), rtol=1e-12)
    np.testing.assert_allclose(a_star, nominal["mean_actions"][3], atol=1e-6)
    delta = 1e-6 * np.random.default_rng(1).standard_normal(224)
    moved = flat.copy()
    moved[expert.proprio] += delta
    np.testing.assert_allclose(expert.mean_command(moved, reference) - a_star, jacobian @ delta, rtol=1e-4,
                               atol=1e-12)
    # column by column against central differences; the time in the clip is not a state dimension
    eps = 1e-6
    for j in (0, 100, 223):
        up, down = flat.copy(), flat.copy()
        up[expert.proprio.start + j] += eps
        down[expert.proprio.start + j] -= eps
        fd = (expert.mean_command(up, reference) - expert.mean_command(down, reference)) / (2 * eps)
        np.testing.assert_allclose(jacobian[:, j], fd, rtol=1e-5, atol=1e-9)


def test_bc_rollouts_log_the_mean_action_at_the_visited_noisy_states(experts, collected):
    expert = Expert(experts[0])
    bc = collected[0][0]["bc"]
    steps = len(bc["actions"])
    assert len(bc["states"]) == steps + len(bc["lengths"]) and bc["lengths"].sum() == steps
    # states s_0..s_{T_i} of each rollout; the mean action at every state that has one
    offsets = np.concatenate([[0], np.cumsum(bc["lengths"] + 1)])
    with_action = np.concatenate([np.arange(o, o + n) for o, n in zip(offsets[:-1], bc["lengths"])])
    recomputed = expert.mean_command(expert.flat_obs(bc["states"][with_action], bc["task"][with_action]),
                                    bc["reference_actions"])
    np.testing.assert_allclose(bc["mean_actions"], recomputed, atol=1e-5)
    # the executed actions are the noisy ones, not the logged targets
    noise = bc["actions"] - bc["mean_actions"]
    inside = np.abs(bc["actions"]) < 1  # clipping shrinks the noise at the bounds
    assert 0.7 * NOISE < noise[inside].std() < 1.3 * NOISE
    assert np.abs(bc["actions"]).max() <= 1
    # the logged states are the ones the executed actions visit: replaying them in a fresh env reproduces them
    env = expert.make_env(123)
    obs, _ = env.reset(seed=7)
    replayed = [expert.layout.flatten(obs)[expert.proprio]]
    for action in bc["actions"][:bc["lengths"][0]]:
        obs, *_ = env.step(expert.env_action(action, env.reference_action()))
        replayed.append(expert.layout.flatten(obs)[expert.proprio])
    np.testing.assert_allclose(np.array(replayed), bc["states"][:bc["lengths"][0] + 1], atol=1e-4)


def test_nominal_trajectory_is_noise_free_with_jacobians(experts, collected):
    nominal = collected[0][0]["nominal"]
    T = nominal["lengths"][0]
    assert nominal["states"].shape == (T + 1, 224) and nominal["jacobians"].shape == (T, 56, 224)
    # the walker's command is the mean; the residual env's round trip (command -> action -> command) is float32
    np.testing.assert_allclose(nominal["actions"], nominal["mean_actions"], atol=1e-6)
    expert = Expert(experts[0])
    a_star, jacobian = expert.mean_command_and_jacobian(expert.flat_obs(nominal["states"][1], nominal["task"][1]),
                                                        nominal["reference_actions"][1])
    np.testing.assert_allclose(nominal["jacobians"][1], jacobian, rtol=1e-5, atol=1e-7)


def test_delta_is_the_pooled_mean_square_deviation_from_the_nominal_states(collected):
    results, path = collected
    squares = []
    for result in results:
        nominal, bc = result["nominal"]["states"], result["bc"]
        offsets = np.concatenate([[0], np.cumsum(bc["lengths"] + 1)])
        for i in range(PERTURBATION_TRAJECTORIES):  # the first few noisy rollouts of every expert
            states = bc["states"][offsets[i]:offsets[i + 1]]
            n = min(len(states), len(nominal))
            np.testing.assert_array_equal(states[0], nominal[0])  # the shared clip start
            squares.append((states[1:n].astype(np.float64) - nominal[1:n]) ** 2)
    expected = np.sqrt(np.concatenate(squares).mean(0))
    with h5py.File(path, "r") as f:
        np.testing.assert_allclose(f["delta_std"][()], expected, rtol=1e-5)
    assert expected.max() > 0
    with pytest.raises(ConfigError, match="no state deviations"):
        data.estimate_delta_std([{**r, "attrs": {**r["attrs"], "deviation_count": 0}} for r in results])


def test_hdf5_roundtrip_and_masks_of_short_trajectories(collected):
    results, path = collected
    with h5py.File(path, "r") as f:
        assert f.attrs["format"] == data.FORMAT and f.attrs["state_dim"] == 224
        for result in results:
            group = f[result["snippet"]]
            for part in ("bc", "nominal"):
                for key, array in result[part].items():
                    np.testing.assert_array_equal(group[part][key][()], array)
            assert group.attrs["expert_steps"] == 150 and group.attrs["action_noise_std"] == NOISE
            assert group.attrs["nominal_steps"] == result["nominal"]["lengths"][0]
    dataset = NPMPDataset(path)
    assert dataset.snippets == sorted(SNIPPETS)
    bc = results[0]["bc"]
    lengths = [len(dataset.trajectory(s, "bc", i)["actions"]) for s in dataset.snippets for i in range(TRAJECTORIES)]
    length = max(lengths) + 3  # longer than every trajectory: every window is padded
    states, actions, mask, *_ = dataset.sample_bc(64, length, torch.Generator().manual_seed(0))
    assert states.shape == (64, length + LOOKAHEAD, 224) and actions.shape == (64, length, 56)
    trajectories = [dataset.trajectory(s, "bc", i) for s in dataset.snippets for i in range(TRAJECTORIES)]
    for row in range(64):
        # a window longer than its trajectory starts at s_0: find it by its states, then check mask and padding
        match = [t for t in trajectories if len(t["states"]) <= length + LOOKAHEAD
                 and np.array_equal(states[row, :len(t["states"])].numpy(), t["states"])]
        assert match, "every window is a stored trajectory"
        t = match[0]
        T = len(t["actions"])
        valid = T - LOOKAHEAD + 1
        np.testing.assert_array_equal(mask[row].numpy(), np.arange(length) < valid)
        np.testing.assert_array_equal(actions[row, :valid].numpy(), t["mean_actions"][:valid])
        assert not actions[row, valid:].any() and not states[row, T + 1:].any()
    np.testing.assert_array_equal(dataset.trajectory(SNIPPETS[0], "bc", 0)["states"],
                                  bc["states"][:bc["lengths"][0] + 1])
    # one-step windows: any valid step t of any trajectory, s_{t..t+K} and mu_E(s_t), all with mask 1
    states, actions, mask, *_ = dataset.sample_bc(64, 1, torch.Generator().manual_seed(2), device="cpu")
    assert mask.all()
    starts = set()
    for row in range(64):
        found = [(i, t) for i, tr in enumerate(trajectories) for t in range(len(tr["actions"]) - LOOKAHEAD + 1)
                 if np.array_equal(states[row].numpy(), tr["states"][t:t + LOOKAHEAD + 1])
                 and np.array_equal(actions[row, 0].numpy(), tr["mean_actions"][t])]
        assert found
        starts.add(found[0][1])
    assert len(starts) > 1  # not only the clip start


def test_lfpc_targets_are_linear_feedback_and_match_finite_differences(experts, collected, tmp_path):
    results, _ = collected
    expert = Expert(experts[0], dtype=torch.float64)
    # a small Delta: mu_E(s* + d) - mu_E(s*) ~ J* d. Small relative to the spread the expert's observation
    # normaliser saw, so that the normalised input moves by ~1e-3 and stays in its linear (unclipped) range
    spread = (expert.obs_norm.var[expert.proprio] + expert.obs_norm.eps).sqrt().numpy()
    small = (1e-3 * spread).astype(np.float32)
    path = data.write_dataset(tmp_path / "small.h5", results, small, {})
    dataset = NPMPDataset(path, snippets=[SNIPPETS[0]])
    nominal = dataset.trajectory(SNIPPETS[0])
    B, P, L = 3, 4, 4
    states, targets, mask, *_ = dataset.sample_lfpc(B, L, P, torch.Generator().manual_seed(0))
    assert states.shape == (B * P, L + LOOKAHEAD, 224) and targets.shape == (B * P, L, 56)
    for row in range(B * P):
        start = int(np.argmin(np.abs(nominal["states"] - states[row, 0].numpy()).sum(1)))
        for t in range(L):
            if not mask[row, t]:
                continue
            s_star = nominal["states"][start + t].astype(np.float64)
            delta = states[row, t].double().numpy() - s_star
            assert 0 < np.abs(delta).max() < 1e-2 * spread.max()  # perturbed, at Delta's scale
            flat = expert.flat_obs(s_star, nominal["task"][start + t].astype(np.float64))
            moved, opposite = flat.copy(), flat.copy()
            moved[expert.proprio] += delta
            opposite[expert.proprio] -= delta
            reference = nominal["reference_actions"][start + t]
            # a central difference: its error is third order in delta, so J* delta must match it closely
            change = 0.5 * (expert.mean_command(moved, reference) - expert.mean_command(opposite, reference))
            target_change = targets[row, t].double().numpy() - nominal["mean_actions"][start + t]
            # where the residual composition's clip is active the command is not differentiable: J* says 0 there
            free = np.abs(nominal["mean_actions"][start + t]) < 1.0 - 1e-3
            # the perturbed state is stored in float32, so the delta read back from it is off by up to an ulp of s*
            rounding = np.abs(nominal["jacobians"][start + t].astype(np.float64)) @ \
                np.spacing(np.abs(s_star).astype(np.float32)).astype(np.float64)
            # 20 %: the tiny 150-step experts here are far from linear even at this scale; a wrong J* is off by ~100 %
            tolerance = 0.2 * np.abs(change).max() + 1e-6 + rounding
            assert np.all(np.abs(target_change - change)[free] <= tolerance[free]), (target_change, change)
        # the look-ahead beyond the targets is perturbed too (x_t + delta_x_t of eq 8.9)
        beyond = start + L + LOOKAHEAD - 1
        if beyond < len(nominal["states"]) and mask[row, L - 1]:
            assert not np.array_equal(states[row, -1].numpy(), nominal["states"][beyond])
    # the P copies of one subsequence see different perturbations of the same nominal states
    assert not torch.equal(states[0], states[1]) and torch.allclose(states[0], states[1], atol=float(20 * small.max()))
    # the batches are what NPMP.loss takes (eq 8.9 through the model's beta-ELBO)
    model = NPMP(NPMPConfig(state_dim=224, action_dim=56, latent_dim=4, encoder_hidden=(8,), decoder_hidden=(8,)))
    for batch in (dataset.sample_bc(4, L), (states, targets, mask)):
        loss, _ = model.loss(*batch)
        assert torch.isfinite(loss)


def test_held_out_snippets_are_excluded(collected):
    results, path = collected
    dataset = NPMPDataset(path, snippets=[SNIPPETS[1]])
    held_out = {tuple(np.round(s, 5)) for s in results[0]["bc"]["states"][1:]}
    states, _, mask, *_ = dataset.sample_bc(32, 5, torch.Generator().manual_seed(1))
    kept = results[1]["bc"]["states"]
    for row in states[:, 1].numpy():  # s_1 differs between snippets (s_0 is each clip's first frame)
        assert np.abs(kept - row).sum(1).min() == 0 and tuple(np.round(row, 5)) not in held_out
    with pytest.raises(ConfigError, match="not in"):
        NPMPDataset(path, snippets=["01_01-0"])
    with pytest.raises(ConfigError, match="out of range"):
        dataset.trajectory(SNIPPETS[1], "bc", TRAJECTORIES)
    with pytest.raises(ConfigError, match="no bc trajectories"):
        dataset.trajectory(SNIPPETS[0], "bc", 0)  # held out
    with pytest.raises(ConfigError, match="batch and length"):
        dataset.sample_bc(0, 5)


def test_collect_writes_atomically(experts, tmp_path):
    out = tmp_path / "all.h5"
    data.collect(experts[1:], out, trajectories_per_expert=1, action_noise_std=0.1, perturbation_trajectories=1)
    assert NPMPDataset(out).snippets == [SNIPPETS[1]]
    before = out.read_bytes()
    bad = data.collect_expert(experts[1], 1, 0.1, 1, seed=5)
    with pytest.raises(ConfigError):
        data.write_dataset(out, [bad, bad], np.ones(224), {})  # two experts for one snippet
    del bad["nominal"]
    with pytest.raises(KeyError):
        data.write_dataset(out, [bad], np.ones(224), {})  # fails while writing: the old file stays whole
    assert out.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["all.h5"]
    # delta_std left out: estimated from the results
    good = data.collect_expert(experts[1], 2, 0.1, 2, seed=5)
    with h5py.File(data.write_dataset(tmp_path / "auto.h5", [good]), "r") as f:
        np.testing.assert_array_equal(f["delta_std"][()], data.estimate_delta_std([good]))


def test_expert_rollout_is_the_noise_free_nominal_trajectory(experts, collected):
    expert = Expert(experts[0])
    trajectory = data.expert_rollout(expert, seed=3)
    nominal = collected[0][0]["nominal"]
    np.testing.assert_allclose(trajectory["states"], nominal["states"], atol=1e-5)  # deterministic from the start
    np.testing.assert_allclose(trajectory["mean_actions"], nominal["mean_actions"], atol=1e-5)
    np.testing.assert_allclose(trajectory["actions"], trajectory["mean_actions"], atol=1e-6)
    assert trajectory["terminated"] == bool(nominal["terminated"][0]) and "jacobians" not in trajectory


def test_reference_lookahead_reads_the_clip_at_the_windows_time_indices(collected):
    from pipelines.npmp.evaluate import reference_states

    results, path = collected
    dataset = NPMPDataset(path, lookahead_source="reference")
    clips = {s: reference_states(s) for s in dataset.snippets}
    trajectories = [(s, dataset.trajectory(s, "bc", i)) for s in dataset.snippets for i in range(TRAJECTORIES)]
    batch = dataset.sample_bc(32, 3, torch.Generator().manual_seed(3))
    assert batch.lookahead.shape == batch.states.shape
    for row in range(32):
        # find the window's trajectory and start t by its states; its look-ahead is the clip at t .. t+L+K
        found = [(s, t) for s, tr in trajectories for t in range(len(tr["states"]) - 3 - LOOKAHEAD + 1)
                 if np.array_equal(batch.states[row].numpy(), tr["states"][t:t + 3 + LOOKAHEAD])]
        assert found
        snippet, t = found[0]
        np.testing.assert_array_equal(batch.lookahead[row].numpy(), clips[snippet][t:t + 3 + LOOKAHEAD])
    # LFPC: the P perturbed copies of a subsequence share one unperturbed reference look-ahead
    lfpc = dataset.sample_lfpc(2, 3, 2, torch.Generator().manual_seed(4))
    assert torch.equal(lfpc.lookahead[0], lfpc.lookahead[1]) and not torch.equal(lfpc.states[0], lfpc.states[1])
    assert NPMPDataset(path).sample_bc(2, 3).lookahead is None
    with pytest.raises(ConfigError, match="lookahead_source"):
        NPMPDataset(path, lookahead_source="clip")


def test_collection_parts_resume_and_refuse_other_settings(collected, tmp_path):
    results, _ = collected
    jobs = [data.CollectJob(r["snippet"], "unused", str(tmp_path / "parts" / f"{r['snippet']}.h5"), i, 1, 0.1, 1,
                            meta={"seed": i}) for i, r in enumerate(results)]
    assert not data.finished_part(jobs[0])
    for job, result in zip(jobs, results):
        data.write_dataset(job.path, [result], meta=job.meta)
    assert all(data.finished_part(job) for job in jobs)
    with pytest.raises(ConfigError, match="collected with other settings"):
        data.finished_part(data.CollectJob(**{**jobs[0].__dict__, "meta": {"seed": 7}}))
    merged = data.merge_parts([job.path for job in jobs], tmp_path / "merged.h5", meta={"note": "merged"})
    back, meta = data.read_results(merged)
    assert meta == {"note": "merged"} and [r["snippet"] for r in back] == [r["snippet"] for r in results]
    for a, b in zip(back, results):
        for part in ("bc", "nominal"):
            for key in a[part]:
                np.testing.assert_array_equal(a[part][key], b[part][key])
    np.testing.assert_allclose(NPMPDataset(merged).delta_std.numpy(), data.estimate_delta_std(results), rtol=1e-6)
    Path(jobs[0].path).write_bytes(b"not hdf5")
    with pytest.raises(ConfigError, match="missing or corrupt"):
        data.finished_part(jobs[0])


def test_primitives_driving_a_planner_rollout_match_their_own_closed_loop_run():
    """DAgger's rollout (the primitives act, the planner only labels) reproduces the primitives' own closed-loop
    episode from the same first frame: the same steps and rewards, and the planner's labels at every state."""
    from agents.mpc import MPCConfig
    from pipelines.npmp.data import PlannerExpert, rollout
    from pipelines.npmp.evaluate import primitives_actor, reference_encoder, reference_states, run_latents
    from priors.npmp import DEFAULT_PRIMITIVES, load_primitives

    model, _ = load_primitives(DEFAULT_PRIMITIVES)
    if model.config.lookahead_source != "reference":
        pytest.skip("the shipped primitives read the trajectory's look-ahead")
    snippet = "09_06-0"
    expert = PlannerExpert(snippet, MPCConfig(threads=1, horizon=2, knots=1, candidates=4, elites=2, iterations=1))
    env = expert.make_env(0)
    try:
        episode = rollout(expert, env, 0.0, np.random.default_rng(0), actor=primitives_actor(model, snippet))
    finally:
        env.close()
    total, steps = run_latents(model, snippet, reference_encoder(model, torch.as_tensor(reference_states(snippet))))
    assert len(episode["actions"]) == steps and episode["rewards"].sum() == pytest.approx(total, rel=1e-4)
    assert episode["mean_actions"].shape == episode["actions"].shape
    assert not np.allclose(episode["mean_actions"], episode["actions"])   # the labels are the planner's


def test_a_planner_run_stopped_for_a_periodic_law_is_refused_where_the_whole_run_is_read():
    """A looped walk's periodic law plans only through the loop's third stride and records where it stopped; the
    time-indexed law and the anchored planner read every step of the run, so such a run is one clear error there."""
    whole = {"physics_states": np.zeros((5, 3)), "commands": np.zeros((4, 2)), "stopped_at": np.int64(-1)}
    data.require_whole_run(whole, "07_01-0-loop10", "the time-indexed LQR law")
    data.require_whole_run({k: v for k, v in whole.items() if k != "stopped_at"}, "07_01-0", "older data")
    with pytest.raises(ConfigError, match="stops after 124 steps.*periodic=true"):
        data.require_whole_run({**whole, "stopped_at": np.int64(124)}, "07_01-0-loop10", "the anchored planner")


def test_windows_per_snippet_draw_each_snippet_equally_often():
    """A snippet with one trajectory beside one with nine (an arc beside a walk with DAgger rounds): windows drawn
    over all steps come from it a tenth of the time, drawn per snippet half the time."""
    lengths = [np.array([20]), np.full(9, 20)]
    arrays = {"lengths": lengths, "states": [np.zeros((int(n.sum() + len(n)), 3), np.float32) for n in lengths],
              "mean_actions": [np.zeros((int(n.sum()), 2), np.float32) for n in lengths]}
    store = data._Trajectories(arrays, torch.device("cpu"))
    draws = 4000
    by_steps = store.windows(draws, 5, torch.Generator().manual_seed(0))
    per_snippet = store.windows(draws, 5, torch.Generator().manual_seed(0), per_snippet=True)
    assert abs((store.owner[by_steps.which] == 0).float().mean().item() - 0.1) < 0.02
    assert abs((store.owner[per_snippet.which] == 0).float().mean().item() - 0.5) < 0.03


def test_trajectory_weights_draw_a_trajectory_that_many_times_as_often():
    """Three equal trajectories, the last weighed 4: a third of the draws would come from it uniformly, 4/6 with the
    weights; per snippet, the weight acts inside the snippet only."""
    lengths = [np.full(2, 20), np.array([20])]
    arrays = {"lengths": lengths, "states": [np.zeros((int(n.sum() + len(n)), 3), np.float32) for n in lengths],
              "mean_actions": [np.zeros((int(n.sum()), 2), np.float32) for n in lengths]}
    store = data._Trajectories(arrays, torch.device("cpu"))
    draws, weights = 6000, torch.tensor([1.0, 4.0, 1.0])
    weighed = store.windows(draws, 5, torch.Generator().manual_seed(0), weights=weights)
    assert abs((weighed.which == 1).float().mean().item() - 4 / 6) < 0.02
    per_snippet = store.windows(draws, 5, torch.Generator().manual_seed(0), per_snippet=True, weights=weights)
    assert abs((per_snippet.which == 1).float().mean().item() - 0.5 * 4 / 5) < 0.02
    assert abs((per_snippet.which == 2).float().mean().item() - 0.5) < 0.02


def test_relabelled_episodes_are_each_snippets_last_and_can_be_weighed(collected, tmp_path):
    """A snippet's last ``relabelled_trajectories`` bc episodes are DAgger's (the student's states, relabelled);
    ``sample_bc(relabelled_weight=...)`` draws them more often, and a weight that is not positive is refused."""
    import shutil

    from pipelines.npmp.distill import DistillConfig

    _, path = collected
    rounds = tmp_path / "rounds.h5"
    shutil.copy(path, rounds)
    with h5py.File(rounds, "r+") as f:   # as a DAgger round leaves it: the first snippet's last episode appended
        f[SNIPPETS[0]].attrs["trajectories"] = TRAJECTORIES - 1
        f[SNIPPETS[0]].attrs["relabelled_trajectories"] = 1
    dataset = NPMPDataset(rounds)
    assert dataset.relabelled().tolist() == [False] * (TRAJECTORIES - 1) + [True] + [False] * TRAJECTORIES
    batch = dataset.sample_bc(8, 3, torch.Generator().manual_seed(0), relabelled_weight=3.0)
    assert batch.states.shape[:2] == (8, 3 + LOOKAHEAD)
    with pytest.raises(ValueError, match="relabelled_weight must be > 0"):
        DistillConfig(relabelled_weight=0.0).validate()
    with pytest.raises(ValueError, match="weighs the BC rollouts"):
        DistillConfig(scheme="lfpc", relabelled_weight=2.0).validate()
