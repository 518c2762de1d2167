"""Variational objectives (ELBO, IWAE, VR-alpha, VR-max) and gradient estimators."""
from inference.vi.estimators import (RunningBaseline, reparam_surrogate, score_function_surrogate,
                                     vr_score_function_surrogate)
from inference.vi.objectives import (elbo, iwae_bound, kl_term, minibatch_kl_weights, vr_bound,
                                     vr_surrogate, vr_weights)

__all__ = ["elbo", "kl_term", "iwae_bound", "vr_bound", "vr_weights", "vr_surrogate",
           "minibatch_kl_weights", "reparam_surrogate", "score_function_surrogate", "vr_score_function_surrogate",
           "RunningBaseline"]
