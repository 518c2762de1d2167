"""Stochastic-gradient MCMC kernels, Newtonian and relativistic, from seed 000_02c29175254ceb0c.txt.

``grad_fn(position, generator)`` returns an unbiased minibatch estimate g of grad log p (= -grad U~) for
``[chains, d]`` positions.  With ``h`` the step size, ``D`` the friction/diffusion and ``xi`` ~ N(0, I):

* SGLD (2.23):            x' = x + h g + sqrt(2 h T) xi
* SGHMC (2.25):           p' = p + h g - h D v(p) + sqrt(2 h D T) xi,   x' = x + h v(p'),   v(p) = p
* RSGHMC (3.7):           the same with the relativistic velocity v(p) = M^{-1}(p) p of (3.4)/(3.8); the
                          noise-covariance correction B^ of (3.7) is taken as 0 (the thesis gives no estimator).
* RSGD (Sec. 3.x, zero-temperature limit): the thesis gives only the ODE dx = v(p) dt, dp = (-grad U - D v(p)) dt
  and says "discretising the above gives RSGD".  We use the Euler step consistent with (3.7): RSGHMC with
  T = 0 (no noise), so x moves by at most h c_j per coordinate per step.
* SGNHT (2.26) and RSGNHT: a scalar thermostat z per chain replaces the friction,
      p' = p + h g - h z v(p) + sqrt(2 h D T) xi,   x' = x + h v(p'),
      z' = z + h (||v(p')||^2 - T lap K(p')) / d.
  For the Gaussian kinetic this is Ding et al.'s z += h (p^T p / d - 1): (2.26) as printed lacks the factor h
  (a typo).  For the relativistic kinetic the thesis derives the continuous thermostat
  dz = (1/d)(||grad K||^2 - lap K) dt (Sec. "SG Nosé-Hoover thermostat", eq 3.9 generalised) but no
  discretisation; we use the same Euler-Maruyama order as (3.7): momentum, then position with the new
  momentum, then the thermostat with the new momentum.  Per coordinate (independent momenta)
  ||grad K||^2 - lap K = sum_j [p_j^2 / M_j^2 + p_j^2 / (c_j^2 M_j^3) - 1/M_j]; z starts at D.

All kernels share one update (``sghmc_step``) parameterised by the kinetic energy and whether a thermostat is
used.  T is the temperature (1 for sampling; RSGD is T = 0).
"""
from __future__ import annotations

from typing import Callable, NamedTuple, Optional

import torch
from torch import Tensor

from .hmc import Kernel, check_fits, check_position, fastest_compiled
from .kinetic import GaussianKinetic, RelativisticKinetic

GradFn = Callable[[Tensor, Optional[torch.Generator]], Tensor]


class SGState(NamedTuple):
    position: Tensor      # [chains, d]
    momentum: Tensor      # [chains, d] (zeros for SGLD)
    thermostat: Tensor    # [chains] (unused by SGLD / SGHMC)


class SGInfo(NamedTuple):
    kinetic_energy: Tensor   # [chains]
    thermostat: Tensor       # [chains]
    is_divergent: Tensor     # [chains] bool: position or momentum not finite
    num_grad_evals: int


def _check_hparams(step_size: float, friction: float, temperature: float) -> None:
    if not step_size > 0:
        raise ValueError(f"step_size must be positive, got {step_size}")
    if friction < 0 or temperature < 0:
        raise ValueError(f"friction and temperature must be >= 0, got {friction}, {temperature}")


def init(position: Tensor, generator: Optional[torch.Generator] = None, kinetic=None,
         friction: float = 1.0) -> SGState:
    """Momentum drawn from the kinetic energy's Gibbs distribution; thermostat at the friction value D."""
    check_position(position)
    check_fits(position)
    kinetic = GaussianKinetic() if kinetic is None else kinetic
    p = kinetic.sample(position, generator)
    return SGState(position.detach(), p, torch.full(position.shape[:1], float(friction), dtype=position.dtype,
                                                   device=position.device))


def sgld_step(state: SGState, generator: Optional[torch.Generator], grad_fn: GradFn, step_size: float,
              temperature: float = 1.0) -> tuple[SGState, SGInfo]:
    """SGLD (seed 000 eq 2.23)."""
    _check_hparams(step_size, 0.0, temperature)
    return _sgld(state, generator, grad_fn, lambda *a: _sgld_update(*a, step_size, temperature))


def _sgld(state: SGState, generator, grad_fn: GradFn, update) -> tuple[SGState, SGInfo]:
    """The draws (the noise, then the user's minibatch gradient) around ``update``, eager or compiled."""
    x = state.position
    noise = torch.randn(x.shape, generator=generator, dtype=x.dtype, device=x.device)
    x, bad = update(x, grad_fn(x, generator), noise)
    zero = torch.zeros(x.shape[:1], dtype=x.dtype, device=x.device)
    return SGState(x, state.momentum, state.thermostat), SGInfo(zero, state.thermostat, bad, 1)


def _sgld_update(x: Tensor, grad: Tensor, noise: Tensor, h: float, temperature: float) -> tuple[Tensor, Tensor]:
    x = x + h * grad + (2 * h * temperature) ** 0.5 * noise                     # (2.23)
    return x, ~torch.isfinite(x).all(-1)


