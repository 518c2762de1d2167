"""The NPMP model (priors/npmp/model.py): AR(1) prior, look-ahead windows, the beta-ELBO against hand-computed
values, the latent-optimisation diagnostic, and saved primitives."""
import json
import math

import pytest
import torch

from priors.io import ModuleFileError, sha256_file
from priors.models import ar1_chain
from priors.npmp import NPMP, NPMPConfig, load_primitives, save_primitives
from pipelines.npmp.distill import DistillConfig, lr_factor
from pipelines.npmp.evaluate import optimise_latents


def tiny(**kw) -> NPMP:
    return NPMP(NPMPConfig(state_dim=3, action_dim=2, latent_dim=2, encoder_hidden=(5,), decoder_hidden=(6,),
                           lookahead=1, **kw))


def test_ar1_chain_marginal_is_standard_normal_at_every_step():
    g = torch.Generator().manual_seed(0)
    chain = ar1_chain(steps=60, batch=20000, latent_dim=2, ar_coef=0.95, generator=g)
    for t in (0, 10, 59):
        assert chain[:, t].mean(0).abs().max() < 0.03
        assert (chain[:, t].var(0) - 1).abs().max() < 0.05
    lag1 = (chain[:, 30] * chain[:, 31]).mean(0)
    assert torch.allclose(lag1, torch.full((2,), 0.95), atol=0.03)


def test_windows_stack_the_lookahead_states():
    model = NPMP(NPMPConfig(state_dim=2, action_dim=1, latent_dim=1, encoder_hidden=(3,), decoder_hidden=(3,),
                            lookahead=2))
    states = torch.arange(10.0).reshape(1, 5, 2)  # s_t = [2t, 2t+1]
    x = model.windows(states)
    assert x.shape == (1, 3, 6)
    assert x[0, 1].tolist() == [2, 3, 4, 5, 6, 7]  # x_1 = [s_1, s_2, s_3]
    with pytest.raises(ValueError, match="lookahead"):
        model.windows(states[:, :2])
    # a reference look-ahead: x_t = [s_t, r_{t+1}, ..., r_{t+K}] (the current state stays the trajectory's)
    reference = -states
    assert model.windows(states, reference)[0, 1].tolist() == [2, 3, -4, -5, -6, -7]
    with pytest.raises(ValueError, match="do not match"):
        model.windows(states, reference[:, :4])
    with pytest.raises(ValueError, match="lookahead_source"):
        NPMPConfig(state_dim=2, action_dim=1, lookahead_source="clip").validate()


def test_reference_path_reads_displacement_and_turn_in_the_present_heading_and_feeds_the_encoder(tmp_path):
    from priors.npmp.model import reference_path

    # a walk along +y (heading pi/2), then a quarter turn to the left: frame t sees the root 1 m per frame ahead
    root = torch.tensor([[0.0, 0.0, math.pi / 2], [0.0, 1.0, math.pi / 2], [0.0, 2.0, math.pi],
                         [-1.0, 2.0, -math.pi + 0.1]])
    path = reference_path(root, (1, 2))
    assert path.shape == (4, 6)
    torch.testing.assert_close(path[0], torch.tensor([1.0, 0.0, 0.0, 2.0, 0.0, math.pi / 2]))
    torch.testing.assert_close(path[2, :3], torch.tensor([1.0, 0.0, 0.1]))   # the turn is wrapped across +-pi
    torch.testing.assert_close(path[3], torch.zeros(6))                      # past the end the last frame repeats
    assert reference_path(root, ()).shape == (4, 0)
    for bad in (dict(path_offsets=(15,)), dict(path_offsets=(0,), lookahead_source="reference"),
                dict(path_offsets=(30, 15), lookahead_source="reference")):
        with pytest.raises(ValueError, match="path_offsets"):
            tiny(**bad)
    # x_t = [s_t, r_{t+1}, p_t]; the path is normalised on its own and the latent depends on it
    torch.manual_seed(0)
    model = tiny(lookahead_source="reference", path_offsets=(1, 2))
    states, path_batch = torch.randn(2, 4, 3), path.expand(2, 4, 6)
    x = model.windows(states, -states, path_batch)
    assert x.shape == (2, 3, 12) and torch.equal(x[1, 2, 6:], path[2])
    with pytest.raises(ValueError, match="reference context"):
        model.windows(states, -states)
    model.set_normalisation(states.flatten(0, 1), path)
    torch.testing.assert_close(model.path_scale, path.std(0).clamp_min(1e-2))
    z = torch.zeros(2)
    turned = x[1, 2].clone()
    turned[-1] = -turned[-1]
    assert not torch.allclose(model.encode_step(z, x[1, 2])[0], model.encode_step(z, turned)[0])
    loss, _ = model.loss(states, torch.randn(2, 3, 2), targets=-states, context=path_batch)
    assert torch.isfinite(loss)
    loaded = load_primitives(save_primitives(model, tmp_path / "prim", {"proprio": 3}))[0]
    assert loaded.config.path_offsets == (1, 2) and torch.equal(loaded.path_shift, model.path_shift)
    # primitives without a path, given one: the same actions and latents until trained, the path normalised
    plain = tiny(lookahead_source="reference")
    extended = plain.with_path((1, 2), path)
    assert extended.config.path_offsets == (1, 2) and torch.allclose(extended.path_shift, path.mean(0))
    window = x[1, 2]
    for a, b in zip(plain.encode_step(z, window[:6]), extended.encode_step(z, window)):
        torch.testing.assert_close(a, b)
    with pytest.raises(ValueError, match="already"):
        extended.with_path((3,), path[:, :3])


