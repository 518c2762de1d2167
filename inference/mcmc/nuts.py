"""The No-U-Turn Sampler (multinomial, as in Stan / NumPyro / BlackJAX), batched over chains.

Not in the seeds (issue 15 asks for it because it is what users of those libraries run by default). Sources:
Hoffman & Gelman (2014), Algorithm 3 (trajectory doubling in a random direction until a U-turn); Betancourt (2017,
"A conceptual introduction to Hamiltonian Monte Carlo", App. A) for the multinomial form used by Stan since 2.1x:

- every point z of the trajectory has weight w(z) = exp(-(H(z) - H_0));
- inside a subtree the proposal is drawn multinomially (the second half's proposal replaces the first's with
  probability w_2 / (w_1 + w_2));
- at the top level a new subtree's proposal replaces the current one with probability min(1, w_new / w_old)
  (biased progressive sampling, which favours later points);
- the generalized no-U-turn criterion with rho = the sum of the momenta of a (sub)tree and the velocities
  v = dK/dp at its two ends: the tree turns when v_minus . rho <= 0 or v_plus . rho <= 0. It is checked for every
  subtree, and, as in Stan >= 2.21, also across each merge (the left tree plus the right tree's first point, and the
  left tree's last point plus the right tree);
- a point whose energy error exceeds ``divergence_threshold`` (or is not finite) is divergent and ends the
  trajectory without extending it.

Batched tree building: at each depth every chain still building its trajectory builds a subtree of that depth at
the same time, so one leapfrog step evaluates the log density of all of them at once. Chains whose trajectory has
stopped are left out of the batch (``_active_rows``): a draw costs the sum over depths of 2^depth x the chains still
going, not 2^depth x all chains (on the funnel of benchmarks/mcmc_speed.py, 144 gradient evaluations per chain
instead of the 1 023 of the deepest chain). Inside a subtree the chains stay in lock step: one whose first half
turned keeps being stepped, its points masked out, as the batch needs. The kinetic energy is any of
``inference.mcmc.kinetic`` (Gaussian with a diagonal mass, or relativistic: the velocity in the U-turn criterion is
then dK/dp, which is what the generalized criterion asks for).
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import torch
from torch import Tensor

# NUTS shares HMC's state (position, log density, its gradient), so ``init`` is HMC's
from .hmc import (DIVERGENCE_THRESHOLD, HMCState, Kernel, LogDensity, as_column, check_step_size,
                  fastest_compiled, functional_value_and_grad, init, value_and_grad)
from .kinetic import GaussianKinetic


class NUTSInfo(NamedTuple):
    acceptance_rate: Tensor   # [chains] mean of min(1, exp(-dH)) over the trajectory's points (for step-size adaptation)
    is_accepted: Tensor       # [chains] bool: the draw moved
    is_divergent: Tensor      # [chains] bool
    energy: Tensor            # [chains] Hamiltonian of the returned point
    tree_depth: Tensor        # [chains]
    num_steps: Tensor         # [chains] leapfrog points the chain's trajectory built (as Stan counts them)
    num_grad_evals: int       # per chain on average: the chains still going at each depth, in lock step within it


class _Tree(NamedTuple):
    x_minus: Tensor
    p_minus: Tensor
    g_minus: Tensor
    x_plus: Tensor
    p_plus: Tensor
    g_plus: Tensor
    x: Tensor          # the proposal
    p: Tensor
    g: Tensor
    lp: Tensor
    log_weight: Tensor
    p_sum: Tensor
    turning: Tensor
    diverging: Tensor
    accept_sum: Tensor
    leaves: Tensor


def _where(mask: Tensor, a: Tensor, b: Tensor) -> Tensor:
    return torch.where(mask.unsqueeze(-1) if a.ndim > mask.ndim else mask, a, b)


def _turning(velocity, p_minus: Tensor, p_plus: Tensor, p_sum: Tensor) -> Tensor:
    return ((velocity(p_minus) * p_sum).sum(-1) <= 0) | ((velocity(p_plus) * p_sum).sum(-1) <= 0)


# Subtrees up to this depth are built by one function each (2^depth leapfrog steps and their merges, one compiled
# graph with ``compile=True``); deeper ones are merged from them here, in Python.
BLOCK_DEPTH = 2


class _Builder:
    """Building one subtree of a transition: the start energy, step and kinetic energy shared by every leaf.
    ``blocks[d]`` builds a whole subtree of depth d <= BLOCK_DEPTH and ``combine_fn`` merges two halves (``_subtree``
    and ``_combine`` with the density and kinetic bound, eager or compiled). The random draws stay here, outside
    them, in the order of the plain recursion, so both paths consume the generator identically."""

    def __init__(self, blocks, combine_fn, eps: Tensor, h0: Tensor, generator):
        self.blocks, self.combine_fn, self.eps, self.h0 = blocks, combine_fn, eps, h0
        self.generator = generator
        self.grad_evals = 0

    def uniforms(self, count: int, chains: int) -> Tensor:
        return torch.rand((count, chains), generator=self.generator, dtype=self.h0.dtype, device=self.h0.device)

    def build(self, x: Tensor, p: Tensor, g: Tensor, direction: Tensor, depth: int, alive: Tensor) -> _Tree:
        """A subtree of 2^depth leapfrog steps from (x, p, g) in ``direction`` (per chain +1 / -1). A chain whose
        first half turned or diverged stops counting points (Stan stops building there)."""
        if depth <= BLOCK_DEPTH:
            self.grad_evals += 2 ** depth * alive.shape[0]             # chain-evaluations, padding included
            # one draw per merge, in the order the recursion makes them (on CPU one call of k x chains uniforms
            # gives the same numbers as k calls of chains)
            u = self.uniforms(2 ** depth - 1, alive.shape[0])
            return _Tree(*self.blocks[depth](x, p, g, direction, alive, self.eps, self.h0, u))
        return _doubled(lambda x, p, g, direction, alive: self.build(x, p, g, direction, depth - 1, alive),
                        x, p, g, direction, alive,
                        lambda forward, first, second: _Tree(*self.combine_fn(
                            forward, self.uniforms(1, alive.shape[0])[0], *first, *second)))


def _doubled(half, x: Tensor, p: Tensor, g: Tensor, direction: Tensor, alive: Tensor, combine) -> _Tree:
    """A subtree from two halves: ``half(x, p, g, direction, alive)`` builds one, the second continuing from the
    first's far end (a chain whose first half turned or diverged stops counting points, as Stan stops there);
    ``combine(forward, first, second)`` merges them."""
    first = half(x, p, g, direction, alive)
    forward = direction > 0
    ends = [_where(forward, getattr(first, f"{v}_plus"), getattr(first, f"{v}_minus")) for v in "xpg"]
    second = half(*ends, direction, alive & ~first.turning & ~first.diverging)
    return combine(forward, first, second)


def _subtree(leaf, velocity, depth: int, x: Tensor, p: Tensor, g: Tensor, direction: Tensor, alive: Tensor,
             u: Tensor) -> _Tree:
    """``_Builder.build`` as one pure function: a subtree of 2^depth steps, ``u`` [2^depth - 1, chains] the
    uniforms of its merges in the recursion's order (the first half's, the second half's, then its own)."""
    if depth == 0:
        return leaf(x, p, g, direction, alive)
    half = 2 ** (depth - 1) - 1
    parts = iter((u[:half], u[half:2 * half]))
    return _doubled(lambda *a: _subtree(leaf, velocity, depth - 1, *a, next(parts)), x, p, g, direction, alive,
                    lambda forward, first, second: _combine(velocity, forward, u[2 * half], first, second))


