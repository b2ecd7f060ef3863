"""A smoke sweep for the tests: one vmapped group (two rates, two seeds, one member forced
to diverge) and two ordinary runs (one that trains, one forced to diverge).

  python -m experiments.sweep --sweep=micro --scale=cpu --workdir=/tmp/micro

Judged and reported as the norm x MLP study (its arms are that study's names).
"""

from research.sweep import Cell, Sweep

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
  grouped = [Cell(f"pre-long-lr{lr:g}-seed{seed}",
                  {**common, "model.norm": "pre", "train.learning_rate": lr, "train.seed": seed},
                  ("norm:pre/long",), seed, group="pre-long")
             for lr in (1e-3, 1e-2) for seed in (0, 1)]
  # A rate of 1e30 overflows the parameters within a step: this member diverges, the others go on.
  grouped.append(Cell("pre-long-lr1e+30-seed0", {**common, "model.norm": "pre",
                                                "train.learning_rate": 1e30, "train.seed": 0},
                      ("norm:pre/long",), 0, group="pre-long"))
  return Sweep("micro", "cpu", "tiny", [
      *grouped,
      Cell("pre-seed0", {**common, "model.norm": "pre"}, ("single:pre",), 0),
      # A learning rate of 1e4 without clipping: the loss leaves the floats within steps.
      Cell("post-diverge-seed0", {**common, "model.norm": "post", "train.learning_rate": 1e4,
                                  "train.grad_clip": 0.0, "train.warmup_steps": 0},
           ("single:post",), 0),
  ], description="Smoke test of the sweep machinery.", study="norm_mlp")
