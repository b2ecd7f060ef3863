"""A trained run read back from its workdir: its model, config and tokenizer
(``load_run``, to sample, inspect or export it) and the samples its end writes
(``samples.txt``).
"""

from __future__ import annotations

import os

import jax

from andrea_jax import checkpoint as ckpt
from andrea_jax import errors
from andrea_jax import history
from andrea_jax import model
from andrea_jax import resume
from andrea_jax import tokenizer as tokenizer_lib


def write_samples(params, cfg, tokenizer_path: str, s, workdir: str, seed: int) -> list[str]:
  """A few samples from the trained model, printed and saved to ``samples.txt``."""
  from andrea_jax import sample  # pylint: disable=import-outside-toplevel
  from tqdm.auto import tqdm  # pylint: disable=import-outside-toplevel
  tok = tokenizer_lib.load(tokenizer_path, cfg.vocab_size)
  keys = jax.random.split(jax.random.key(seed), s.num_samples)
  texts = [s.prompt + sample.generate_text(params, cfg, tok, s.prompt, s.max_new_tokens, key,
                                           temperature=s.temperature, top_k=s.top_k,
                                           top_p=s.top_p) for key in keys]
  with open(os.path.join(workdir, "samples.txt"), "w", encoding="utf-8") as f:
    f.write("\n\n-----\n\n".join(texts) + "\n")
  for text in texts:
    tqdm.write(f"--- sample ---\n{text}")
  return texts



def load_run(workdir: str, step: int | None = None):
  """A finished or stopped run's ``(params, ModelConfig, tokenizer, config)`` from its workdir.

  Only the parameters are read from the checkpoint (orbax restores that sub-tree), onto
  this process's first device, whichever mesh wrote them; no optimizer state is built.
  By default the newest checkpoint that reads whole (a damaged newer one is skipped with a
  note); from any directory, and after the workdir was moved.
  """
  import ml_collections  # pylint: disable=import-outside-toplevel
  saved = history.load_config_dict(workdir)
  if saved is None:
    raise errors.CheckpointError(f"{workdir} has no config.json: is it a run directory of "
                                 f"python -m experiments.run?")
  config = ml_collections.ConfigDict(resume.with_added_fields(saved))
  cfg = model.resolve_auto(model.ModelConfig(**config.model), verbose=False)
  abstract = jax.eval_shape(lambda key: model.init_params(cfg, key), jax.random.key(0))
  one_device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
  abstract = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=one_device),
                          abstract)
  directory = os.path.join(workdir, "checkpoints")
  if not os.path.isdir(directory):
    raise errors.CheckpointError(f"{workdir} has no checkpoints/ directory: the run saved none")
  mngr = ckpt.manager(directory, config.checkpoint.every, config.checkpoint.keep)
  try:
    params = ckpt.restore_params(mngr, abstract, step)
  finally:
    mngr.close()
  return params, cfg, tokenizer_lib.load(history.tokenizer_file(workdir), cfg.vocab_size), config