def test_far_states_are_read_as_states_ahead_and_widening_keeps_what_the_primitives_did(tmp_path):
    from priors.npmp.model import reference_context, reference_far

    states = torch.arange(12.0).reshape(4, 3)   # four frames of three state dimensions
    far = reference_far(states, (2, 3))
    assert far.shape == (4, 6)
    assert far[0].tolist() == [6, 7, 8, 9, 10, 11] and far[2].tolist() == [9, 10, 11, 9, 10, 11]   # last repeats
    for bad in (dict(far_offsets=(3,)), dict(far_offsets=(1,), lookahead_source="reference"),
                dict(far_offsets=(3, 2), lookahead_source="reference")):
        with pytest.raises(ValueError, match="far_offsets"):
            tiny(**bad)
    root = torch.tensor([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [2.0, 0.0, 0.0], [3.0, 0.0, 0.0]])
    both = tiny(lookahead_source="reference", far_offsets=(2, 3), path_offsets=(1,))
    context = reference_context(both.config, states, root)   # the far states, then the path
    assert context.shape == (4, 9) and torch.equal(context[:, :6], far) and context[0, 6:].tolist() == [1, 0, 0]
    with pytest.raises(ValueError, match="root's"):
        reference_context(both.config, states, None)
    # far states are normalised as states, the path on its own; the latent depends on the far states
    torch.manual_seed(0)
    both.set_normalisation(torch.randn(20, 3) * 3 + 1, context[:, 6:])
    x = both.windows(states[None], -states[None], context[None])
    assert x.shape == (1, 3, 15)
    z = torch.zeros(2)
    moved = x[0, 0].clone()
    moved[6:12] += 1.0
    assert not torch.allclose(both.encode_step(z, x[0, 0])[0], both.encode_step(z, moved)[0])
    loaded = load_primitives(save_primitives(both, tmp_path / "prim", {"proprio": 3}))[0]
    assert loaded.config.far_offsets == (2, 3)
    # primitives that read a path, given far states too: the same latents until trained, normalisation kept
    pathed = tiny(lookahead_source="reference", path_offsets=(1,))
    pathed.set_normalisation(torch.randn(20, 3) * 3 + 1, context[:, 6:] + torch.randn(4, 3))
    widened = pathed.with_far((2, 3))
    assert widened.config.far_offsets == (2, 3) and torch.equal(widened.path_shift, pathed.path_shift)
    window = x[0, 1]
    narrow = torch.cat([window[:6], window[12:]])   # without the far states
    for a, b in zip(pathed.encode_step(z, narrow), widened.encode_step(z, window)):
        torch.testing.assert_close(a, b)
    with pytest.raises(ValueError, match="already"):
        widened.with_far((4,))


