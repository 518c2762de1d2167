"""The NPMP model: encoder, AR(1) latent prior and decoder, trained by the beta-ELBO (seed 000 §8.1, §8.5.4).

Seed 000_02c29175254ceb0c.txt, Ch 8 (transcribed in ../shared/research/seed000.md §8):
- generative model (eq 8.1): p(a_{1:T}, z_{1:T} | s_{1:T}) = prod_t p_z(z_t | z_{t-1}) pi(a_t | z_t, s_t);
- AR(1) prior (eq 8.2): z_t = alpha z_{t-1} + sqrt(1 - alpha^2) eps, alpha = 0.95 (``priors.models.ar1_prior``,
  shared with the Ch 7 latent prior); the first step of a sequence has the chain's marginal N(0, I) as its prior and
  a zero z_{t-1} as the encoder's input (the thesis does not say how sequences start);
- encoder q(z_t | z_{t-1}, x_t), x_t = [s_t, ..., s_{t+K}], K = 5; it sees future *states only*, never actions, so a
  state trajectory alone can be encoded (one-shot imitation);
- departure (``lookahead_source="reference"``): x_t = [s_t, r_{t+1}, ..., r_{t+K}], the look-ahead read from the
  clip's reference states r (kinematic playback) instead of the trajectory's own future. The thesis's experts track
  their clips closely, so the two coincide there; the planners here trail the reference and sit low (docs/npmp.md),
  and primitives trained on what the expert reached are then asked, when shown a clip, for states they never saw
  (closed loop from the reference they fell where the feed-forward controller falls, and tracked 1.5-1.8 times
  longer when shown the expert's own states). With the reference as look-ahead, training and use read the same
  thing, and the current state s_t lets the encoder correct for where the body is;
- departure (``path_offsets``; docs/npmp.md, "A look-ahead that carries the path"): x_t also holds the reference's
  path p_t: for each offset j, the reference root's displacement and heading change from frame t to frame t + j, in
  the frame of the root's heading at t (``reference_path``). The look-ahead above is egocentric and 5 frames
  (0.15 s) long: a 15 deg/s arc shows in it only as a 0.4-sd shift of the gyro's yaw axis, and students trained
  with it did not act on which way an arc bends. Over 30 frames the heading change moves by 2.1-2.5 of its spread
  over the stride;
- departure (``far_offsets``; docs/npmp.md, "The tube a student leaves"): x_t also holds the reference's states at
  frames t + j for each far offset j (beyond K; the last frame repeated past the end). The planner that labels the
  data plans 1.8 s (60 frames) ahead, so two chains that share their first frames but part at a join 0.6 s later
  get different labels for the same first frames (0.5 of a state's spread apart at once); an encoder that sees
  0.15 s ahead cannot tell them apart and its student leaves both teachers' tubes within ten frames;
- decoder pi(a_t | s_t, z_t): Gaussian with a fixed std of 0.1 on actions normalised to [-1, 1] (no squashing: the
  experts' mean actions are the targets, and reuse clips the decoder's mean to the action bounds);
- beta-ELBO (eq 8.3): E_q[sum_t log pi(a_t | s_t, z_t) + beta (log p_z(z_t | z_{t-1}) - log q(z_t | z_{t-1}, x_t))],
  one reparameterised sample of z per step (Adam, lr 1e-4 in the thesis); ``elbo_terms`` returns the two per-step
  terms so the loss can be checked against hand-computed values.
- sizes (§8.5.4): encoder 2 x 1024, decoder 3 x 1024, latent 60, beta = 0.1 ("medium"; 0.001 is "very weakly
  regularised"). The activation is not stated; ReLU (as everywhere else in this repo).

LFPC (eq 8.9) trains the same objective on perturbed states with linear-feedback action targets: the caller passes
s + delta_s and a + J delta_s (pipelines/npmp/data.py builds them), so this module needs no special case.

"States" here are the walker's proprioceptive observations (the ``proprio`` group): the thesis's s_t is the body
state; the policies in this repo act on observations, and proprioception is what any later task also provides.
"""
from __future__ import annotations

import dataclasses
import math

import torch
from torch import nn

from inference.layers.mlp import mlp
from priors.models import ar1_prior, gaussian_head, gaussian_log_prob


