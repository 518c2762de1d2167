"""Distilling tracking experts into NPMP primitives (seed 000 §8.2-8.3, §8.5.4).

Two training schemes on the data of ``pipelines/npmp/data.py``:
- ``bc``: behavioural cloning from noisy expert rollouts that logged the expert's *mean* action (eq 8.4, the
  DART-like scheme): the decoder's Gaussian log-likelihood in the beta-ELBO (eq 8.3) regresses those actions.
  The thesis's batches are 512 subsequences of length 30.
- ``lfpc``: linear-feedback policy cloning (eq 8.9): subsequences of each expert's nominal trajectory, each repeated
  with ``perturbations`` i.i.d. state perturbations delta_s ~ Delta, targets a* + J* delta_s; the thesis's batches
  are 32 subsequences x 5 perturbations of length 30.

Optimiser: Adam, lr 1e-4, reparameterised z (§8.5.4); ``lr_schedule="cosine"`` decays the rate to near 0 over the
run. Batch sizes default to the thesis's in ``--scale thesis``; the default ``DistillConfig`` batch is smaller (64
subsequences) because a 3 x 1024 decoder on 512 x 30 steps takes several seconds per update on one CPU core -- the
setting is recorded in the saved primitives.

Training writes TensorBoard scalars (``loss/npmp``, ``npmp/log_likelihood``, ``npmp/kl``, ``npmp/action_mse``) to
``logdir`` (default: ``<out>.tb`` beside the primitives directory), and the primitives directory is rewritten atomically every
``save_every`` steps and at the end, so an interrupted run leaves the last complete model.
"""
from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path

import torch

from priors.npmp import NPMP, NPMPConfig, save_primitives

SCHEMES = ("bc", "lfpc")
LR_SCHEDULES = ("constant", "cosine")
WINDOW_WEIGHTS = ("steps", "snippets")


