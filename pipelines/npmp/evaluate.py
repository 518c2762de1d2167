"""Evaluating NPMP primitives: one-shot imitation and the latent-optimisation diagnostic (seed 000 §8.4, eq 8.10).

One-shot imitation (§8.4): run the expert (its mean action, no noise) from the snippet's first frame and record its
proprioceptive states s_0..s_T; encode them with q's means into z_{0..T-K} (the encoder sees states only); run the
decoder from the same first frame, **open-loop in z and closed-loop in state** (a_t = clip(mu(s_t, z_t)), s_t the
simulated state). Score: the tracking reward (CoMic, the expert's own reward) summed over the decoder's episode,
**relative to the expert's return over the same steps** (the decoder has K fewer latents than the expert has steps,
so the expert's last K rewards are not counted). An episode ends early if the tracking error terminates it.

Latent optimisation (eq 8.10): min_{z_{0..T-K}} sum_t ||mu(s_t, z_t) - a*_t||^2 on the expert's states and mean
actions, by Adam from the encoder's means (step size and iterations are not given; 300 steps at lr 0.05 here), then
the same closed-loop run with the optimised latents. The thesis reports it on clips under 50 % relative one-shot
performance: if it helps there, the encoder (not the decoder) limited the imitation.
"""
from __future__ import annotations

import statistics

import numpy as np
import torch

from envs.mocap import tracking
from envs.mocap.tracking import Reference, reference_playback  # noqa: F401 (used here and by the pipeline's callers)
from priors.npmp.model import reference_context
from priors.npmp.reference import closed_loop_latent, reference_input


@torch.no_grad()
def run_latents(model, snippet: str, latents, seed: int = 0, ref_path=None, observe=None,
                env_options: dict | None = None) -> tuple[float, int]:
    """(return, steps) of the decoder from the snippet's first frame, driven by ``latents``: a tensor [T, L]
    (open loop), or a function ``(t, state [S]) -> z [L]`` (closed loop; the episode runs to its end).
    ``observe(env, steps)``, if given, is called at the start and after every step (e.g. to render frames);
    ``env_options``: more options of the tracking env (e.g. ``termination_threshold``)."""
    kwargs = {**({"ref_path": ref_path} if ref_path is not None else {}), **(env_options or {})}
    env = tracking.make(f"{tracking.TIMED_FAMILY}:{snippet}", seed=seed, clip_start=True, **kwargs)
    device = next(model.parameters()).device
    try:
        obs, _ = env.reset(seed=seed)
        total, steps = 0.0, 0
        limit = len(latents) if isinstance(latents, torch.Tensor) else None
        if observe is not None:
            observe(env, steps)
        while limit is None or steps < limit:
            state = torch.as_tensor(np.asarray(obs["proprio"], np.float32), device=device)
            z = latents[steps] if limit is not None else latents(steps, state)
            mean, _ = model.decode(state, z)
            obs, reward, terminated, truncated, _ = env.step(mean.clamp(-1.0, 1.0).cpu().numpy())
            total, steps = total + float(reward), steps + 1
            if observe is not None:
                observe(env, steps)
            if terminated or truncated:
                break
        return total, steps
    finally:
        env.close()


def reference_encoder(model, reference: torch.Tensor, root: torch.Tensor | None = None):
    """The closed-loop latent of primitives whose look-ahead reads the reference (``lookahead_source``
    "reference"): z_t = q's mean given z_{t-1}, the current state s_t and the reference's part of the encoder's input
    at t (``reference_input``). A function ``(t, state) -> z`` for ``run_latents``."""
    return closed_loop_latent(model, reference_input(model, reference, root))


def primitives_actor(model, snippet: str, seed: int = 0, ref_path=None, reference: Reference | None = None):
    """The primitives as a tracking policy of ``snippet``: ``(t, proprio state [S]) -> command [A]``, the decoder's
    clipped mean with the latent from the encoder, closed loop on the clip's reference (``reference_encoder``;
    primitives with the look-ahead of the seed have no closed-loop encoder: ValueError). One actor per episode (the
    encoder carries its last latent); ``reference``: the snippet's ``reference_playback``, if already computed."""
    if model.config.lookahead_source != "reference":
        raise ValueError("only primitives whose look-ahead reads the reference (distill --lookahead reference) "
                         "can track a clip closed loop")
    device = next(model.parameters()).device
    if reference is None:
        reference = reference_playback(snippet, seed, ref_path)
    return decoder_actor(model, reference_encoder(model, torch.as_tensor(reference.states, device=device),
                                                 torch.as_tensor(reference.root, device=device)))


