"""The LQR laws' Hessians as weights of the distillation's action error (pipelines/npmp/weights.py): the weights'
scaling and clamping, the weighted log-likelihood against the plain one, and the weights file checked against the
data's planner runs."""
import math

import numpy as np
import pytest
import torch

from agents.config import ConfigError
from pipelines.npmp import data
from pipelines.npmp.weights import action_weights, law_digest, read_law_weights, write_law_weights
from priors.npmp import NPMP, NPMPConfig


def test_weights_keep_the_hessians_directions_at_a_mean_eigenvalue_of_one_and_clamp_outliers():
    rng = np.random.default_rng(0)
    rotation, _ = np.linalg.qr(rng.standard_normal((4, 4)))
    values = np.array([[1.0, 2.0, 4.0, 9.0], [1.0, 1.0, 1.0, 1e6]])   # a step whose finite differences blew up
    hessians = np.einsum("ij,tj,kj->tik", rotation, values, rotation)
    weights = action_weights(hessians, floor=0.1, cap=3.0)
    got = np.linalg.eigvalsh(weights)
    # 1, 2, 4, 9 scaled to mean 1 (/4): 0.25, 0.5, 1, 2.25 -- within the clamp, and the mean is already 1
    assert np.allclose(got[0], [0.25, 0.5, 1.0, 2.25])
    # 1e6 takes the mean: the others fall to the floor, it to the cap; scaled again to mean 1
    assert np.allclose(got[1], np.array([0.1, 0.1, 0.1, 3.0]) / 0.825)
    assert np.allclose(weights[0] @ rotation[:, 3], 2.25 * rotation[:, 3])   # the directions are the Hessian's
    assert np.allclose(action_weights(np.repeat(5 * np.eye(3)[None], 2, 0)), np.eye(3))   # alike: the plain loss
    with pytest.raises(ConfigError, match="positive definite"):
        action_weights(-np.eye(2)[None])
    with pytest.raises(ConfigError, match="floor"):
        action_weights(np.eye(2)[None], floor=2.0)


def test_the_weighted_log_likelihood_is_the_gaussian_s_with_the_weighted_squared_error_and_normaliser():
    torch.manual_seed(0)
    model = NPMP(NPMPConfig(state_dim=3, action_dim=2, latent_dim=2, encoder_hidden=(8,), decoder_hidden=(8,),
                            lookahead=1))
    states, actions = torch.randn(4, 6, 3), torch.randn(4, 5, 2)
    torch.manual_seed(1)
    plain, _, mean = model.elbo_terms(states, actions)
    torch.manual_seed(1)   # the same sample of z
    same, _, _ = model.elbo_terms(states, actions, action_weights=torch.eye(2).expand(4, 5, 2, 2))
    assert torch.allclose(plain, same, atol=1e-5)
    W = torch.tensor([[3.0, 1.0], [1.0, 0.5]])
    torch.manual_seed(1)
    weighted, _, _ = model.elbo_terms(states, actions, action_weights=W.expand(4, 5, 2, 2))
    e = ((actions - mean) / model.config.decoder_std)[1, 2]
    by_hand = -0.5 * (3 * e[0] ** 2 + 2 * e[0] * e[1] + 0.5 * e[1] ** 2) \
        + 0.5 * math.log(3 * 0.5 - 1 * 1) - 2 * math.log(model.config.decoder_std) - math.log(2 * math.pi)
    assert weighted[1, 2].item() == pytest.approx(by_hand.item(), rel=1e-5)


LAW = {"root_height_weight": 10.0, "control_weight": 1.0}   # the settings a collection records (any)