def sghmc_step(state: SGState, generator: Optional[torch.Generator], grad_fn: GradFn, step_size: float,
               friction: float = 1.0, kinetic=None, thermostat: bool = False,
               temperature: float = 1.0) -> tuple[SGState, SGInfo]:
    """The shared (R)SGHMC / (R)SGNHT / RSGD update (see module docstring)."""
    _check_hparams(step_size, friction, temperature)
    kinetic = GaussianKinetic() if kinetic is None else kinetic
    return _sghmc(state, generator, grad_fn,
                  lambda *a: _sghmc_update(*a, step_size, friction, kinetic, thermostat, temperature))


def _sghmc(state: SGState, generator, grad_fn: GradFn, update) -> tuple[SGState, SGInfo]:
    """The draws (the noise, then the user's minibatch gradient) around ``update``, eager or compiled."""
    x = state.position
    noise = torch.randn(x.shape, generator=generator, dtype=x.dtype, device=x.device)
    x, p, z, energy, bad = update(x, state.momentum, state.thermostat, grad_fn(x, generator), noise)
    return SGState(x, p, z), SGInfo(energy, z, bad, 1)


def _sghmc_update(x: Tensor, p: Tensor, z: Tensor, grad: Tensor, noise: Tensor, h: float, friction: float,
                  kinetic, thermostat: bool, temperature: float) -> tuple[Tensor, ...]:
    drag = z.unsqueeze(-1) if thermostat else friction
    p = p + h * grad - h * drag * kinetic.velocity(p) + (2 * h * friction * temperature) ** 0.5 * noise
    v = kinetic.velocity(p)
    x = x + h * v
    if thermostat:
        z = z + h * ((v * v).sum(-1) - temperature * kinetic.laplacian(p)) / x.shape[-1]
    bad = ~(torch.isfinite(x).all(-1) & torch.isfinite(p).all(-1))
    return x, p, z, kinetic.energy(p), bad


def sgnht_step(state, generator, grad_fn, step_size, friction: float = 1.0, temperature: float = 1.0):
    """SGNHT (seed 000 eq 2.26, with the step-size factor restored in the thermostat)."""
    return sghmc_step(state, generator, grad_fn, step_size, friction, GaussianKinetic(), True, temperature)


def rsghmc_step(state, generator, grad_fn, step_size, friction: float = 1.0, mass=1.0, c=1.0,
                temperature: float = 1.0):
    """Relativistic SGHMC (seed 000 eq 3.7, B^ = 0)."""
    return sghmc_step(state, generator, grad_fn, step_size, friction, RelativisticKinetic(mass, c), False,
                      temperature)


def rsgd_step(state, generator, grad_fn, step_size, friction: float = 1.0, mass=1.0, c=1.0):
    """Relativistic SGD: RSGHMC at zero temperature (an optimiser; each |dx_j| <= step_size * c_j)."""
    return sghmc_step(state, generator, grad_fn, step_size, friction, RelativisticKinetic(mass, c), False, 0.0)


def rsgnht_step(state, generator, grad_fn, step_size, friction: float = 1.0, mass=1.0, c=1.0,
                temperature: float = 1.0):
    """Relativistic SG Nosé-Hoover thermostat (seed 000 Ch. 3; discretisation derived in the module docstring)."""
    return sghmc_step(state, generator, grad_fn, step_size, friction, RelativisticKinetic(mass, c), True,
                      temperature)


METHODS = ("sgld", "sghmc", "sgnht", "rsghmc", "rsgd", "rsgnht")


def build(grad_fn: GradFn, step_size: float, method: str = "sghmc", friction: float = 1.0, temperature: float = 1.0,
          mass=1.0, c=1.0, compile: bool = False) -> Kernel:
    """An SG-MCMC kernel with its settings bound: ``state = kernel.init(position, generator)``, then
    ``state, info = kernel.step(state, generator)``. ``mass`` and ``c`` are the relativistic kinetic energy's (the
    r* methods); bad settings fail here, before any draw.

    ``compile=True``: the update (momentum, position, thermostat, energy and the divergence check) is one compiled
    graph (``hmc.fastest_compiled``); the noise and ``grad_fn`` run before it, as in the eager kernel, so the draws
    are the same. ``grad_fn`` draws its minibatch from the generator and stays the caller's: wrap its pure part in
    ``torch.compile`` to fuse it too."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    _check_hparams(step_size, friction, temperature)
    relativistic = method.startswith("r")
    kinetic = RelativisticKinetic(mass, c) if relativistic else GaussianKinetic()
    if method == "sgld":
        def update(x, grad, noise):
            return _sgld_update(x, grad, noise, step_size, temperature)
        run = _sgld
    else:
        thermostat = method.endswith("nht")
        temp = 0.0 if method == "rsgd" else temperature

        def update(x, p, z, grad, noise):
            return _sghmc_update(x, p, z, grad, noise, step_size, friction, kinetic, thermostat, temp)
        run = _sghmc
    if compile:
        update = fastest_compiled(update)

    def kernel_step(state, generator=None):
        return run(state, generator, grad_fn, update)
    return Kernel(lambda position, generator=None: init(position, generator, kinetic, friction), kernel_step)