def _leaf(value_and_grad_fn, kinetic, threshold: float, x: Tensor, p: Tensor, g: Tensor, direction: Tensor,
          alive: Tensor, eps: Tensor, h0: Tensor) -> _Tree:
    """One leapfrog step of size eps * direction from (x, p, g) as a one-point tree; ``alive``: the chains whose
    trajectory has not stopped (the others are stepped in lock step but their point is not counted)."""
    eps = eps * direction.unsqueeze(-1)
    p_half = p + 0.5 * eps * g
    x_new = x + eps * kinetic.velocity(p_half)
    lp, g_new = value_and_grad_fn(x_new)
    p_new = p_half + 0.5 * eps * g_new
    delta = -lp + kinetic.energy(p_new) - h0
    diverging = ~(delta < threshold)                                   # also NaN / inf
    # a diverged chain keeps stepping from its last finite point (lock-step), never from NaN
    x_new, p_new, g_new = _where(diverging, x, x_new), _where(diverging, p, p_new), _where(diverging, g, g_new)
    lp = torch.where(diverging, torch.full_like(lp, -torch.inf), lp)
    log_weight = torch.where(diverging, torch.full_like(delta, -torch.inf), -delta)
    accept = torch.where(diverging | ~alive, torch.zeros_like(delta), torch.exp(torch.clamp(-delta, max=0.0)))
    no = torch.zeros_like(diverging)
    return _Tree(x_new, p_new, g_new, x_new, p_new, g_new, x_new, p_new, g_new, lp, log_weight, p_new, no,
                 diverging, accept, alive.to(delta.dtype))


