"""Expectation propagation and its relatives (issue 16, in progress).

``expfam``: Gaussian exponential families in natural and mean parameters (seed 003 Ch 4 §2.1). ``glm``: EP, power EP,
ADF, SEP, parallel SEP / AEP and DSEP for probit and logistic regression with a full-Gaussian q (seed 001 §2.3, Ch 3).
"""
from inference.ep import glm
from inference.ep.expfam import DiagGaussian, FullGaussian

__all__ = ["DiagGaussian", "FullGaussian", "glm"]
