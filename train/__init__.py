"""train: optimisation. Config, orchestration, advantages, loss, trainer loop, weight sync, logging."""
