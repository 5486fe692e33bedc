"""envs: rollouts. Datasets, inference backends and environments. Imports ``rubrics``, never ``train``."""