def normal_log_prob(x, mean, std):
    return (-0.5 * ((x - mean) / std) ** 2 - torch.log(std) - 0.5 * math.log(2 * math.pi)).sum(-1)


def test_beta_elbo_terms_match_hand_computed_values():
    torch.manual_seed(0)
    model = tiny(beta=0.3, ar_coef=0.8)
    states = torch.randn(2, 4, 3)   # T = 4 states, K = 1 -> 3 steps
    actions = torch.rand(2, 3, 2) * 2 - 1
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    torch.manual_seed(123)
    loss, scalars = model.loss(states, actions, mask)

    # by hand, replaying the same noise: one randn per step for the reparameterised z
    torch.manual_seed(123)
    z_prev = torch.zeros(2, 2)
    log_lik, kl = [], []
    for t in range(3):
        x_t = torch.cat([states[:, t], states[:, t + 1]], -1)
        raw = model.encoder(torch.cat([z_prev, x_t], -1))
        q_mean, q_log_std = raw[:, :2], raw[:, 2:]
        soft_upper = 2.0 - torch.nn.functional.softplus(2.0 - q_log_std)   # bounded_log_std's soft clamp
        q_std = (-5.0 + torch.nn.functional.softplus(soft_upper + 5.0)).exp()
        z = q_mean + q_std * torch.randn(2, 2)
        p_mean = 0.8 * z_prev if t else torch.zeros(2, 2)
        p_std = torch.full((2, 2), math.sqrt(1 - 0.8 ** 2) if t else 1.0)
        kl.append(normal_log_prob(z, q_mean, q_std) - normal_log_prob(z, p_mean, p_std))
        a_mean = model.decoder(torch.cat([states[:, t], z], -1))
        log_lik.append(normal_log_prob(actions[:, t], a_mean, torch.full_like(a_mean, 0.1)))
        z_prev = z
    log_lik, kl = torch.stack(log_lik, 1), torch.stack(kl, 1)
    expected = -((log_lik * mask).sum() - 0.3 * (kl * mask).sum()) / mask.sum()
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    assert scalars["npmp/kl"] == pytest.approx(((kl * mask).sum() / 5).item(), rel=1e-5)
    # the decoder's fixed std: log-likelihood of an exact action is -A (log 0.1 + log sqrt(2 pi))
    assert normal_log_prob(torch.zeros(2), torch.zeros(2), torch.full((2,), 0.1)).item() == pytest.approx(
        -2 * (math.log(0.1) + 0.5 * math.log(2 * math.pi)))


def test_gradients_reach_encoder_and_decoder_and_beta_zero_is_pure_likelihood():
    torch.manual_seed(1)
    model = tiny(beta=0.0)
    states, actions = torch.randn(3, 5, 3), torch.rand(3, 4, 2) * 2 - 1
    loss, scalars = model.loss(states, actions)
    assert loss.item() == pytest.approx(-scalars["npmp/log_likelihood"], rel=1e-6)
    loss.backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())


def test_latent_optimisation_reduces_the_action_error():
    torch.manual_seed(2)
    model = tiny()
    states, actions = torch.randn(8, 3), torch.rand(8, 2) * 2 - 1
    _, before, after = optimise_latents(model, states, actions, torch.zeros(8, 2), iterations=200)
    assert after < before


def test_cosine_learning_rate_starts_at_lr_and_ends_near_zero():
    constant, cosine = DistillConfig(steps=100), DistillConfig(steps=100, lr_schedule="cosine")
    assert [lr_factor(constant, s) for s in (1, 50, 100)] == [1.0, 1.0, 1.0]
    factors = [lr_factor(cosine, s) for s in range(1, 101)]
    assert factors[0] == 1.0 and abs(factors[50] - 0.5) < 1e-12 and 0 < factors[-1] < 1e-3
    assert all(a > b for a, b in zip(factors, factors[1:]))
    with pytest.raises(ValueError, match="lr_schedule"):
        DistillConfig(lr_schedule="step").validate()