def _combine(velocity, forward: Tensor, u: Tensor, first: _Tree, second: _Tree) -> _Tree:
    """The subtree made of its two halves, the proposal drawn multinomially: the second half's replaces the
    first's with probability w_2 / (w_1 + w_2) (uniform ``u``)."""
    left, right = _order(forward, first, second)
    log_weight = torch.logaddexp(first.log_weight, second.log_weight)
    take = torch.log(u) < second.log_weight - log_weight
    return _merge(left, right, first, second, take, log_weight, velocity)


def _order(forward: Tensor, first: _Tree, second: _Tree) -> tuple[_Tree, _Tree]:
    """The two halves in time order (left = earlier)."""
    left = _Tree(*(_where(forward, a, b) for a, b in zip(first, second)))
    right = _Tree(*(_where(forward, b, a) for a, b in zip(first, second)))
    return left, right


def _merge(left: _Tree, right: _Tree, old: _Tree, new: _Tree, take: Tensor, log_weight: Tensor, velocity) -> _Tree:
    p_sum = left.p_sum + right.p_sum
    turning = (left.turning | right.turning | _turning(velocity, left.p_minus, right.p_plus, p_sum)
               | _turning(velocity, left.p_minus, right.p_minus, left.p_sum + right.p_minus)   # Stan >= 2.21
               | _turning(velocity, left.p_plus, right.p_plus, left.p_plus + right.p_sum))
    return _Tree(left.x_minus, left.p_minus, left.g_minus, right.x_plus, right.p_plus, right.g_plus,
                 _where(take, new.x, old.x), _where(take, new.p, old.p), _where(take, new.g, old.g),
                 torch.where(take, new.lp, old.lp), log_weight, p_sum, turning, left.diverging | right.diverging,
                 left.accept_sum + right.accept_sum, left.leaves + right.leaves)


def build(logdensity: LogDensity, step_size, kinetic=None, max_depth: int = 10,
          divergence_threshold: float = DIVERGENCE_THRESHOLD, compile: bool = False) -> Kernel:
    """NUTS with its settings bound (``Kernel(init, step)``); bad settings fail here, before any draw.

    ``compile=True``: every subtree of up to 2^BLOCK_DEPTH leapfrog steps with its merges (gradients by
    ``torch.func``), and the merge of two halves (multinomial proposal, generalized U-turn checks), are each one
    ``torch.compile``d graph, autotuned as in ``hmc.build``; the doubling above them and the random draws stay
    eager, so the compiled kernel gives the eager draws for the same generator (to floating-point tolerance). The
    first draws compile (tens of seconds)."""
    _check_depth(max_depth)
    check_step_size(step_size)
    kinetic = GaussianKinetic() if kinetic is None else kinetic
    functions = None
    if compile:
        blocks, combine = _functions(functional_value_and_grad(logdensity), kinetic, divergence_threshold)
        # two sets: static shapes for all the chains (the faster code), and one graph for any number of chains
        # for the ones still going (``_active_rows``: a different number at every depth)
        functions = {part: (tuple(fastest_compiled(b, dynamic=part) for b in blocks),
                            fastest_compiled(combine, dynamic=part)) for part in (False, True)}

    def kernel_step(state: HMCState, generator: Optional[torch.Generator] = None):
        return step(state, generator, logdensity, step_size, kinetic, max_depth, divergence_threshold, functions)
    return Kernel(lambda position: init(position, logdensity), kernel_step)


def _functions(value_and_grad_fn, kinetic, threshold: float) -> tuple:
    """The subtree blocks (``_subtree`` of depth 0..BLOCK_DEPTH) and ``_combine``, with the density, kinetic
    energy and divergence threshold bound, on flat tensors (what a compiled graph takes and returns)."""
    fields = len(_Tree._fields)

    def block(depth):
        def subtree(x, p, g, direction, alive, eps, h0, u):
            def leaf(x, p, g, direction, alive):
                return _leaf(value_and_grad_fn, kinetic, threshold, x, p, g, direction, alive, eps, h0)
            return tuple(_subtree(leaf, kinetic.velocity, depth, x, p, g, direction, alive, u))
        return subtree

    def combine(forward, u, *halves):
        return tuple(_combine(kinetic.velocity, forward, u, _Tree(*halves[:fields]), _Tree(*halves[fields:])))
    return tuple(block(d) for d in range(BLOCK_DEPTH + 1)), combine


def _check_depth(max_depth) -> None:
    if int(max_depth) != max_depth or not 1 <= max_depth <= 20:
        raise ValueError(f"max_depth must be an integer in [1, 20], got {max_depth}")


