"""Loader throughput (tokens/s, with prefetch) against what andrea120m training consumes.

  python -m benchmarks.loader_throughput [--batch_size 64] [--block_size 1024]

Writes a random token shard (--tokens of them) to a temp dir, then times the prefetching
``Loader`` and bare ``batch_at``. Not a test.

Assumed consumption of andrea120m: an H100 (989 TFLOP/s dense bf16) at 40% MFU with
~6 * 110M params ≈ 662 MFLOP per token (forward + backward) trains on
0.4 * 989e12 / 662e6 ≈ 0.6 M tokens/s. The loader should be well above that.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

from andrea_jax import loader as loader_lib
from andrea_jax import shards

# H100 dense bf16 peak x 40% MFU / FLOPs per token of andrea120m (6 N, N ≈ 110M).
CONSUMPTION_TOKENS_PER_S = 0.4 * 989e12 / 662e6


def tokens_per_s(make_batch, n_batches: int, tokens_per_batch: int) -> float:
  start = time.perf_counter()
  for _ in range(n_batches):
    make_batch()
  return n_batches * tokens_per_batch / (time.perf_counter() - start)


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--batch_size", type=int, default=64)
  parser.add_argument("--block_size", type=int, default=1024)
  parser.add_argument("--tokens", type=int, default=100_000_000)
  parser.add_argument("--batches", type=int, default=200)
  args = parser.parse_args()
  with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "bench.bin")
    rng = np.random.default_rng(0)
    shards.write_shard(path, rng.integers(0, 8449, size=args.tokens, dtype=np.uint16))
    kw = dict(batch_size=args.batch_size, block_size=args.block_size, seed=0)
    per_batch = args.batch_size * args.block_size
    tokens = shards.read_shard(path)
    bare = tokens_per_s(lambda: loader_lib.batch_at(tokens, 0, **kw), args.batches, per_batch)
    with loader_lib.Loader(path, process_index=0, process_count=1, prefetch=4, **kw) as loader:
      fed = tokens_per_s(lambda: next(loader), args.batches, per_batch)
  need = CONSUMPTION_TOKENS_PER_S
  print(f"batch {args.batch_size} x {args.block_size + 1} tokens, shard of {args.tokens:,} "
        f"tokens, {os.cpu_count()} CPU cores")
  print(f"{'batch_at (no prefetch)':<32}{bare / 1e6:>8.2f} M tokens/s  ({bare / need:.1f}x need)")
  print(f"{'Loader (prefetch=4)':<32}{fed / 1e6:>8.2f} M tokens/s  ({fed / need:.1f}x need)")
  print(f"{'andrea120m on H100 @40% MFU':<32}{need / 1e6:>8.2f} M tokens/s  "
        f"(989 TFLOP/s * 0.4 / 662 MFLOP/token)")


if __name__ == "__main__":
  main()
