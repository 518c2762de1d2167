"""Hamiltonian Monte Carlo and relativistic HMC as batched ``init`` / ``step`` kernels.

* HMC: seed 002_c38d9063238be78e.txt Algorithm 2.1 with leapfrog (2.2)-(2.4) and the Metropolis correction
  (2.5); seed 000_02c29175254ceb0c.txt Alg. 3 / (2.19) for a general (here diagonal) mass matrix.  The
  gradient at the current point is cached in the state, so one step costs ``num_steps`` gradient calls.
* Relativistic HMC: seed 000 Ch. 3, Sec. "Relativistic HMC": momentum drawn exactly from ∝ exp(-K(p)) with the
  independent-momenta kinetic energy (3.4), leapfrog with the position update x += eps M^{-1}(p) p (3.8), same
  Metropolis test.  It is HMC with ``RelativisticKinetic`` (``rhmc_step``).

State and info follow the BlackJAX shape: positions are ``[chains, d]``, the log density is a callable on
``[chains, d]`` returning ``[chains]`` (chains must not interact inside it), randomness comes from an explicit
``torch.Generator``.  A transition whose energy error exceeds ``divergence_threshold`` (or is not finite) is
flagged divergent and rejected.
"""
from __future__ import annotations

import os
import time
from typing import Callable, NamedTuple, Optional

import torch
from torch import Tensor
from torch.utils import _pytree as pytree

from .kinetic import GaussianKinetic, RelativisticKinetic

LogDensity = Callable[[Tensor], Tensor]
DIVERGENCE_THRESHOLD = 1000.0       # an energy error above this (or not finite) is a divergence


class HMCState(NamedTuple):
    position: Tensor        # [chains, d]
    log_density: Tensor     # [chains]
    grad: Tensor            # [chains, d], grad of log density


class HMCInfo(NamedTuple):
    acceptance_rate: Tensor  # [chains], min(1, exp(-dH))
    is_accepted: Tensor      # [chains] bool
    is_divergent: Tensor     # [chains] bool
    energy: Tensor           # [chains], Hamiltonian of the returned state
    num_grad_evals: int      # per chain


def value_and_grad(logdensity: LogDensity, position: Tensor) -> tuple[Tensor, Tensor]:
    """log p(x) and grad_x log p(x) for a batch of independent positions."""
    with torch.enable_grad():
        x = position.detach().requires_grad_(True)
        lp = logdensity(x)
        if lp.shape != x.shape[:-1]:
            raise ValueError(f"log density must map positions {tuple(x.shape)} to {tuple(x.shape[:-1])}, "
                             f"got {tuple(lp.shape)}")
        if not lp.requires_grad:                 # a density that does not depend on x (flat): zero gradient
            return lp.detach(), torch.zeros_like(x).detach()
        (g,) = torch.autograd.grad(lp.sum(), x, allow_unused=True)
    return lp.detach(), (torch.zeros_like(x) if g is None else g).detach()


def check_position(position: Tensor) -> None:
    if not isinstance(position, Tensor) or position.ndim != 2:
        shape = tuple(position.shape) if isinstance(position, Tensor) else type(position).__name__
        raise ValueError(f"position must be a [chains, d] tensor (use x[None] for one chain), got {shape}")
    if not bool(torch.isfinite(position).all()):
        raise ValueError("position contains NaN or inf; start the chains at finite points")


# a trajectory keeps about this many [chains, d] tensors alive (position, momentum, gradients, proposals, NUTS's
# tree ends and multinomial candidates); the log density's own intermediates come on top
_STATE_COPIES = 16


def check_fits(position: Tensor) -> None:
    """One clear error, before any draw, when the chains' own state cannot fit in the device's free memory."""
    need = _STATE_COPIES * position.numel() * position.element_size()
    if position.device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(position.device)
    else:
        try:
            free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):     # no sysconf (not POSIX): skip the check
            return
    if need > free:
        raise ValueError(f"{position.shape[0]} chains of dimension {position.shape[1]} need about "
                         f"{need / 2 ** 30:.1f} GiB for the sampler's state, more than the {free / 2 ** 30:.1f} GiB "
                         f"free on {position.device}; run fewer chains at once (e.g. in groups)")


def as_column(value, position: Tensor, name: str) -> Tensor:
    """A scalar or per-chain [chains] hyperparameter as a [chains, 1] (or scalar) tensor on the position's device."""
    t = torch.as_tensor(value, dtype=position.dtype, device=position.device)
    if not bool((t > 0).all()) or not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name} must be positive and finite, got {value}")
    if t.ndim == 0:
        return t
    if t.shape != position.shape[:1]:
        raise ValueError(f"{name} must be a scalar or have shape [chains]={tuple(position.shape[:1])}")
    return t.unsqueeze(-1)


