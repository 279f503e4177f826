"""Training: a step, the engine that owns a seed's state, seeds and the run directory,
crash-safe state for --resume, training curves and checkpoints."""
