"""Loader throughput (tokens/s, with prefetch) against what andrea120m training consumes.

  python -m benchmarks.loader_throughput [--batch_size=64] [--block_size=1024]

Writes a random token shard (--tokens of them) to a temp dir, then times the prefetching
``Loader`` and bare ``batch_at``. Not a test.

Assumed consumption of andrea120m: an H100 (989 TFLOP/s dense bf16) at 40% MFU with
~6 * 110M params ≈ 662 MFLOP per token (forward + backward) trains on
0.4 * 989e12 / 662e6 ≈ 0.6 M tokens/s. The loader should be well above that.
"""

from __future__ import annotations

import os
import tempfile
import time

import numpy as np
from absl import app
from absl import flags

from andrea_jax import loader as loader_lib
from andrea_jax import shards

# H100 dense bf16 peak x 40% MFU / FLOPs per token of andrea120m (6 N, N ≈ 110M).
CONSUMPTION_TOKENS_PER_S = 0.4 * 989e12 / 662e6


def tokens_per_s(make_batch, n_batches: int, tokens_per_batch: int) -> float:
  start = time.perf_counter()
  for _ in range(n_batches):
    make_batch()
  return n_batches * tokens_per_batch / (time.perf_counter() - start)


def define_flags(fv: flags.FlagValues = flags.FLAGS) -> None:
  """The command's flags: defined when it runs, so importing the module defines none."""
  flags.DEFINE_integer("batch_size", 64, "sequences per batch", lower_bound=1, flag_values=fv)
  flags.DEFINE_integer("block_size", 1024, "tokens per sequence", lower_bound=1, flag_values=fv)
  flags.DEFINE_integer("tokens", 100_000_000, "tokens in the random shard", lower_bound=1, flag_values=fv)
  flags.DEFINE_integer("batches", 200, "batches timed", lower_bound=1, flag_values=fv)


def main(argv: list[str], fv: flags.FlagValues = flags.FLAGS) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments {argv[1:]}; every setting is a --flag")
  with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "bench.bin")
    rng = np.random.default_rng(0)
    shards.write_shard(path, rng.integers(0, 8449, size=fv.tokens, dtype=np.uint16))
    kw = dict(batch_size=fv.batch_size, block_size=fv.block_size, seed=0)
    per_batch = fv.batch_size * fv.block_size
    tokens = shards.read_shard(path)
    bare = tokens_per_s(lambda: loader_lib.batch_at(tokens, 0, **kw), fv.batches, per_batch)
    with loader_lib.Loader(path, process_index=0, process_count=1, prefetch=4, **kw) as loader:
      fed = tokens_per_s(lambda: next(loader), fv.batches, per_batch)
  need = CONSUMPTION_TOKENS_PER_S
  print(f"batch {fv.batch_size} x {fv.block_size + 1} tokens, shard of {fv.tokens:,} "
        f"tokens, {os.cpu_count()} CPU cores")
  print(f"{'batch_at (no prefetch)':<32}{bare / 1e6:>8.2f} M tokens/s  ({bare / need:.1f}x need)")
  print(f"{'Loader (prefetch=4)':<32}{fed / 1e6:>8.2f} M tokens/s  ({fed / need:.1f}x need)")
  print(f"{'andrea120m on H100 @40% MFU':<32}{need / 1e6:>8.2f} M tokens/s  "
        f"(989 TFLOP/s * 0.4 / 662 MFLOP/token)")


if __name__ == "__main__":
  define_flags()
  from experiments import cli  # pylint: disable=ungrouped-imports
  cli.run(main)