def test_state_normalisation_feeds_both_networks_standardised_states_and_is_saved(tmp_path):
    from safetensors.torch import load_file, save_file

    torch.manual_seed(4)
    model = tiny()
    data = torch.randn(500, 3) * torch.tensor([0.1, 1.0, 10.0]) + torch.tensor([5.0, 0.0, -3.0])
    model.set_normalisation(data)
    assert torch.allclose(model.state_shift, data.mean(0)) and torch.allclose(model.state_scale, data.std(0))
    plain = tiny()
    plain.load_state_dict({**model.state_dict(), "state_shift": torch.zeros(3), "state_scale": torch.ones(3)})
    s, z = data[:4], torch.randn(4, 2)
    standardised = (s - data.mean(0)) / data.std(0)
    assert torch.allclose(model.decode(s, z)[0], plain.decode(standardised, z)[0], atol=1e-5)
    window = torch.cat([s, s.flip(0)], dim=-1)   # K = 1: [s_t, s_{t+1}]
    expected = plain.encode_step(z, torch.cat([standardised, standardised.flip(0)], dim=-1))
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(model.encode_step(z, window), expected))
    # saved with the weights; primitives written before the normalisation existed load as the identity
    path = save_primitives(model, tmp_path / "prim", {"proprio": 3})
    assert torch.equal(load_primitives(path)[0].state_scale, model.state_scale)
    weights = load_file(path / "weights.safetensors")
    save_file({k: v for k, v in weights.items() if not k.startswith("state_")}, path / "weights.safetensors")
    meta_file = path / "meta.json"
    record = json.loads(meta_file.read_text())
    record["sha256"] = {"weights.safetensors": sha256_file(path / "weights.safetensors")}
    meta_file.write_text(json.dumps(record))
    old = load_primitives(path)[0]
    assert torch.equal(old.state_shift, torch.zeros(3)) and torch.equal(old.state_scale, torch.ones(3))


def test_primitives_roundtrip_bit_for_bit_and_bad_files_fail_clearly(tmp_path):
    torch.manual_seed(3)
    model = tiny()
    path = save_primitives(model, tmp_path / "prim", {"proprio": 3}, clips=["a"], steps=7)
    loaded, meta = load_primitives(path)
    assert meta["clips"] == ["a"] and meta["steps"] == 7 and meta["obs_groups"] == {"proprio": 3}
    for (name, a), (_, b) in zip(model.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), name
    assert not any(p.requires_grad for p in loaded.parameters())
    with pytest.raises(ValueError, match="state_dim"):
        save_primitives(model, tmp_path / "bad", {"proprio": 4})
    with pytest.raises(ModuleFileError, match="no NPMP primitives"):
        load_primitives(tmp_path / "missing")
    weights = path / "weights.safetensors"
    weights.write_bytes(weights.read_bytes()[:-10])
    with pytest.raises(ModuleFileError, match="corrupt"):
        load_primitives(path)
    path = save_primitives(model, tmp_path / "prim", {"proprio": 3})
    meta_file = path / "meta.json"
    record = json.loads(meta_file.read_text())
    meta_file.write_text(json.dumps({**record, "format": "probctl-prior"}))
    with pytest.raises(ModuleFileError, match="not a probctl-npmp-primitives"):
        load_primitives(path)
    meta_file.write_text(json.dumps({**record, "config": {**record["config"], "latent_dim": 5}}))
    with pytest.raises(ModuleFileError, match="do not match"):
        load_primitives(path)


