"""`tiny`: a few layers, small width, short context; for laptop CPUs, tests and the quick start.

Launch:
  python -m experiments.run --config=tiny
  python -m experiments.run --config=tiny:norm=post
  python -m experiments.run --config=tiny:position=rope,activation=relu2,bias=False
  python -m experiments.run --config=tiny:recipe=periln_olmo   # a named recipe (andrea_jax/recipes.py)
"""

from andrea_jax import configdict


def get_config(arg=None):
  # vocab 2305 = 256 byte tokens + 2048 merges + 1 end-of-text token.
  config = configdict.default_config(vocab_size=2305, block_size=128,
                                     d_model=128, n_layer=4, n_head=4)
  # 300 updates of 32 x 128 tokens: a few minutes on a laptop CPU (the run prints its time).
  config.train.steps = 300
  # A small model takes a larger step size.
  config.train.learning_rate = 2e-3
  # Short warmup for a short run.
  config.train.warmup_steps = 40
  # Evaluate four times during the run.
  config.train.eval_every = 100
  # Checkpoint as often as we evaluate.
  config.checkpoint.every = 100
  return configdict.apply_variants(config, arg)