LOOKAHEAD_SOURCES = ("trajectory", "reference")
PATH_FEATURES = 3   # per path offset: displacement along the root's heading, across it, and the heading change


def reference_path(root: torch.Tensor, offsets: tuple[int, ...]) -> torch.Tensor:
    """p_t [T+1, 3 len(offsets)] from the reference root's floor pose ``root [T+1, 3]`` (x, y, heading in radians):
    for each offset j, the displacement from frame t to frame min(t + j, T) rotated into the heading at t, and the
    heading change, wrapped to [-pi, pi). Past the clip's end the last frame repeats, as in the look-ahead."""
    last = root.shape[0] - 1
    t = torch.arange(last + 1, device=root.device)
    heading = root[:, 2]
    cos, sin = torch.cos(heading), torch.sin(heading)
    features = []
    for j in offsets:
        ahead = root[torch.clamp(t + j, max=last)]
        dx, dy = ahead[:, 0] - root[:, 0], ahead[:, 1] - root[:, 1]
        turn = torch.remainder(ahead[:, 2] - heading + torch.pi, 2 * torch.pi) - torch.pi
        features.append(torch.stack([cos * dx + sin * dy, -sin * dx + cos * dy, turn], dim=-1))
    return torch.cat(features, dim=-1) if features else root.new_zeros(last + 1, 0)


def reference_far(states: torch.Tensor, offsets: tuple[int, ...]) -> torch.Tensor:
    """[T+1, S len(offsets)]: for each frame t the reference states ``states [T+1, S]`` at t + j for each offset j,
    the last frame repeated past the clip's end (as in the look-ahead)."""
    last = states.shape[0] - 1
    t = torch.arange(last + 1, device=states.device)
    return torch.cat([states[torch.clamp(t + j, max=last)] for j in offsets], dim=-1) if offsets else \
        states.new_zeros(last + 1, 0)


def reference_context(config, states: torch.Tensor, root: torch.Tensor | None) -> torch.Tensor:
    """What the encoder reads of a reference per frame beyond its K-frame look-ahead, [T+1, ``context_dim``]: the
    far states (``far_offsets``), then the path (``path_offsets``; from the root's floor poses ``root [T+1, 3]``)."""
    if config.path_offsets and (root is None or len(root) != len(states)):
        raise ValueError(f"primitives with path_offsets {config.path_offsets} need the reference root's "
                         f"{len(states)} poses, got {None if root is None else len(root)}")
    path = reference_path(root.to(states), config.path_offsets) if config.path_offsets else \
        states.new_zeros(len(states), 0)
    return torch.cat([reference_far(states, config.far_offsets), path], dim=-1)


