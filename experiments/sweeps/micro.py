"""A two-cell smoke sweep for the tests: one cell that trains, one forced to diverge.

  python -m experiments.sweep --sweep=micro --scale=cpu --workdir=/tmp/micro
"""

from experiments.sweeps.base import Cell, Sweep

# One small layer on a slice of the built-in corpus, a few steps.
COMMON = {"model.n_layer": 1, "model.d_model": 32, "model.n_head": 2, "model.block_size": 32,
          "model.vocab_size": 321, "data.max_docs": 40, "train.batch_size": 8,
          "train.steps": 12, "train.warmup_steps": 2, "train.eval_every": 6,
          "train.eval_batches": 2, "train.log_every": 3, "checkpoint.every": 6,
          "diagnostics.enabled": True, "diagnostics.every": 6, "diagnostics.early_steps": 2,
          "sample.num_samples": 0}


def get_sweep(scale: str = "cpu", cache_dir: str = "runs/cache") -> Sweep:
  del scale  # one size only
  common = {**COMMON, "data.cache_dir": cache_dir}
  return Sweep("micro", "cpu", "tiny", [
      Cell("pre-seed0", {**common, "model.norm": "pre"}, ("norm:pre/warmup",), 0),
      # A learning rate of 1e4 without clipping: the loss leaves the floats within steps.
      Cell("post-diverge-seed0", {**common, "model.norm": "post", "train.learning_rate": 1e4,
                                  "train.grad_clip": 0.0, "train.warmup_steps": 0},
           ("norm:post/no-warmup",), 0),
  ], description="Smoke test of the sweep machinery.")
