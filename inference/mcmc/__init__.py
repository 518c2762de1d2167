"""Batched MCMC kernels (BlackJAX style): ``init(position, ...) -> State``, ``step(state, generator, ...) -> (State, Info)``.

Every sampler also has ``build(logdensity, step_size, ...) -> Kernel(init, step)`` with its settings bound.
Modules: ``hmc`` (HMC, relativistic HMC, ``sample`` loop), ``nuts`` (multinomial NUTS, batched), ``kinetic`` (Gaussian / relativistic kinetic energies),
``adaptation`` (dual averaging, windowed diagonal mass), ``sgmcmc`` (SGLD, SGHMC, SGNHT, RSGHMC, RSGD, RSGNHT),
``tempering`` (parallel tempering).
"""
from . import adaptation, hmc, kinetic, nuts, sgmcmc, tempering
from .adaptation import dual_averaging_init, dual_averaging_update, window_adaptation
from .hmc import HMCInfo, HMCState, Kernel, leapfrog, rhmc_step, sample, value_and_grad
from .nuts import NUTSInfo
from .kinetic import GaussianKinetic, RelativisticKinetic, sample_relativistic_momentum

__all__ = [
    "adaptation", "hmc", "kinetic", "nuts", "sgmcmc", "tempering", "Kernel", "NUTSInfo", "dual_averaging_init", "dual_averaging_update",
    "window_adaptation", "HMCInfo", "HMCState", "leapfrog", "rhmc_step", "sample", "value_and_grad",
    "GaussianKinetic", "RelativisticKinetic", "sample_relativistic_momentum",
]