def _law_data(path, steps: int, seed: int, law: dict | None = LAW, stopped_at: int = -1):
    """A data file of two snippets whose planner runs have ``steps`` and ``steps + 3`` commands (the rest as a
    collection writes it), labelled by ``law``."""
    rng = np.random.default_rng(seed)
    S, A, lengths = 3, 2, [7, 9]
    results = []
    for k, snippet in enumerate(SNIPPETS):
        bc = {"states": rng.standard_normal((sum(lengths) + len(lengths), S)).astype(np.float32),
              "task": np.zeros((sum(lengths) + len(lengths), 1), np.float32),
              "mean_actions": rng.standard_normal((sum(lengths), A)).astype(np.float32),
              "actions": np.zeros((sum(lengths), A), np.float32), "rewards": np.zeros(sum(lengths), np.float32),
              "lengths": np.asarray(lengths), "terminated": np.zeros(len(lengths), bool)}
        nominal = {key: v[:lengths[0] + 1] if key in ("states", "task") else v[:lengths[0]] for key, v in bc.items()
                   if key not in ("lengths", "terminated")}
        nominal.update(lengths=np.asarray(lengths[:1]), terminated=np.zeros(1, bool))
        results.append({"snippet": snippet, "attrs": {"trajectories": len(lengths)}, "deviation_sq_sum": np.zeros(S),
                        "bc": bc, "nominal": nominal,
                        "plan": {"commands": rng.uniform(-1, 1, (steps + 3 * k, A)),
                                 "stopped_at": np.int64(stopped_at)}})
    meta = {"experts": "mpc", **({"lqr": law} if law is not None else {})}
    return data.write_dataset(path, results, np.ones(S, np.float32), meta), results


SNIPPETS = ("07_01-0", "09_01-0")


def _window_starts(dataset, batch, length: int) -> list[tuple[int, int]]:
    """(snippet index, start step) of each window of ``batch``, found by its states."""
    trajectories = [(k, dataset.trajectory(s, "bc", i)["states"]) for k, s in enumerate(SNIPPETS) for i in range(2)]
    found = []
    for row in range(len(batch.states)):
        (start,) = [(k, t) for k, states in trajectories for t in range(len(states) - length)
                    if np.array_equal(batch.states[row, :length].numpy(), states[t:t + length])]
        found.append(start)
    return found


def test_windows_carry_their_law_s_weights_at_their_time_index_and_a_foreign_file_is_refused(tmp_path):
    steps = 5   # shorter than the episodes: past the run's end the last weights hold
    path, results = _law_data(tmp_path / "d.h5", steps, 0)
    runs = {r["snippet"]: r["plan"]["commands"] for r in results}
    weights = {s: np.stack([np.diag([t + 1.0 + 100 * k, 10.0 * (t + 1)]) for t in range(len(runs[s]))])
               for k, s in enumerate(SNIPPETS)}
    written = write_law_weights(tmp_path / "w.h5", path, [{"snippet": s, "weights": weights[s],
                                                          "digest": law_digest(runs[s], LAW)} for s in SNIPPETS])
    dataset = data.NPMPDataset(path, action_weights=read_law_weights(written, path, list(SNIPPETS)))
    batch = dataset.sample_bc(24, 4, torch.Generator().manual_seed(0))
    starts = _window_starts(dataset, batch, 4)
    assert {k for k, _ in starts} == {0, 1}   # both snippets drawn: their offsets in the table are tested
    for row, (k, start) in enumerate(starts):
        expected = [min(start + j, len(runs[SNIPPETS[k]]) - 1) + 1.0 for j in range(4)]
        assert batch.action_weights[row, :, 0, 0].tolist() == [x + 100 * k for x in expected]
        assert batch.action_weights[row, :, 1, 1].tolist() == [10 * x for x in expected]
    assert data.NPMPDataset(path).sample_bc(2, 3).action_weights is None
    other, _ = _law_data(tmp_path / "other.h5", steps, 1)   # another planner run of the same snippets
    with pytest.raises(ConfigError, match="another planner run or law"):
        read_law_weights(written, other, list(SNIPPETS))
    relawed, _ = _law_data(tmp_path / "relawed.h5", steps, 0, law={**LAW, "control_weight": 2.0})  # the same runs
    with pytest.raises(ConfigError, match="another planner run or law"):
        read_law_weights(written, relawed, list(SNIPPETS))
    with pytest.raises(ConfigError, match="not in"):
        read_law_weights(written, path, ["16_35-0"])
    with pytest.raises(ConfigError, match="not a probctl-npmp-law-weights"):
        read_law_weights(path, path, list(SNIPPETS))


