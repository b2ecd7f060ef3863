"""ANDREA family member `andrea120m`: d_model 768, 12 heads, 12 layers, vocab 8449, context 1024.

Launch:
  python -m experiments.run --config=andrea120m
  python -m experiments.run --config=andrea120m:norm=post,mlp_ratio=2

The built-in corpus is small (README, Data): for a real run, point data.path at a
larger corpus and raise train.steps.
"""

from experiments.configs import common


def get_config(arg=None):
  model = common.model_group(vocab_size=8449, block_size=1024, d_model=768, n_layer=12, n_head=12)
  # GPUs: bfloat16 matmuls (norms and softmax stay float32) and fused attention kernels.
  model.compute_dtype = "bfloat16"
  model.attention_impl = "auto"
  config = common.base_config(model)
  # 64 x 1024 tokens per update. The built-in corpus has only ~8 M training tokens:
  # for a real run point data.path at a larger corpus and raise train.steps.
  config.train.batch_size = 64
  return common.apply_variants(config, arg)