@dataclasses.dataclass(frozen=True)
class NPMPConfig:
    state_dim: int
    action_dim: int
    latent_dim: int = 60
    encoder_hidden: tuple[int, ...] = (1024, 1024)
    decoder_hidden: tuple[int, ...] = (1024, 1024, 1024)
    decoder_std: float = 0.1
    ar_coef: float = 0.95
    beta: float = 0.1
    lookahead: int = 5
    lookahead_source: str = "trajectory"   # or "reference" (the module docstring)
    path_offsets: tuple[int, ...] = ()     # frames ahead at which the encoder reads the reference's path
    far_offsets: tuple[int, ...] = ()      # frames beyond the look-ahead at which it also reads the reference's states

    @property
    def path_dim(self) -> int:
        return PATH_FEATURES * len(self.path_offsets)

    @property
    def read_offsets(self) -> tuple[int, ...]:
        """The frames ahead whose reference states the encoder reads: the look-ahead's 1..K, then the far ones."""
        return (*range(1, self.lookahead + 1), *self.far_offsets)

    @property
    def far_dim(self) -> int:
        return self.state_dim * len(self.far_offsets)

    @property
    def context_dim(self) -> int:
        """What x_t holds per step beyond the K + 1 states: the far states, then the path (``reference_context``)."""
        return self.far_dim + self.path_dim

    def validate(self) -> None:
        if min(self.state_dim, self.action_dim, self.latent_dim) < 1:
            raise ValueError("state_dim, action_dim and latent_dim must be positive")
        if not (self.encoder_hidden and self.decoder_hidden and min(self.encoder_hidden + self.decoder_hidden) >= 1):
            raise ValueError("encoder_hidden and decoder_hidden must list positive layer widths")
        if not 0.0 <= self.ar_coef < 1.0:
            raise ValueError(f"ar_coef must be in [0, 1), got {self.ar_coef}")
        if self.decoder_std <= 0 or self.beta < 0 or self.lookahead < 0:
            raise ValueError("decoder_std must be > 0, beta >= 0 and lookahead >= 0")
        if self.lookahead_source not in LOOKAHEAD_SOURCES:
            raise ValueError(f"lookahead_source must be one of {', '.join(LOOKAHEAD_SOURCES)}, got "
                             f"{self.lookahead_source!r}")
        if self.path_offsets and (self.lookahead_source != "reference" or min(self.path_offsets) < 1
                                  or list(self.path_offsets) != sorted(set(self.path_offsets))):
            raise ValueError("path_offsets need the reference look-ahead and must be increasing positive frame "
                             f"counts, got {self.path_offsets} with a {self.lookahead_source} look-ahead")
        if self.far_offsets and (self.lookahead_source != "reference" or min(self.far_offsets) <= self.lookahead
                                 or list(self.far_offsets) != sorted(set(self.far_offsets))):
            raise ValueError(f"far_offsets need the reference look-ahead and must be increasing frame counts beyond "
                             f"the look-ahead ({self.lookahead}), got {self.far_offsets} with a "
                             f"{self.lookahead_source} look-ahead")

    @classmethod
    def from_dict(cls, d: dict) -> "NPMPConfig":
        d = dict(d)
        for key in ("encoder_hidden", "decoder_hidden", "path_offsets", "far_offsets"):
            d[key] = tuple(d.get(key, ()))   # primitives saved before these offsets existed have none
        return cls(**d)