def decoder_actor(model, latent):
    """``(t, proprio state [S]) -> command [A]``: the decoder's clipped mean with the latent ``latent(t, state)``."""
    device = next(model.parameters()).device

    @torch.no_grad()
    def act(t: int, state: np.ndarray) -> np.ndarray:
        state = torch.as_tensor(np.asarray(state, np.float32), device=device)
        mean, _ = model.decode(state, latent(t, state))
        return mean.clamp(-1.0, 1.0).cpu().numpy()

    return act


def optimise_latents(model, states: torch.Tensor, actions: torch.Tensor, init: torch.Tensor, iterations: int = 300,
                     lr: float = 0.05) -> tuple[torch.Tensor, float, float]:
    """Eq 8.10 on one trajectory: (z [T, L], action MSE before, after). ``states [T, S]``, ``actions [T, A]``."""
    z = init.detach().clone().requires_grad_(True)
    optimiser = torch.optim.Adam([z], lr=lr)

    def mse() -> torch.Tensor:
        return ((model.decode(states, z)[0] - actions) ** 2).sum(-1).mean()

    with torch.no_grad():
        before = mse().item()
    for _ in range(iterations):
        loss = mse()
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
    with torch.no_grad():
        after = mse().item()
    return z.detach(), before, after


def evaluate_clip(model, expert_trajectory: dict, snippet: str, latent_iterations: int = 300, seed: int = 0,
                  ref_path=None) -> dict:
    """One-shot imitation and latent optimisation on one snippet, given the expert's noise-free rollout
    (``states [T+1, S]`` proprio, ``mean_actions [T, A]``, ``rewards [T]``)."""
    device = next(model.parameters()).device
    states = torch.as_tensor(np.asarray(expert_trajectory["states"], np.float32), device=device)
    actions = torch.as_tensor(np.asarray(expert_trajectory["mean_actions"], np.float32), device=device)
    rewards = np.asarray(expert_trajectory["rewards"], np.float64)
    K = model.config.lookahead
    if states.shape[0] <= K:
        return {"snippet": snippet, "expert_steps": int(len(rewards)), "skipped": f"expert episode shorter than K={K}"}
    root = None   # the clip is played back only for primitives that read its path
    if model.config.path_offsets:   # the demonstration's steps (an expert that fell has fewer than the clip)
        root = torch.as_tensor(reference_playback(snippet, seed, ref_path).root[:len(states)], device=device)
    # the latents the optimisation starts from: what the encoder reads along the demonstration, its far states and
    # path included when the primitives read them
    context = reference_context(model.config, states, root)[None] if model.config.context_dim else None
    with torch.no_grad():
        latents, _ = model.encode(states[None], sample=False, context=context)
    latents = latents[0]
    horizon = latents.shape[0]
    if model.config.lookahead_source == "reference":   # closed loop towards the demonstration's states
        one_shot_return, one_shot_steps = run_latents(model, snippet, reference_encoder(model, states, root), seed,
                                                      ref_path)
        expert_return = float(rewards.sum())
    else:                                              # the thesis: latents encoded once, played open loop
        one_shot_return, one_shot_steps = run_latents(model, snippet, latents, seed, ref_path)
        expert_return = float(rewards[:horizon].sum())
    optimised, mse_before, mse_after = optimise_latents(model, states[:horizon], actions[:horizon], latents,
                                                        latent_iterations)
    optimised_return, optimised_steps = run_latents(model, snippet, optimised, seed, ref_path)

    def relative(x: float) -> float:
        return x / expert_return if expert_return > 0 else None

    return {"snippet": snippet, "horizon": horizon, "expert_return": expert_return,
            "one_shot_return": one_shot_return, "one_shot_steps": one_shot_steps,
            "one_shot_relative": relative(one_shot_return),
            "latent_opt_return": optimised_return, "latent_opt_steps": optimised_steps,
            "latent_opt_relative": relative(optimised_return),
            "latent_opt_action_mse": [mse_before / actions.shape[1], mse_after / actions.shape[1]]}


def reference_states(snippet: str, seed: int = 0, ref_path=None) -> np.ndarray:
    """The proprioceptive states [T+1, S] of ``reference_playback``."""
    return reference_playback(snippet, seed, ref_path).states


