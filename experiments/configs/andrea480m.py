"""ANDREA family member `andrea480m`: d_model 1536, 24 heads, 16 layers, vocab 8449, context 1024.

Launch:
  python -m experiments.run --config=andrea480m
  python -m experiments.run --config=andrea480m:norm=post,mlp_ratio=2

The built-in corpus is small (docs/corpus.md): for a real run, point data.path at a
larger corpus and raise train.steps.
"""

from andrea_jax import configdict


def get_config(arg=None):
  config = configdict.default_config(vocab_size=8449, block_size=1024,
                                     d_model=1536, n_layer=16, n_head=24)
  # bfloat16 on NVIDIA GPUs, float32 on CPUs (printed at the start); an explicit value wins.
  config.model.compute_dtype = "auto"
  # 64 x 1024 tokens per update.
  config.train.batch_size = 64
  # No step-0 evaluation: on a CPU it alone takes about an hour (train.eval_at_start).
  config.train.eval_at_start = False
  return configdict.apply_variants(config, arg)