def step(state: HMCState, generator: Optional[torch.Generator], logdensity: LogDensity, step_size,
         kinetic=None, max_depth: int = 10, divergence_threshold: float = DIVERGENCE_THRESHOLD,
         functions: Optional[tuple] = None) -> tuple[HMCState, NUTSInfo]:
    """One multinomial-NUTS transition per chain (module docstring). ``functions``: the compiled subtree blocks and
    merge that ``build(compile=True)`` passes, for all the chains (key False) and for a part of them (True); eager
    ones by default."""
    _check_depth(max_depth)
    kinetic = GaussianKinetic() if kinetic is None else kinetic
    if functions is None:
        eager = _functions(lambda x: value_and_grad(logdensity, x), kinetic, divergence_threshold)
        functions = {False: eager, True: eager}
    x0, lp0, g0 = state
    eps = as_column(step_size, x0, "step_size")
    p0 = kinetic.sample(x0, generator)
    h0 = -lp0 + kinetic.energy(p0)
    grad_evals = 0
    zero = torch.zeros_like(lp0)
    no = torch.zeros_like(lp0, dtype=torch.bool)
    traj = _Tree(x0, p0, g0, x0, p0, g0, x0, p0, g0, lp0, zero, p0, no, no, zero, zero)
    done, depth = no.clone(), torch.zeros_like(lp0, dtype=torch.long)
    diverged = no.clone()
    for j in range(int(max_depth)):
        if bool(done.all()):
            break
        direction = torch.where(torch.rand(lp0.shape, generator=generator, dtype=lp0.dtype, device=lp0.device)
                                < 0.5, -torch.ones_like(lp0), torch.ones_like(lp0))
        forward = direction > 0
        start = (_where(forward, traj.x_plus, traj.x_minus), _where(forward, traj.p_plus, traj.p_minus),
                 _where(forward, traj.g_plus, traj.g_minus))
        active = ~done
        rows, count = _active_rows(active)
        if rows is None:
            builder = _Builder(*functions[False], eps, h0, generator)
            sub = builder.build(*start, direction, j, active)
        else:                     # only the chains still building a trajectory, padded to a power of two
            builder = _Builder(*functions[True], eps[rows] if eps.ndim else eps, h0[rows], generator)
            part = builder.build(*(t[rows] for t in start), direction[rows], j, active[rows])
            sub = _Tree(*(full.index_put((rows[:count],), value[:count]) for full, value in zip(traj, part)))
        grad_evals += builder.grad_evals
        extend = active & ~sub.turning & ~sub.diverging
        u = torch.rand(lp0.shape, generator=generator, dtype=lp0.dtype, device=lp0.device)
        take = extend & (torch.log(u) < sub.log_weight - traj.log_weight)   # biased progressive sampling
        left, right = _order(forward, traj, sub)
        merged = _merge(left, right, traj, sub, take, torch.logaddexp(traj.log_weight, sub.log_weight),
                        kinetic.velocity)
        # chains that stop here keep their trajectory (a turning or divergent subtree is not added) ...
        traj = _Tree(*(_where(extend, m, t) for m, t in zip(merged, traj)))
        # ... but, as Stan, count the acceptance statistics of the points built before the subtree stopped
        traj = traj._replace(accept_sum=traj.accept_sum + torch.where(active & ~extend, sub.accept_sum, zero),
                             leaves=traj.leaves + torch.where(active & ~extend, sub.leaves, zero))
        diverged = diverged | (active & sub.diverging)
        depth = torch.where(active, torch.full_like(depth, j + 1), depth)
        done = done | (active & (sub.turning | sub.diverging | merged.turning))
    moved = (traj.x != x0).any(-1)
    energy = -traj.lp + kinetic.energy(traj.p)
    new = HMCState(traj.x, traj.lp, traj.g)
    return new, NUTSInfo(traj.accept_sum / traj.leaves.clamp_min(1), moved, diverged, energy, depth, traj.leaves,
                         round(grad_evals / x0.shape[0]))


def _active_rows(active: Tensor) -> tuple[Optional[Tensor], int]:
    """(rows, count): the rows of the ``count`` chains still building their trajectory, padded (repeating the
    first) to the next power of two; rows None when that would be all the chains. Chains that stopped cost nothing
    then: a draw costs the sum over depths of 2^depth x the chains still going, not 2^depth x all chains."""
    chains = active.shape[0]
    count = int(active.sum())
    size = max(2, 1 << max(count - 1, 0).bit_length())   # >= 2: a compiled graph for any size specialises 0 and 1
    if size >= chains:
        return None, count
    rows = active.nonzero().squeeze(-1)
    return torch.cat([rows, rows[:1].expand(size - count)]), count