def test_a_scaled_feedback_moves_each_label_away_from_its_law_s_command_at_the_step_s_time(tmp_path):
    steps = 5   # past the run's end the law keeps its last command
    path, results = _law_data(tmp_path / "d.h5", steps, 2)
    dataset = data.NPMPDataset(path)
    plain = dataset.sample_bc(24, 4, torch.Generator().manual_seed(0))
    scaled = dataset.sample_bc(24, 4, torch.Generator().manual_seed(0), feedback_scale=2.0)
    assert torch.equal(plain.states, scaled.states)
    starts = _window_starts(dataset, plain, 4)
    assert {k for k, _ in starts} == {0, 1}
    for row, (k, start) in enumerate(starts):
        commands = torch.as_tensor(results[k]["plan"]["commands"], dtype=torch.float32)
        nominal = commands[[min(start + j, len(commands) - 1) for j in range(4)]] * plain.mask[row, :, None]
        torch.testing.assert_close(scaled.actions[row], nominal + 2.0 * (plain.actions[row] - nominal))
    no_law, _ = _law_data(tmp_path / "bare.h5", steps, 2, law=None)   # the planner itself labelled
    with pytest.raises(ConfigError, match="no LQR law's planner run"):
        data.NPMPDataset(no_law).sample_bc(2, 3, feedback_scale=1.5)
    stopped, _ = _law_data(tmp_path / "stopped.h5", steps, 2, stopped_at=3)   # planned for a periodic law
    with pytest.raises(ConfigError, match="stops after 3 steps"):
        data.NPMPDataset(stopped).sample_bc(2, 3, feedback_scale=1.5)


def test_the_feedback_benchmark_measures_a_student_against_its_law_s_feedback(tmp_path, capsys):
    """benchmarks/npmp_feedback.py: its r2 and mse agree (r2 = 1 - mse / feedback_ms), a student that replays the
    law's commands has no feedback (slope 0), and data without a law is one error line."""
    import json

    from benchmarks.npmp_feedback import feedback_share, main
    from priors.npmp import save_primitives

    path, results = _law_data(tmp_path / "d.h5", 20, 3)
    torch.manual_seed(0)
    model = NPMP(NPMPConfig(state_dim=3, action_dim=2, latent_dim=2, encoder_hidden=(8,), decoder_hidden=(8,)))
    save_primitives(model, tmp_path / "p", {"proprio": 3}, clips=list(SNIPPETS))
    assert main(["--data", str(path), "--primitives", str(tmp_path / "p"), "--batches", "3", "--batch", "8",
                 "--length", "3", "--bin", "4", "--results", str(tmp_path / "r.json")]) == 0
    row = json.loads((tmp_path / "r.json").read_text())["primitives"][str(tmp_path / "p")]
    assert row["r2"] == pytest.approx(1 - row["mse"] / row["feedback_ms"], abs=2e-3)
    assert set(row["r2_by_frames"]) and set(row["r2_by_frames"]) <= {"0-4", "4-8", "8-12", "12-16", "16-20"}
    assert "r2_weighted" not in row

    class Replay(torch.nn.Module):   # the law's own command at each step: u*_t, read from the step's time index
        config = model.config

        def encode(self, states, sample, targets, context):
            return torch.zeros(*states.shape[:2], 1), None

        def decode(self, states, z):
            return self.command, None

    dataset = data.NPMPDataset(path)
    runs = {k: torch.as_tensor(r["plan"]["commands"], dtype=torch.float32) for k, r in enumerate(results)}
    batch = dataset.sample_bc(8, 3, torch.Generator().manual_seed(0), per_snippet=True)
    w = dataset.bc.windows(8, 3, torch.Generator().manual_seed(0), per_snippet=True)
    replay = Replay()
    snippet = dataset.bc.owner[w.which]
    assert len(set(snippet.tolist())) == 2   # both snippets' runs are read
    replay.command = torch.stack([runs[int(k)][torch.clamp(t, max=len(runs[int(k)]) - 1)]
                                  for k, t in zip(snippet, w.time[:, :3])]) * batch.mask[..., None]
    assert feedback_share(replay, dataset, 1, 8, 3, 0, 4)["slope"] == pytest.approx(0.0, abs=1e-6)
    no_law, _ = _law_data(tmp_path / "bare.h5", 20, 3, law=None)
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        main(["--data", str(no_law), "--primitives", str(tmp_path / "p")])
    assert stop.value.code == 2 and "no LQR law's planner run" in capsys.readouterr().err