def test_half_precision_primitives_are_half_the_file_and_act_alike(tmp_path, capsys):
    from pipelines.npmp.__main__ import main

    torch.manual_seed(4)
    model = NPMP(NPMPConfig(state_dim=3, action_dim=2, latent_dim=2, encoder_hidden=(64,), decoder_hidden=(64, 64),
                            lookahead=1))
    full = save_primitives(model, tmp_path / "full", {"proprio": 3}, clips=["a"], evaluation={"train": 1})
    assert main(["half", "--primitives", str(full), "--out", str(tmp_path / "half")]) == 0
    half, meta = load_primitives(tmp_path / "half")
    assert meta["weights_dtype"] == "float16" and meta["clips"] == ["a"] and meta["evaluation"] == {"train": 1}
    assert meta["halved_from_sha256"] == sha256_file(full / "weights.safetensors")
    size = lambda d: (d / "weights.safetensors").stat().st_size  # noqa: E731
    assert size(tmp_path / "half") < 0.55 * size(full)
    assert all(p.dtype == torch.float32 for p in half.parameters())   # read back into the model's precision
    states, latents = torch.randn(256, 3), torch.randn(256, 2)
    with torch.no_grad():
        reference, halved = model.decode(states, latents)[0], half.decode(states, latents)[0]
    assert torch.allclose(reference, halved, atol=5e-3) and not torch.equal(reference, halved)
    # re-saved after loading (evaluate writes its numbers into the meta this way): still float16 on disk
    save_primitives(half, tmp_path / "half", meta["obs_groups"],
                    **{k: v for k, v in meta.items() if k not in ("format", "version", "sha256", "config", "obs_groups")})
    assert size(tmp_path / "half") < 0.55 * size(full)
    assert main(["half", "--primitives", str(full), "--out", str(full)]) == 2   # never over the float32 file
    assert capsys.readouterr().err.startswith("error: --out must differ")
    assert torch.equal(load_primitives(full)[0].state_dict()["state_scale"], model.state_dict()["state_scale"])


def test_shipped_primitives_load_with_their_record_and_drive_the_humanoid():
    import numpy as np

    import envs
    from priors.npmp import DEFAULT_PRIMITIVES
    from priors.reuse import LatentActionEnv

    model, meta = load_primitives(DEFAULT_PRIMITIVES)
    c = model.config
    assert (c.latent_dim, c.encoder_hidden, c.decoder_hidden, c.decoder_std, c.ar_coef, c.beta, c.lookahead) == \
        (60, (1024, 1024), (1024, 1024, 1024), 0.1, 0.95, 0.1, 5)
    assert meta["obs_groups"] == {"proprio": 224} and len(meta["clips"]) >= 8 and meta["steps"] > 0
    assert not set(meta["clips"]) & set(meta["held_out"])
    assert {"train", "held_out"} <= set(meta["evaluation"])
    if meta.get("collection", {}).get("experts") == "mpc":   # planned with the simulator: its settings recorded
        assert meta["collection"]["planner"]["candidates"] > 0
    else:
        assert set(meta["experts"]) >= set(meta["clips"])
    env = LatentActionEnv(envs.make("humanoid", seed=0), model.decode, c.latent_dim, meta["obs_groups"],
                          mean_to_action="clip", action_dim=c.action_dim)
    env.reset(seed=0)
    for _ in range(3):
        _, reward, terminated, truncated, info = env.step(np.zeros(c.latent_dim, np.float32))
        assert np.isfinite(reward) and info["latent"].shape == (c.latent_dim,)


def same_but_beta(config: dict, other: dict) -> bool:
    """Two primitives' configs alike but for beta (options saved empty by a newer version, such as far_offsets: [],
    count as absent)."""
    def kept(c):
        return {k: v for k, v in c.items() if k != "beta" and v != []}
    return kept(config) == kept(other)


def test_shipped_weak_primitives_differ_from_the_shipped_ones_only_in_beta():
    """benchmarks/npmp.py's beta = 0.001 condition (seed 000 Fig 8.6a) reads them on a fresh clone."""
    from priors.npmp import DEFAULT_PRIMITIVES

    model, meta = load_primitives(DEFAULT_PRIMITIVES.parent / "npmp-beta0.001")
    _, shipped = load_primitives(DEFAULT_PRIMITIVES)
    assert model.config.beta == 0.001 and shipped["config"]["beta"] == 0.1
    assert same_but_beta(meta["config"], shipped["config"])
    assert meta["clips"] == shipped["clips"] and meta["held_out"] == shipped["held_out"]
    assert meta["distill"] == shipped["distill"] and meta["data"] == shipped["data"]