def init(position: Tensor, logdensity: LogDensity) -> HMCState:
    check_position(position)
    check_fits(position)
    try:
        lp, g = value_and_grad(logdensity, position)
    except torch.OutOfMemoryError:
        raise ValueError(f"{position.shape[0]} chains do not fit in {position.device} memory when the log density "
                         "is evaluated; run fewer chains at once (e.g. in groups) or use a device with more "
                         "memory") from None
    if not bool(torch.isfinite(lp).all()):
        raise ValueError("log density is not finite at the initial position")
    return HMCState(position.detach(), lp, g)


def leapfrog(position: Tensor, momentum: Tensor, grad: Tensor, logdensity: LogDensity, step_size: Tensor,
             num_steps: int, velocity: Callable[[Tensor], Tensor]) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``num_steps`` leapfrog steps (2.2)-(2.4); consecutive half momentum steps are fused."""
    return _leapfrog(position, momentum, grad, lambda x: value_and_grad(logdensity, x), step_size, num_steps,
                     velocity)


def _leapfrog(position, momentum, grad, value_and_grad_fn, step_size, num_steps: int, velocity):
    half = 0.5 * step_size
    p = torch.addcmul(momentum, half, grad)                                 # (2.2); addcmul: one fused kernel
    x, lp, g = position, None, grad
    for t in range(num_steps):
        x = torch.addcmul(x, step_size, velocity(p))                        # (2.3) / x += eps M^{-1}(p) p
        lp, g = value_and_grad_fn(x)
        p = torch.addcmul(p, step_size if t < num_steps - 1 else half, g)   # (2.4) + next (2.2)
    return x, p, lp, g


def step(state: HMCState, generator: Optional[torch.Generator], logdensity: LogDensity, step_size,
         num_steps: int = 10, kinetic=None,
         divergence_threshold: float = DIVERGENCE_THRESHOLD) -> tuple[HMCState, HMCInfo]:
    """One HMC transition per chain (Algorithm 2.1). ``kinetic`` defaults to the identity-mass Gaussian."""
    if int(num_steps) != num_steps or num_steps < 1:
        raise ValueError(f"num_steps must be a positive integer, got {num_steps}")
    kinetic = GaussianKinetic() if kinetic is None else kinetic
    eps = as_column(step_size, state.position, "step_size")
    p0, u = _draws(state, generator, kinetic)
    return _transition(state, p0, u, eps, lambda x: value_and_grad(logdensity, x), int(num_steps), kinetic,
                       divergence_threshold)


def _draws(state: HMCState, generator, kinetic) -> tuple[Tensor, Tensor]:
    """The transition's randomness, drawn in a fixed order (momentum, then the Metropolis uniform), so the eager
    and the compiled transition consume the generator identically."""
    p0 = kinetic.sample(state.position, generator)
    u = torch.rand(state.position.shape[:1], generator=generator, dtype=state.position.dtype,
                   device=state.position.device)
    return p0, u


def _transition(state: HMCState, p0: Tensor, u: Tensor, eps: Tensor, value_and_grad_fn, num_steps: int, kinetic,
                divergence_threshold: float) -> tuple[HMCState, HMCInfo]:
    """The deterministic part of a transition: trajectory and Metropolis test (what ``build(compile=True)``
    compiles into one unit)."""
    h0 = -state.log_density + kinetic.energy(p0)
    x, p, lp, g = _leapfrog(state.position, p0, state.grad, value_and_grad_fn, eps, num_steps, kinetic.velocity)
    h1 = -lp + kinetic.energy(p)
    d_energy = h1 - h0
    divergent = ~(d_energy < divergence_threshold)                         # also catches NaN
    accept_prob = torch.where(divergent, torch.zeros_like(h0), torch.exp(torch.clamp(-d_energy, max=0.0)))
    accept = u < accept_prob                                               # (2.5)
    col = accept.unsqueeze(-1)
    new = HMCState(torch.where(col, x, state.position), torch.where(accept, lp, state.log_density),
                   torch.where(col, g, state.grad))
    return new, HMCInfo(accept_prob, accept, divergent, torch.where(accept, h1, h0), num_steps)


def functional_value_and_grad(logdensity: Callable[..., Tensor]) -> Callable[..., tuple[Tensor, Tensor]]:
    """(log p, grad log p) through ``torch.func`` (what a compiled trajectory needs: no autograd tape); the
    log density must be a pure function of its arguments (no in-place updates of them, no ``.item()``). Arguments
    after the position (e.g. a tempering's inverse temperatures) are passed through, not differentiated."""
    def summed(x, *args):
        lp = logdensity(x, *args)
        return lp.sum(), lp

    grad_and_value = torch.func.grad_and_value(summed, has_aux=True)

    def value_and_grad_fn(x, *args):
        g, (_, lp) = grad_and_value(x, *args)
        return lp, g
    return value_and_grad_fn


def compiled_transition(logdensity: Callable[..., Tensor], num_steps: int, kinetic,
                        divergence_threshold: float) -> Callable:
    """An HMC transition whose deterministic part is one compiled graph (``fastest_compiled``):
    ``(state, generator, eps, *density_args) -> (state, info)`` for ``logdensity(x, *density_args)``; the draws
    are made before it as ``step`` makes them, so both give the same draws for the same generator."""
    value_and_grad_fn = functional_value_and_grad(logdensity)

    def transition(position, log_density, grad, p0, u, eps, *density_args):
        new, info = _transition(HMCState(position, log_density, grad), p0, u, eps,
                                lambda x: value_and_grad_fn(x, *density_args), num_steps, kinetic,
                                divergence_threshold)
        return (*new, info.acceptance_rate, info.is_accepted, info.is_divergent, info.energy)
    compiled = fastest_compiled(transition)

    def call(state: HMCState, generator: Optional[torch.Generator], eps: Tensor,
             *density_args) -> tuple[HMCState, HMCInfo]:
        p0, u = _draws(state, generator, kinetic)
        x, lp, g, rate, accepted, divergent, energy = compiled(*state, p0, u, eps, *density_args)
        return HMCState(x, lp, g), HMCInfo(rate, accepted, divergent, energy, num_steps)
    return call


def rhmc_step(state: HMCState, generator: Optional[torch.Generator], logdensity: LogDensity, step_size,
              num_steps: int = 10, mass=1.0, c=1.0,
              divergence_threshold: float = DIVERGENCE_THRESHOLD) -> tuple[HMCState, HMCInfo]:
    """Relativistic HMC (seed 000 Ch. 3): HMC with the kinetic energy (3.4); eps * c bounds each move."""
    return step(state, generator, logdensity, step_size, num_steps, RelativisticKinetic(mass, c),
                divergence_threshold)


class Kernel(NamedTuple):
    """A sampler with its settings bound (BlackJAX / posteriors style): ``state = kernel.init(position)``, then
    ``state, info = kernel.step(state, generator)``."""
    init: Callable[[Tensor], HMCState]
    step: Callable[..., tuple[HMCState, NamedTuple]]


def build(logdensity: LogDensity, step_size, num_steps: int = 10, kinetic=None,
          divergence_threshold: float = DIVERGENCE_THRESHOLD, compile: bool = False) -> Kernel:
    """HMC with its settings bound; bad settings fail here, before any draw.

    ``compile=True``: the whole transition (the L-step trajectory, gradients by ``torch.func``, and the Metropolis
    test) is one ``torch.compile``d graph with no host synchronisation inside; the random draws stay outside it, in
    the eager order, so compiled and eager kernels give the same draws for the same generator (to floating-point
    tolerance). The first step compiles (tens of seconds; on CPU two code variants, each timed on that step's
    inputs, the faster kept); later steps with the same shapes reuse it."""
    if int(num_steps) != num_steps or num_steps < 1:
        raise ValueError(f"num_steps must be a positive integer, got {num_steps}")
    check_step_size(step_size)
    kinetic = GaussianKinetic() if kinetic is None else kinetic
    num_steps = int(num_steps)
    if compile:
        transition = compiled_transition(logdensity, num_steps, kinetic, divergence_threshold)

        def kernel_step(state: HMCState, generator: Optional[torch.Generator] = None):
            eps = as_column(step_size, state.position, "step_size")
            return transition(state, generator, eps)
    else:
        def kernel_step(state: HMCState, generator: Optional[torch.Generator] = None):
            return step(state, generator, logdensity, step_size, num_steps, kinetic, divergence_threshold)
    return Kernel(lambda position: init(position, logdensity), kernel_step)


# C++ code generation choices tried on CPU: inductor's default SIMD width, and scalar loops. Narrow chains
# (d ~ 10) run 1.5-2x faster as scalar loops (the default 16-lane double vectors are mostly masked tails there);
# wide ones (d ~ 100) run ~3x faster vectorised. Which wins depends on the density, so it is measured.
_CPU_VARIANTS = ({}, {"cpp.simdlen": 0})


def fastest_compiled(transition: Callable, trials: int = 3, dynamic: bool = False) -> Callable:
    """``torch.compile(transition)`` (full graph; static shapes unless ``dynamic``), autotuned: for each new input
    layout the first call compiles every code variant for its device, times ``trials`` calls of each on that call's
    inputs (the transition is a pure function) and keeps the fastest. CPU: the variants of ``_CPU_VARIANTS``. CUDA
    with static shapes: inductor's kernels launched one by one, and the same kernels captured as a CUDA graph
    (``mode="reduce-overhead"``: one replay per call, no per-kernel launch cost; its outputs are copied out of the
    graph's memory, which the next replay overwrites). CUDA with ``dynamic``: the first only (a graph per batch
    size would be recorded again for every size)."""
    # every build shares the code of its ``transition``, and each new density, kinetic, chain count or code
    # variant adds a compiled version of it; past torch's default limit of 8 it would fail (fullgraph)
    config = torch._dynamo.config
    for name, least in (("recompile_limit", 256), ("accumulated_recompile_limit", 1024)):
        if hasattr(config, name):
            setattr(config, name, max(getattr(config, name), least))
    cpu_variants = [torch.compile(transition, fullgraph=True, dynamic=dynamic, options=dict(o))
                    for o in _CPU_VARIANTS]
    cuda_variants = [cpu_variants[0]]
    if not dynamic:
        graphed = torch.compile(transition, fullgraph=True, mode="reduce-overhead")

        def replayed(*args):
            return pytree.tree_map(
                lambda t: t.clone() if isinstance(t, Tensor) else t, graphed(*args))
        cuda_variants.append(replayed)
    chosen: dict = {}

    def call(*args):
        # one choice per input layout; with ``dynamic`` any batch size shares it (timing each size would cost more)
        key = tuple(((a.ndim if dynamic else a.shape), a.dtype, a.device) for a in args)
        if key in chosen:
            return chosen[key](*args)
        device = args[0].device
        candidates = cpu_variants if device.type == "cpu" else cuda_variants
        result, best = None, None
        for variant in candidates:
            try:
                out = variant(*args)                                # compiles
                if device.type != "cpu":
                    variant(*args)                                  # a CUDA graph is recorded on a later call
            except (torch._dynamo.exc.Unsupported, torch._dynamo.exc.UserError) as e:   # the density's code
                # (a compiler failure, e.g. a dead compile worker, is not the density's fault and goes up as it is)
                first_line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                raise ValueError(f"the log density cannot be compiled into one graph ({first_line}); build with "
                                 "compile=False, or write it with torch operations only (no NumPy, no Python "
                                 "branches on tensor values)") from None
            result = out if result is None else result
            _synchronize(device)
            start = time.perf_counter()
            for _ in range(trials):
                variant(*args)
            _synchronize(device)
            seconds = time.perf_counter() - start
            if best is None or seconds < best[0]:
                best = (seconds, variant)
        chosen[key] = best[1]
        return result
    return call


def _synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (timing asynchronous CUDA calls needs it)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def check_step_size(step_size) -> None:
    t = torch.as_tensor(step_size, dtype=torch.float64)
    if not bool((t > 0).all()) or not bool(torch.isfinite(t).all()):
        raise ValueError(f"step_size must be positive and finite, got {step_size}")


def sample(kernel: Callable[[object, Optional[torch.Generator]], tuple[object, NamedTuple]], state,
           num_samples: int, generator: Optional[torch.Generator] = None, thin: int = 1,
           burn_in: int = 0, position_of: Callable[[object], Tensor] = lambda s: s.position):
    """Run ``kernel(state, generator) -> (state, info)`` and collect a trace.

    Returns ``(state, positions [chains, num_samples, d], infos)`` where ``infos`` stacks each info field
    over the kept draws (ints are summed into totals over all steps).  Draws follow ArviZ's (chain, draw) order.
    """
    if num_samples < 1 or thin < 1 or burn_in < 0:
        raise ValueError("need num_samples >= 1, thin >= 1, burn_in >= 0")
    kept, infos, totals = [], [], {}
    for t in range(burn_in + num_samples * thin):
        state, info = kernel(state, generator)
        for k, v in info._asdict().items():
            if isinstance(v, int):
                totals[k] = totals.get(k, 0) + v
        if t >= burn_in and (t - burn_in) % thin == thin - 1:
            kept.append(position_of(state))
            infos.append(info)
    stacked = {}
    for k in infos[0]._fields:
        v0 = getattr(infos[0], k)
        stacked[k] = totals[k] if isinstance(v0, int) else torch.stack([getattr(i, k) for i in infos], 1)
    return state, torch.stack(kept, 1), stacked
