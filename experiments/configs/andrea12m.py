"""ANDREA family member `andrea12m`: d_model 384, 12 heads, 6 layers, vocab 4353, context 1024.

Launch:
  python -m experiments.run --config=andrea12m
  python -m experiments.run --config=andrea12m:norm=post,mlp_ratio=2
"""

from andrea_jax import configdict


def get_config(arg=None):
  config = configdict.default_config(vocab_size=4353, block_size=1024,
                                     d_model=384, n_layer=6, n_head=12)
  return configdict.apply_variants(config, arg)