def test_shipped_strong_primitives_are_the_beta_1_counterpart_in_float16():
    """benchmarks/npmp.py's beta = 1 condition reads them on a fresh clone (float16 weights, `pipelines.npmp half`)."""
    from priors.npmp import DEFAULT_PRIMITIVES

    model, meta = load_primitives(DEFAULT_PRIMITIVES.parent / "npmp-beta1")
    _, shipped = load_primitives(DEFAULT_PRIMITIVES)
    assert model.config.beta == 1.0 and meta["weights_dtype"] == "float16"
    size = lambda d: (d / "weights.safetensors").stat().st_size  # noqa: E731
    assert size(DEFAULT_PRIMITIVES.parent / "npmp-beta1") < 0.55 * 4 * sum(p.numel() for p in model.parameters())
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert same_but_beta(meta["config"], shipped["config"])
    assert meta["clips"] == shipped["clips"] and meta["held_out"] == shipped["held_out"]
    assert {"train", "held_out"} <= set(meta["evaluation"])


def test_benchmark_report_refuses_another_step_count_and_keeps_the_runs(tmp_path, capsys):
    """Rebuilding a summary with the wrong --steps must not drop the runs the file holds."""
    from benchmarks import npmp as bench

    output = tmp_path / "npmp.json"
    output.write_text(json.dumps({"steps": 150, "runs": {"scratch|seed=0|steps=150": {"curve": []}}}))
    before = output.read_text()
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--report", "--output", str(output), "--pipeline-dir", str(tmp_path)])
    assert exit_info.value.code == 2 and "pass --steps 150" in capsys.readouterr().err
    assert output.read_text() == before


def test_turning_benchmark_compares_the_walker_with_the_arcs(tmp_path, capsys):
    from benchmarks import npmp_turning

    out = tmp_path / "turning.json"
    assert npmp_turning.main(["--walks", "07_01-0", "--compare-steps", "10", "--results", str(out)]) == 0
    result = json.loads(out.read_text())
    (record,) = result["primitives"].values()
    rows, summary = record["snippets"], record["summary"]
    assert set(rows) == {"07_01-0", "07_01-0-left30", "07_01-0-right30"}
    assert all(r["compared_steps"] == 10 and 0 < r["steps"] <= r["full_steps"] == 82 for r in rows.values())
    # the arcs turn by 30 deg/s more (left) and less (right) than the clip: 9 degrees over 10 steps of 0.03 s
    assert summary["left30"]["median_reference_extra_turn_degrees"] == pytest.approx(9.0, abs=0.01)
    assert summary["right30"]["median_reference_extra_turn_degrees"] == pytest.approx(-9.0, abs=0.01)
    extra = rows["07_01-0-left30"]["walker_turn_degrees"] - rows["07_01-0"]["walker_turn_degrees"]
    assert summary["left30"]["turned_the_arcs_way"] == int(extra > 0)
    # a walk and its arcs are compared over the steps the shortest of the three lasted
    records = [{"walker_headings": [0.0] * length, "reference_headings": [0.0, 0.1, 0.2, 0.3, 0.4]}
               for length in (5, 3, 4)]
    npmp_turning.add_turns(records)
    assert [r["compared_steps"] for r in records] == [2, 2, 2]
    assert records[0]["reference_turn_degrees"] == pytest.approx(math.degrees(0.2))
    with pytest.raises(SystemExit):
        npmp_turning.main(["--walks", "09_01-0", "--results", str(out)])   # a run has no curved variants
    assert capsys.readouterr().err.startswith("error: no such snippet(s) 09_01-0-left30")
    with pytest.raises(SystemExit):
        npmp_turning.main(["--rate", "15", "--results", str(out)])   # no arcs at that rate are shipped
    assert "with arcs at 15 deg/s" in capsys.readouterr().err


