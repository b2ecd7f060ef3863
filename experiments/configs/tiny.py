"""`tiny`: a few layers, small width, short context; for laptop CPUs, tests and the quick start.

Launch:
  python -m experiments.run --config=tiny
  python -m experiments.run --config=tiny:norm=post
"""

from experiments.configs import common


def get_config(arg=None):
  # vocab 2305 = 256 byte tokens + 2048 merges + 1 end-of-text token.
  model = common.model_group(vocab_size=2305, block_size=128, d_model=128, n_layer=4, n_head=4)
  config = common.base_config(model)
  return common.apply_variants(config, arg)
