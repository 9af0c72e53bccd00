"""Stage 4, update: the training loop and what it needs to change the weights (checkpoints, processes, sharding)."""