def test_walk_table_compares_each_arcs_turn_with_its_straight_walk(tmp_path, capsys):
    from benchmarks import npmp_walk_table

    def level(steps, turns, reference):
        return {"upright_steps": steps, "median": sorted(steps)[len(steps) // 2], "of": 328,
                "turn_by_second_degrees": turns, "reference_turn_by_second_degrees": [reference] * len(steps)}

    walk, arc = "07_01-0-loop10", "07_01-0-loop10-right15"
    rows = {walk: {"0": level([328], [[-1.0, -4.0]], [0.0, -2.0]),
                   "0.03": level([100, 328, 50], [[0.0, -2.0], [0.0, -6.0], [1.0]], [0.0, -2.0])},
            arc: {"0": level([40], [[-20.0]], [-15.0]),   # fell before 2 s noise-free
                  "0.03": level([328, 90, 30], [[-10.0, -30.0], [-12.0, -34.0], []], [-15.0, -32.0])}}
    results = tmp_path / "noise.json"
    results.write_text(json.dumps({"controllers": {"primitives:runs/x/student": rows,
                                                   "primitives:runs/x/partial": {walk: rows[walk]}}}))
    cue = tmp_path / "cue.json"
    cue.write_text(json.dumps({"primitives": {"runs/x/student": {arc: {"own_vs_mirror": 0.02}}}}))
    assert npmp_walk_table.main(["--noise-results", str(results), "--cue-results", str(cue),
                                 "--snippets", walk, arc]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("| primitives | 07_01 | 07_01 right | to the end")
    (row,) = [line for line in lines if line.startswith("| `")]   # the partial controller lacks the arc
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[:5] == ["`student`", "328 / 100", "40 / 90", "1 of 2 / 2 of 6 (σ = 0.03)", "2.0e-02 – 2.0e-02"]
    # at 2 s: noise-free the arc had fallen; noisy -32 (two upright) minus -4 (two upright on the straight walk)
    assert cells[5] == "– / -28"
    assert lines[-1] == "The reference's turn at 2 s vs straight: 07_01 right -30°."
    assert npmp_walk_table.short_name("07_01-0-loop10-right15from3to7") == "07_01 right 3-7 s"
    with pytest.raises(SystemExit):
        npmp_walk_table.main(["--noise-results", str(cue), "--snippets", walk])
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "holds no npmp_noise.py results" in err


def test_shipped_primitives_fit_the_issues_budget():
    """Issue 13: the shipped primitives, weights and JSON of every set, stay within 50 MB (a set re-saved in float32
    by mistake would break it: 'half' keeps the reuse-only sets small)."""
    from priors.npmp import DEFAULT_PRIMITIVES

    files = [f for f in DEFAULT_PRIMITIVES.parent.rglob("*") if f.is_file()]
    assert {f.name for f in files} == {"weights.safetensors", "meta.json"}
    assert sum(f.stat().st_size for f in files) <= 50 * 10**6


@pytest.mark.slow   # about a minute alone (make test-slow)
def test_long_walk_benchmark_runs_the_primitives_on_a_looped_walk_and_resumes(tmp_path, capsys):
    from benchmarks import npmp_long
    from envs.mocap import convert

    mocap, out, frames = tmp_path / "looped.h5", tmp_path / "long.json", tmp_path / "frames"
    assert convert.main(["--clips", "07_01", "--loop", "4", "--loop-clips", "07_01", "--output", str(mocap)]) == 0
    assert npmp_long.main(["--mocap", str(mocap), "--results", str(out), "--frames", str(frames)]) == 0
    result = json.loads(out.read_text())
    (record,) = result["primitives"].values()
    (row,) = record["snippets"].values()   # the default: every looped snippet of the file, here one
    assert row["snippet"] == "07_01-0-loop4" and 0 < row["steps"] <= row["full_steps"] == 128
    assert record["summary"]["median_steps"] == row["steps"] and record["summary"]["snippets"] == 1
    (strip,) = frames.iterdir()   # a frame per second of the episode, and its last
    import imageio.v3 as iio

    height, width = iio.imread(strip).shape[:2]
    assert width == height * 4 // 3 * (row["steps"] // 33 + 1 + bool(row["steps"] % 33))
    # a rerun keeps what was measured and measures nothing again
    row["steps"] = -1
    out.write_text(json.dumps(result))
    assert npmp_long.main(["--mocap", str(mocap), "--results", str(out)]) == 0
    assert next(iter(json.loads(out.read_text())["primitives"].values()))["snippets"]["07_01-0-loop4"]["steps"] == -1
    # --phase adds the walker's phase lag to a measured episode (run again: it is deterministic) and keeps the rest
    assert npmp_long.main(["--mocap", str(mocap), "--results", str(out), "--phase"]) == 0
    kept = next(iter(json.loads(out.read_text())["primitives"].values()))["snippets"]["07_01-0-loop4"]
    lag = kept["phase_lag"]
    assert kept["steps"] == -1 and len(lag["at_quarters"]) == 4
    assert all(abs(x) <= 15 for x in lag["at_quarters"]) and abs(lag["median_before_last_20_steps"]) <= 3
    # --upright runs the episode again with the tracking ending off: the steps before the head drops below the
    # fall line, at most the clip's
    assert npmp_long.main(["--mocap", str(mocap), "--results", str(out), "--upright"]) == 0
    upright = next(iter(json.loads(out.read_text())["primitives"].values()))["snippets"]["07_01-0-loop4"]["upright"]
    assert 0 < upright["steps"] <= 128 and upright["offset_m"] >= 0 and isinstance(upright["fell"], bool)
    # how far the walker went and the reference did (the walk carries it forward); with --frames that episode is
    # drawn too, and the triangle of the two distances and the offset holds
    assert 0 < upright["travelled_m"] and 0.5 < upright["reference_travelled_m"] < 128 * 0.03 * 2.5
    assert abs(upright["travelled_m"] - upright["reference_travelled_m"]) <= upright["offset_m"] + 1e-3
    # and how far the walker and the reference turned: on a walk bent into an arc at 30 deg/s, the reference turns
    # 0.9 degrees a step more than on the straight walk, to the step the walker was last upright
    assert abs(upright["reference_turn_degrees"]) < 20 and abs(upright["turn_degrees"]) < 180
    curved = tmp_path / "curved.h5"
    assert convert.main(["--clips", "07_01", "--loop", "4", "--loop-clips", "07_01", "--curve", "30", "--curve-clips",
                         "07_01", "--output", str(curved)]) == 0
    arcs = tmp_path / "arcs.json"
    assert npmp_long.main(["--mocap", str(curved), "--results", str(arcs), "--upright", "--snippets",
                           "07_01-0-loop4-left30", "07_01-0-loop4-right30"]) == 0
    bent = next(iter(json.loads(arcs.read_text())["primitives"].values()))["snippets"]
    for snippet, sign in (("07_01-0-loop4-left30", 1), ("07_01-0-loop4-right30", -1)):
        record = bent[snippet]["upright"]
        expected = sign * 0.9 * record["steps"]
        assert abs(record["reference_turn_degrees"] - expected) < 20 + abs(upright["reference_turn_degrees"])
        # the same at each whole second upright (33 or 34 steps apart): 30 degrees a second more than the walk
        by_second = record["reference_turn_by_second_degrees"]
        assert len(by_second) == len(record["turn_by_second_degrees"]) == int(record["steps"] * 0.03 + 1e-9)
        for k, degrees in enumerate(by_second, 1):
            assert abs(degrees - sign * 30 * k) < 20 + abs(upright["reference_turn_degrees"])
    assert npmp_long.main(["--mocap", str(mocap), "--results", str(out), "--upright", "--frames", str(frames)]) == 0
    assert (frames / f"{strip.name[:-4]}-upright.png").is_file()
    from envs import EnvError
    from envs.mocap import tracking

    with pytest.raises(EnvError, match="termination_threshold"):
        tracking.make("humanoid-track:07_01-0", termination_threshold=0.0)
    capsys.readouterr()
    with pytest.raises(SystemExit):
        npmp_long.main(["--mocap", str(mocap), "--snippets", "07_01-0-loop10", "--results", str(out)])
    assert capsys.readouterr().err.startswith("error: no such snippet(s)")
    with pytest.raises(SystemExit):
        npmp_long.main(["--mocap", str(tmp_path / "none.h5"), "--results", str(out)])
    assert "no mocap data" in capsys.readouterr().err