def run_episode(env, act, seed: int = 0) -> tuple[float, int, bool]:
    """(return, steps, terminated) of one episode of ``env`` with ``act() -> command`` at every step."""
    env.reset(seed=seed)
    total, steps = 0.0, 0
    while True:
        _, reward, terminated, truncated, _ = env.step(act())
        total, steps = total + float(reward), steps + 1
        if terminated or truncated:
            return total, steps, bool(terminated)


def feed_forward_run(snippet: str, seed: int = 0, ref_path=None) -> tuple[float, int]:
    """(return, steps) of the feed-forward controller (servos commanded to the reference) from the first frame."""
    kwargs = {"ref_path": ref_path} if ref_path is not None else {}
    env = tracking.make(f"{tracking.TIMED_FAMILY}:{snippet}", seed=seed, clip_start=True, **kwargs)
    try:
        return run_episode(env, env.reference_action, seed)[:2]
    finally:
        env.close()


@torch.no_grad()
def imitate_reference(model, snippet: str, seed: int = 0, ref_path=None, observe=None,
                      env_options: dict | None = None) -> dict:
    """Closed-loop imitation of a clip in absolute terms: the encoder reads the clip's own states (its means;
    with a reference look-ahead, the current state and the next K reference states at every step), the decoder
    acts from the clip's first frame. ``steps`` before the episode ended (a fall or drift past the
    tracking threshold), ``full_steps`` of a never-terminated episode, ``reward_per_step`` (a perfect tracker earns
    ``MAX_COMIC_REWARD`` = 1.45), and the same for the feed-forward controller the experts start from.
    ``env_options``: options of the primitives' tracking env (``run_latents``; the feed-forward run keeps the
    defaults)."""
    states, root = reference_playback(snippet, seed, ref_path)
    device = next(model.parameters()).device
    reference = torch.as_tensor(states, device=device)
    if model.config.lookahead_source == "reference":
        latents = reference_encoder(model, reference, torch.as_tensor(root, device=device))
    else:   # the thesis's one-shot imitation: latents encoded from the clip's states alone, then played open loop
        latents = model.encode(reference[None], sample=False)[0][0]
    total, steps = run_latents(model, snippet, latents, seed, ref_path, observe, env_options)   # the primitives' run
    ff_total, ff_steps = feed_forward_run(snippet, seed, ref_path)
    full = len(states) - 1
    return {"snippet": snippet, "full_steps": full, "steps": steps, "tracked_fraction": steps / full,
            "reward_per_step": total / max(steps, 1), "return": total,
            "feed_forward_steps": ff_steps, "feed_forward_reward_per_step": ff_total / ff_steps,
            "feed_forward_return": ff_total}


def summarise_absolute(results: list[dict]) -> dict:
    if not results:
        return {}
    return {"clips": len(results),
            "median_tracked_fraction": float(statistics.median(r["tracked_fraction"] for r in results)),
            "tracked_to_end": sum(r["steps"] >= r["full_steps"] for r in results) / len(results),
            "median_reward_per_step": float(statistics.median(r["reward_per_step"] for r in results)),
            "median_feed_forward_tracked_fraction": float(statistics.median(
                r["feed_forward_steps"] / r["full_steps"] for r in results)),
            "median_feed_forward_reward_per_step": float(statistics.median(
                r["feed_forward_reward_per_step"] for r in results)),
            "above_feed_forward": sum(r["return"] > r["feed_forward_return"] for r in results)}


def summarise(results: list[dict], threshold: float = 0.5) -> dict:
    """Medians of relative one-shot performance, and of the latent-optimisation diagnostic on the clips below
    ``threshold`` (the thesis's 43 % -> 78 % statistic)."""
    scored = [r for r in results if r.get("one_shot_relative") is not None]

    def median(values):   # None where there is nothing to take the median of (JSON has no NaN)
        return float(statistics.median(values)) if values else None

    failed = [r for r in scored if r["one_shot_relative"] < threshold]
    return {"clips": len(results), "scored": len(scored),
            "median_one_shot_relative": median([r["one_shot_relative"] for r in scored]),
            "mean_one_shot_relative": float(np.mean([r["one_shot_relative"] for r in scored])) if scored else None,
            "below_threshold": len(failed), "threshold": threshold,
            "median_below_threshold_before": median([r["one_shot_relative"] for r in failed]),
            "median_below_threshold_after_latent_opt": median([r["latent_opt_relative"] for r in failed])}
