"""Prepare a config's data: tokenizer and train/val token shards, cached.

  python -m experiments.prepare --config=tiny
  python -m experiments.prepare --config=andrea120m --config.data.max_docs=100
  python -m experiments.prepare --config=tiny --config.data.path=my_texts/

Prints where the files are; re-running with the same data reuses the cache. A corpus of
your own (``data.path``) too small for the config's vocabulary gets the vocabulary it
fills, as ``experiments.run`` does, unless the command line sets ``model.vocab_size``.
"""

from __future__ import annotations

import time

from absl import app, flags

from andrea_jax import prepare as prepare_lib
from experiments import cli

_CONFIG = cli.define_config_flag()


def summary(prepared: prepare_lib.PreparedData, seconds: float) -> str:
  """A few lines describing a prepared dataset."""
  how = "reused cache" if prepared.reused else "prepared"
  return "\n".join([
      f"{how} in {seconds:.1f}s: {prepared.directory}",
      f"  corpus fingerprint  {prepared.fingerprint}",
      f"  tokenizer           {prepared.tokenizer_path} (vocab {prepared.vocab_size}, "
      f"eot id {prepared.eot_id})",
      f"  train               {prepared.train_path}: {prepared.train_docs} docs, "
      f"{prepared.train_tokens:,} tokens",
      f"  val                 {prepared.val_path}: {prepared.val_docs} docs, "
      f"{prepared.val_tokens:,} tokens",
      f"  held out            {prepared.val_share_tokens:.1%} of the tokens, "
      f"{prepared.val_share_bytes:.1%} of the bytes (data.val_fraction; whole documents "
      f"in a seeded order, the last one cut at a line break)",
  ])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments {argv[1:]}; use --config=NAME")
  config = _CONFIG.value
  start = time.perf_counter()
  prepared = prepare_lib.prepare(config, cli.fit_vocab(config, cli.overridden_fields()))
  print(summary(prepared, time.perf_counter() - start))


if __name__ == "__main__":
  flags.mark_flag_as_required("config")
  cli.run(main)
