"""Multi-run workflows built on agents: ``pipelines.npmp`` (tracking experts -> data -> distillation -> evaluation
of neural probabilistic motor primitives). Dependencies point one way: pipelines -> agents -> priors -> inference;
nothing here is imported by the library, and nothing here imports train.py."""
