"""Entry points and experiment definitions for andrea_jax (run, prepare, sample, sweep, report)."""
