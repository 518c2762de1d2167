"""Reuse of neural probabilistic motor primitives (seed 000 Ch 8, §8.4 "Reuse"; ../shared/research/seed000.md §8).

The frozen NPMP decoder pi(a_t | s_t, z_t) (priors/npmp) is the low-level controller; a new high-level policy
outputs z_t every step (every k-th with ``--action-repeat k``, below) and is trained by SVG(0) + Retrace
(agents/svg0.py, Alg 9) -- the thesis's setup, which gives no high-level architecture or hyperparameters, so svg0's
defaults apply. ``--agent npmp`` is svg0 acting through ``priors.reuse.LatentActionEnv``:
- z_t = ``latent_scale`` * (the policy's action in [-1, 1]); the AR(1) prior's marginal is N(0, I), so the default
  scale 3 (svg0's, shared with Ch 7's latent-space reuse) lets the policy reach +-3 standard deviations;
- the environment receives clip(decoder mean, -1, 1): the decoder was trained on actions in [-1, 1] without
  squashing (priors/npmp/model.py), so its mean is clipped, not tanh-squashed; the decoder's fixed-std noise is not
  added (the high-level policy explores);
- ``latent_mode=innovation``: the action is instead the AR(1) prior's innovation, z_t = alpha z_{t-1} +
  sqrt(1 - alpha^2) * latent_scale * action, and the policy observes z_{t-1} (a choice the thesis leaves open;
  docs/npmp.md measures both);
- ``--action-repeat k`` holds each high-level action for k control steps while the decoder acts on every one of them
  from the state it is in (the env's own repeat would hold the decoder's action open loop): the high-level policy
  decides every k-th step, z held (direct) or driven by the held innovation (innovation), the rewards summed;
- the decoder reads the observation groups it was trained on (the primitives' ``obs_groups``, the CMU humanoid's
  ``proprio``); the high-level policy sees every group of the environment (proprioception and the task);
- ``primitives`` (default: the primitives shipped in data/primitives/npmp) names the primitives directory; a
  relative path is taken from the current directory and stored resolved in the run's config.json. A missing,
  corrupt or foreign file, or primitives for another body, stop the run with one line (ConfigError).
Everything else (replay, Retrace, entropy regularisation, checkpoints) is svg0's; its ``--set`` keys apply.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from agents.config import ConfigError
from agents.svg0 import SVG0Agent, SVG0Config
from priors.npmp import DEFAULT_PRIMITIVES, ModuleFileError, load_primitives
from priors.reuse import LATENT_MODES, LatentActionEnv


@dataclasses.dataclass(frozen=True)
class NPMPAgentConfig(SVG0Config):
    primitives: str = str(DEFAULT_PRIMITIVES)  # a primitives directory (priors/npmp save_primitives)
    latent_mode: str = "direct"  # direct: z_t = latent_scale * action; innovation: the action is the AR(1) prior's
                                 # innovation and the policy observes z_{t-1} (priors/reuse.py)

    def __post_init__(self):
        if self.primitives:  # resolved once, so that --resume from another directory finds the same file
            object.__setattr__(self, "primitives", str(Path(self.primitives).expanduser().resolve()))

    def validate(self) -> None:
        super().validate()
        if self.latent_mode not in LATENT_MODES:
            raise ConfigError(f"latent_mode must be one of {', '.join(LATENT_MODES)}, got {self.latent_mode!r}")
        if not self.primitives:
            raise ConfigError("primitives must name an NPMP primitives directory")
        if self.latent_controller:
            raise ConfigError("npmp acts through its primitives; latent_controller (svg0's Ch 7 latent prior) "
                              "cannot be combined with it")


class NPMPAgent(SVG0Agent):
    Config = NPMPAgentConfig

    @staticmethod
    def acts_through_controller(config: NPMPAgentConfig) -> bool:
        return True

    @staticmethod
    def wrap_env(env, config: NPMPAgentConfig, device, action_repeat: int = 1):
        """The environment as the high-level policy sees it: actions are the frozen decoder's latents."""
        try:
            model, meta = load_primitives(config.primitives, device)
            return LatentActionEnv(env, model.decode, model.config.latent_dim, meta["obs_groups"],
                                   config.latent_scale, device, mean_to_action="clip",
                                   action_dim=model.config.action_dim, latent_mode=config.latent_mode,
                                   ar_coef=model.config.ar_coef, repeat=action_repeat)
        except ModuleFileError as e:
            raise ConfigError(f"primitives: {e}") from None
