"""Batched MCMC kernels (BlackJAX style): ``init(position, ...) -> State``, ``step(state, generator, ...) -> (State, Info)``.

Modules: ``hmc`` (HMC, relativistic HMC, ``sample`` loop), ``kinetic`` (Gaussian / relativistic kinetic energies),
``adaptation`` (dual averaging, windowed diagonal mass), ``sgmcmc`` (SGLD, SGHMC, SGNHT, RSGHMC, RSGD, RSGNHT),
``tempering`` (parallel tempering).
"""
from . import adaptation, hmc, kinetic, sgmcmc, tempering
from .adaptation import dual_averaging_init, dual_averaging_update, window_adaptation
from .hmc import HMCInfo, HMCState, leapfrog, rhmc_step, sample, value_and_grad
from .kinetic import GaussianKinetic, RelativisticKinetic, sample_relativistic_momentum

__all__ = [
    "adaptation", "hmc", "kinetic", "sgmcmc", "tempering", "dual_averaging_init", "dual_averaging_update",
    "window_adaptation", "HMCInfo", "HMCState", "leapfrog", "rhmc_step", "sample", "value_and_grad",
    "GaussianKinetic", "RelativisticKinetic", "sample_relativistic_momentum",
]