@dataclasses.dataclass(frozen=True)
class DistillConfig:
    scheme: str = "bc"
    steps: int = 2000
    batch: int = 64  # BC subsequences per update (thesis: 512)
    length: int = 30  # subsequence length (thesis: 30)
    lfpc_batch: int = 32  # LFPC nominal subsequences per update (thesis: 32) ...
    perturbations: int = 5  # ... each with this many perturbed copies (thesis: 5)
    lr: float = 1e-4
    lr_schedule: str = "constant"  # cosine: from lr to near 0 at the last step (§8.5.4 gives no schedule)
    windows: str = "steps"  # BC windows drawn uniformly over all steps, or "snippets": each snippet equally often
    relabelled_weight: float = 1.0  # DAgger's relabelled episodes drawn this many times as often as the expert's
    # LQR-law data: targets u*_t + feedback_scale (label - u*_t), the law's feedback scaled (``NPMPDataset.sample_bc``)
    feedback_scale: float = 1.0
    seed: int = 0
    log_every: int = 50
    save_every: int = 500

    def validate(self) -> None:
        if self.scheme not in SCHEMES:
            raise ValueError(f"scheme must be one of {', '.join(SCHEMES)}, got {self.scheme!r}")
        for name in ("steps", "batch", "length", "lfpc_batch", "perturbations", "log_every", "save_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.lr <= 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        if self.lr_schedule not in LR_SCHEDULES:
            raise ValueError(f"lr_schedule must be one of {', '.join(LR_SCHEDULES)}, got {self.lr_schedule!r}")
        if self.windows not in WINDOW_WEIGHTS:
            raise ValueError(f"windows must be one of {', '.join(WINDOW_WEIGHTS)}, got {self.windows!r}")
        if not self.relabelled_weight > 0:
            raise ValueError(f"relabelled_weight must be > 0, got {self.relabelled_weight}")
        if not self.feedback_scale > 0:
            raise ValueError(f"feedback_scale must be > 0, got {self.feedback_scale}")
        if self.feedback_scale != 1.0 and self.scheme != "bc":
            raise ValueError("feedback_scale scales the LQR laws' labels of the BC rollouts (scheme bc)")
        if self.relabelled_weight != 1.0 and self.scheme != "bc":
            raise ValueError("relabelled_weight weighs the BC rollouts; lfpc draws from one nominal per snippet")
        if self.windows == "snippets" and self.scheme != "bc":
            raise ValueError("windows='snippets' weighs the BC rollouts; lfpc draws from one nominal per snippet")


def lr_factor(config: DistillConfig, step: int) -> float:
    """The learning rate of update ``step`` (1-based) as a fraction of ``config.lr``. The cosine schedule ends near 0,
    so the saved weights are not those of one noisy Adam step: students distilled at a constant rate from the same
    data walked very differently (docs/npmp.md, "A learning rate that decays")."""
    if config.lr_schedule == "constant":
        return 1.0
    return 0.5 * (1.0 + math.cos(math.pi * (step - 1) / config.steps))


def sample_batch(dataset, config: DistillConfig, generator: torch.Generator, device):
    """(states, target actions, mask) for one update of the chosen scheme."""
    if config.scheme == "bc":
        return dataset.sample_bc(config.batch, config.length, generator, device=device,
                                 per_snippet=config.windows == "snippets",
                                 relabelled_weight=config.relabelled_weight, feedback_scale=config.feedback_scale)
    return dataset.sample_lfpc(config.lfpc_batch, config.length, config.perturbations, generator, device=device)


def distill(dataset, out_dir: Path, model_config: NPMPConfig, config: DistillConfig, obs_groups: dict[str, int],
            device: torch.device | str = "cpu", meta: dict | None = None, progress: bool = True,
            logdir: Path | None = None, initial: NPMP | None = None) -> NPMP:
    """Train an NPMP on ``dataset`` (an ``NPMPDataset``) and save it to ``out_dir`` (see the module docstring).
    ``initial``: primitives to continue from (a DAgger round), input normalisation included; otherwise a fresh
    model whose normalisation is fitted to the dataset's states."""
    from torch.utils.tensorboard import SummaryWriter

    config.validate()
    if (model_config.lookahead_source == "reference") != (getattr(dataset, "reference", None) is not None):
        raise ValueError(f"the model's look-ahead reads the {model_config.lookahead_source}: load the dataset with "
                         f"lookahead_source={model_config.lookahead_source!r}")
    for name in ("path_offsets", "far_offsets"):
        if tuple(getattr(dataset, name, ())) != getattr(model_config, name):
            raise ValueError(f"the model reads the reference at {name} {getattr(model_config, name)}: load the "
                             f"dataset with {name}={getattr(model_config, name)}")
    device = torch.device(device)
    torch.manual_seed(config.seed)
    generator = torch.Generator().manual_seed(config.seed)
    model = NPMP(model_config).to(device)
    if initial is None:
        path = dataset.path_table   # far states are normalised as states
        model.set_normalisation(dataset.bc.data["states"].to(device), None if path is None else path.to(device))
    elif initial.config != model_config:
        raise ValueError(f"the initial primitives' config {initial.config} differs from {model_config}")
    else:
        model.load_state_dict(initial.state_dict())
    optimiser = torch.optim.Adam(model.parameters(), lr=config.lr)
    out_dir = Path(out_dir)
    writer = SummaryWriter(str(logdir or out_dir.with_name(out_dir.name + ".tb")))
    record = {**(meta or {}), "distill": dataclasses.asdict(config), "beta": model_config.beta,
              "clips": list(dataset.snippets)}
    start, last = time.monotonic(), {}
    try:
        for step in range(1, config.steps + 1):
            batch = sample_batch(dataset, config, generator, device)
            loss, scalars = model.loss(batch.states, batch.actions, batch.mask, batch.lookahead, batch.context,
                                        batch.action_weights)
            if not torch.isfinite(loss):
                raise FloatingPointError(f"NPMP loss is {loss.item()} at step {step}")
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            for group in optimiser.param_groups:
                group["lr"] = config.lr * lr_factor(config, step)
            optimiser.step()
            last = scalars
            if step % config.log_every == 0 or step == config.steps:
                for tag, value in scalars.items():
                    writer.add_scalar(tag, value, step)
                if progress:
                    rate = step / (time.monotonic() - start)
                    print(f"distill {config.scheme} step {step}/{config.steps} loss {scalars['loss/npmp']:.3f} "
                          f"mse {scalars['npmp/action_mse']:.4f} kl {scalars['npmp/kl']:.2f} ({rate:.2f} steps/s)",
                          flush=True)
            if step % config.save_every == 0 or step == config.steps:
                save_primitives(model, out_dir, obs_groups, **record, steps=step,
                                final_scalars={k: round(v, 6) for k, v in last.items()})
    finally:
        writer.close()
    return model
