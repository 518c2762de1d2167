"""Bayesian and noisy layers, ensembles and the UCB action rule."""
from inference.layers.bayes import (BayesLinear, GaussianPrior, ScaleMixturePrior, WeightSample, bayesian_modules,
                                    kl_loss)
from inference.layers.ensemble import (Ensemble, bootstrap_mask, fixed_bootstrap_mask, masked_ensemble_loss,
                                       ucb_action)
from inference.layers.hypernet import BayesianHypernetMLP
from inference.layers.mnf import MNFLinear
from inference.layers.noisy import NoisyLinear, reset_noise
from inference.vi.objectives import minibatch_kl_weights

__all__ = ["BayesLinear", "GaussianPrior", "ScaleMixturePrior", "WeightSample", "bayesian_modules", "kl_loss",
           "Ensemble", "bootstrap_mask", "fixed_bootstrap_mask", "masked_ensemble_loss", "ucb_action", "BayesianHypernetMLP",
           "MNFLinear", "NoisyLinear", "reset_noise", "minibatch_kl_weights"]
