"""A run's logs: per-step metrics and samples, written and read back."""