class NPMP(nn.Module):
    def __init__(self, config: NPMPConfig):
        super().__init__()
        config.validate()
        self.config = c = config
        self.encoder = mlp(c.latent_dim + (c.lookahead + 1) * c.state_dim + c.context_dim, c.encoder_hidden,
                           2 * c.latent_dim)
        self.decoder = mlp(c.state_dim + c.latent_dim, c.decoder_hidden, c.action_dim)
        # states enter both networks as (s - shift) / scale: proprioception mixes angles (~0.1) with velocities
        # (std up to ~10); ``set_normalisation`` fits them to the training data, identity until then (and
        # for primitives saved before they existed)
        self.register_buffer("state_shift", torch.zeros(c.state_dim))
        self.register_buffer("state_scale", torch.ones(c.state_dim))
        self.register_buffer("path_shift", torch.zeros(c.path_dim))   # the same for the reference path
        self.register_buffer("path_scale", torch.ones(c.path_dim))

    def set_normalisation(self, states: torch.Tensor | None, path: torch.Tensor | None = None,
                          min_scale: float = 1e-2) -> None:
        """Fit the input normalisation to ``states [N, S]`` and the reference path ``path [M, P]`` (primitives with
        ``path_offsets``), each where given: per-dimension mean and std, the std floored at ``min_scale`` so
        constant dimensions stay finite."""
        for name, x in (("state", states), ("path", path)):
            shift, scale = getattr(self, f"{name}_shift"), getattr(self, f"{name}_scale")
            if x is None:
                continue
            if x.dim() != 2 or x.shape[1] != shift.shape[0] or not shift.shape[0]:
                raise ValueError(f"the {name} normalisation needs [N, {shift.shape[0]}] values, got {tuple(x.shape)}")
            shift.copy_(x.mean(0))
            scale.copy_(x.std(0).clamp_min(min_scale))

    def with_path(self, offsets: tuple[int, ...], path: torch.Tensor) -> "NPMP":
        """These primitives, also reading the reference's path at ``offsets`` (a student that already walks, given
        the path): the encoder's new input weights start at zero, so they act exactly as before until trained; the
        path's normalisation is fitted to ``path [M, P]``. Primitives that read a path already: ValueError."""
        if self.config.path_offsets:
            raise ValueError(f"these primitives read the path at {self.config.path_offsets} already")
        model = self._widened(dataclasses.replace(self.config, path_offsets=tuple(offsets)))
        model.set_normalisation(None, path)
        return model

    def with_far(self, offsets: tuple[int, ...]) -> "NPMP":
        """These primitives, also reading the reference's states ``offsets`` frames ahead (normalised as states),
        acting exactly as before until trained (``with_path``). Primitives that read far states already:
        ValueError."""
        if self.config.far_offsets:
            raise ValueError(f"these primitives read the states {self.config.far_offsets} frames ahead already")
        return self._widened(dataclasses.replace(self.config, far_offsets=tuple(offsets)))

    def _widened(self, config: NPMPConfig) -> "NPMP":
        """These primitives under ``config``, whose encoder reads more far states or path features: the new input
        columns' weights start at zero, the rest (and the normalisation) are kept."""
        model = NPMP(config).to(self.state_shift.device)
        c, old = config, self.config
        weights = self.state_dict()
        for name in ("path_shift", "path_scale"):   # a path read already keeps its normalisation
            weights[name] = torch.cat([weights[name], getattr(model, name)[old.path_dim:]])
        # the encoder's input is [z_{t-1}, K + 1 states, far states, path]
        first = weights["encoder.0.weight"]
        head = first[:, :c.latent_dim + (c.lookahead + 1) * c.state_dim]
        far, path = first[:, head.shape[1]:head.shape[1] + old.far_dim], first[:, head.shape[1] + old.far_dim:]
        zeros = lambda n: first.new_zeros(first.shape[0], n)  # noqa: E731
        weights["encoder.0.weight"] = torch.cat([head, far, zeros(c.far_dim - old.far_dim), path,
                                                 zeros(c.path_dim - old.path_dim)], 1)
        model.load_state_dict(weights)
        return model

    def normalise(self, states: torch.Tensor) -> torch.Tensor:
        return (states - self.state_shift) / self.state_scale

    # -- the two networks ------------------------------------------------------------------------------------
    def decode(self, state: torch.Tensor, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """pi(a | s, z): mean and the fixed std (the low-level controller when the decoder is reused)."""
        mean = self.decoder(torch.cat([self.normalise(state), z], dim=-1))
        return mean, torch.full_like(mean, self.config.decoder_std)

    def encode_step(self, z_prev: torch.Tensor, window: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """q(z_t | z_{t-1}, x_t): mean and std, ``window`` = x_t flattened: K + 1 states, then the far states and
        the path p_t when the primitives read them (raw; normalised here)."""
        c = self.config
        split = window.shape[-1] - c.path_dim
        states = self.normalise(window[..., :split].unflatten(-1, (-1, c.state_dim))).flatten(-2)
        path = (window[..., split:] - self.path_shift) / self.path_scale
        return gaussian_head(self.encoder(torch.cat([z_prev, states, path], dim=-1)))

    def windows(self, states: torch.Tensor, targets: torch.Tensor | None = None,
                context: torch.Tensor | None = None) -> torch.Tensor:
        """x_t = [s_t, f_{t+1}, ..., f_{t+K}, c_t] for t < T - K, from ``states [B, T, S]``, the look-ahead
        ``targets`` f (``[B, T, S]`` aligned with the states; None: the states themselves) and, for primitives that
        read far states or a path, the reference's ``context [B, T, C]`` (``reference_context``):
        [B, T - K, (K + 1) S + C]."""
        K, T = self.config.lookahead, states.shape[1]
        if T <= K:
            raise ValueError(f"need more than lookahead = {K} states to form one window, got {T}")
        ahead = states if targets is None else targets
        if ahead.shape != states.shape:
            raise ValueError(f"look-ahead targets {tuple(ahead.shape)} do not match states {tuple(states.shape)}")
        parts = [states[:, :T - K]] + [ahead[:, j:T - K + j] for j in range(1, K + 1)]
        if self.config.context_dim:
            if context is None or context.shape != (*states.shape[:2], self.config.context_dim):
                raise ValueError(f"primitives with far_offsets {self.config.far_offsets} and path_offsets "
                                 f"{self.config.path_offsets} need the reference context "
                                 f"[{states.shape[0]}, {T}, {self.config.context_dim}], got "
                                 f"{None if context is None else tuple(context.shape)}")
            parts.append(context[:, :T - K])
        return torch.cat(parts, dim=-1)

    # -- inference ---------------------------------------------------------------------------------------------
    def encode(self, states: torch.Tensor, sample: bool = True, targets: torch.Tensor | None = None,
               context: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Latents z_{1:T-K} [B, T-K, L] for ``states [B, T, S]`` (look-ahead from ``targets``, see ``windows``)
        and the per-step KL term log q - log p_z [B, T-K] at those latents. ``sample=False`` takes q's mean at
        every step (one-shot imitation)."""
        x = self.windows(states, targets, context)
        z_prev = states.new_zeros(states.shape[0], self.config.latent_dim)
        latents, kl_terms = [], []
        for t in range(x.shape[1]):
            q_mean, q_std = self.encode_step(z_prev, x[:, t])
            z = q_mean + q_std * torch.randn_like(q_mean) if sample else q_mean
            p_mean, p_std = ar1_prior(z_prev, self.config.ar_coef, first=t == 0)
            kl_terms.append(gaussian_log_prob(z, q_mean, q_std) - gaussian_log_prob(z, p_mean, p_std))
            latents.append(z)
            z_prev = z
        return torch.stack(latents, dim=1), torch.stack(kl_terms, dim=1)

    def elbo_terms(self, states: torch.Tensor, actions: torch.Tensor, targets: torch.Tensor | None = None,
                   context: torch.Tensor | None = None, action_weights: torch.Tensor | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per-step log pi(a_t | s_t, z_t) and log q(z_t|.) - log p_z(z_t|z_{t-1}) [B, T-K], one sample of z, and
        the decoder's means [B, T-K, A].

        ``states [B, T, S]``, ``actions [B, T-K, A]``: the last K states only feed the encoder's look-ahead;
        ``targets``, ``context``: the look-ahead's source when it is not the states, and the reference's far
        states and path (``windows``); ``action_weights [B, T-K, A, A]``: the log-likelihood of N(mean, std^2 W^-1),
        its squared error e' W e in place of e' e (pipelines/npmp/weights.py; W = I is the plain Gaussian)."""
        z, kl_terms = self.encode(states, sample=True, targets=targets, context=context)
        T = z.shape[1]
        if actions.shape[1] != T:
            raise ValueError(f"{states.shape[1]} states give {T} steps with a full look-ahead; got "
                             f"{actions.shape[1]} actions")
        mean, std = self.decode(states[:, :T], z)
        if action_weights is None:
            return gaussian_log_prob(actions, mean, std), kl_terms, mean
        error = (actions - mean) / std
        squared = torch.einsum("bta,btac,btc->bt", error, action_weights, error)
        # the density of N(mean, std^2 W^-1): its normaliser keeps log_lik comparable with the plain loss's
        log_lik = (-0.5 * squared + 0.5 * torch.logdet(action_weights) - torch.log(std).sum(-1)
                   - 0.5 * mean.shape[-1] * math.log(2 * math.pi))
        return log_lik, kl_terms, mean

    def loss(self, states: torch.Tensor, actions: torch.Tensor, mask: torch.Tensor | None = None,
             targets: torch.Tensor | None = None, context: torch.Tensor | None = None,
             action_weights: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
        """The negative beta-ELBO (eq 8.3) per valid step (``mask [B, T-K]``: 1 where the step is real data;
        ``action_weights`` as in ``elbo_terms``)."""
        log_lik, kl_terms, mean = self.elbo_terms(states, actions, targets, context, action_weights)
        mask = torch.ones_like(log_lik) if mask is None else mask
        steps = mask.sum().clamp_min(1.0)
        log_lik_mean = (log_lik * mask).sum() / steps
        kl_mean = (kl_terms * mask).sum() / steps
        loss = -(log_lik_mean - self.config.beta * kl_mean)
        mse = (((mean.detach() - actions) ** 2).mean(-1) * mask).sum() / steps
        return loss, {"loss/npmp": loss.item(), "npmp/log_likelihood": log_lik_mean.item(),
                      "npmp/kl": kl_mean.item(), "npmp/action_mse": mse.item()}
