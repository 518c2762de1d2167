"""Expectation propagation and its relatives (issue 16, in progress): ``expfam`` holds the Gaussian exponential
families in natural and mean parameters that EP, power EP and SNEP are written in (seed 003 Ch 4 §2.1)."""
from inference.ep.expfam import DiagGaussian, FullGaussian

__all__ = ["DiagGaussian", "FullGaussian"]
