"""Prepare a config's data: tokenizer and train/val token shards, cached.

  python -m experiments.prepare --config=tiny
  python -m experiments.prepare --config=andrea120m --config.data.max_docs=100
  python -m experiments.prepare --config=tiny --config.data.path=my_texts/
  python -m experiments.prepare --config=andrea120m --config.data.path='fineweb-edu/*.parquet'
  python -m experiments.prepare --config=andrea120m \
      --config.data.hf_dataset=HuggingFaceFW/fineweb-edu --config.data.hf_config=sample-10BT

Prints where the files are; re-running with the same data reuses the cache, and re-running
an interrupted preparation (Ctrl-C, SIGTERM, a kill) resumes after its last whole shard. A
corpus of your own too small for the config's vocabulary gets the vocabulary it fills, as
``experiments.run`` does, unless the command line sets ``model.vocab_size``.
"""

from __future__ import annotations

import os
import sys
import time

from absl import app, flags

from andrea_jax import config as config_lib
from andrea_jax import errors
from andrea_jax import files
from andrea_jax import prepare as prepare_lib
from andrea_jax import prepared as prepared_lib
from andrea_jax import signals as signals_lib
from experiments import cli

_CONFIG = cli.define_config_flag()


def summary(prepared: prepared_lib.PreparedData, seconds: float) -> str:
  """A few lines describing a prepared dataset."""
  how = "reused cache" if prepared.reused else "prepared"
  lines = [f"{how} in {seconds:.1f}s: {prepared.directory}",
           f"  corpus fingerprint  {prepared.fingerprint}",
           f"  tokenizer           {prepared.tokenizer_path} (vocab {prepared.vocab_size}, "
           f"eot id {prepared.eot_id})"]
  for side, paths, docs, tokens in (("train", prepared.train_paths, prepared.train_docs,
                                     prepared.train_tokens),
                                    ("val", prepared.val_paths, prepared.val_docs,
                                     prepared.val_tokens)):
    counted = f"{docs:,} docs, " if docs is not None else ""
    lines.append(f"  {side:<19} {len(paths)} shard(s) ({os.path.basename(paths[0])}"
                 f"{' ...' if len(paths) > 1 else ''}): {counted}{tokens:,} tokens")
  share = f"{prepared.val_share_tokens:.1%} of the tokens"
  if prepared.val_share_bytes is not None:
    share += (f", {prepared.val_share_bytes:.1%} of the bytes (data.val_fraction by a hash of "
              f"each block, at most data.val_max_bytes)")
  lines.append(f"  held out            {share}")
  return "\n".join(lines)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments {argv[1:]}; use --config=NAME")
  config = _CONFIG.value
  files.check_paths(write_dirs={  # before anything is printed or read
      "data.cache_dir": (config.data.cache_dir,
                         "for the prepared data (--config.data.cache_dir=...)")})
  start = time.perf_counter()
  with signals_lib.StopSignals() as stop:
    stop.resume = "the same command again"
    signals_lib.set_phase("preparing data")
    try:
      prepared = prepare_lib.prepare(config_lib.RunConfig.from_configdict(config),
                                     cli.fit_vocab(config, cli.overridden_fields()))
    except signals_lib.Interrupted as e:
      print(f"interrupted while {e.phase}: " + (e.kept or "every whole shard is kept; run the "
                                                 "same command again to resume"), flush=True)
      sys.exit(errors.EXIT_INTERRUPTED)
  print(summary(prepared, time.perf_counter() - start))


if __name__ == "__main__":
  flags.mark_flag_as_required("config")
  cli.run(main)
