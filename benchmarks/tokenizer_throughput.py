"""Tokenizer encode throughput on the built-in corpus: one text at a time vs batched.

  python -m benchmarks.tokenizer_throughput [--vocab_size=2305] [--max_docs=0]

Trains a byte-level BPE of --vocab_size on the corpus (timed too), then encodes every
document with ``tokenizer.encode`` in a loop and with ``encode_batch`` (the library's
parallel batch encoder, all cores). Prints a small table. Not a test.
"""

from __future__ import annotations

import os
import time

from absl import app
from absl import flags

from andrea_jax import builtin_corpus
from andrea_jax import tokenizer as tokenizer_lib


def timed(fn):
  start = time.perf_counter()
  out = fn()
  return out, time.perf_counter() - start


def run(vocab_size: int, max_docs: int) -> list[tuple[str, float, str]]:
  """Rows of (what, seconds, rate) for training, single and batch encoding."""
  docs = builtin_corpus.builtin_documents(max_docs)
  mb = sum(len(d.encode("utf-8")) for d in docs) / 1e6
  tok, t_train = timed(lambda: tokenizer_lib.train_tokenizer(docs, vocab_size))
  single, t_single = timed(lambda: [tokenizer_lib.encode(tok, d) for d in docs])
  batch, t_batch = timed(lambda: tokenizer_lib.encode_batch(tok, docs))
  assert single == batch, "encode and encode_batch disagree"
  n_tokens = sum(map(len, batch))
  print(f"{len(docs)} documents, {mb:.1f} MB, {n_tokens:,} tokens at vocab {vocab_size} "
        f"({mb * 1e6 / n_tokens:.2f} bytes/token), {os.cpu_count()} CPU cores")
  return [("train BPE", t_train, f"{mb / t_train:.1f} MB/s"),
          ("encode, one doc at a time", t_single, f"{mb / t_single:.1f} MB/s"),
          ("encode_batch (parallel)", t_batch, f"{mb / t_batch:.1f} MB/s")]


def define_flags(fv: flags.FlagValues = flags.FLAGS) -> None:
  """The command's flags: defined when it runs, so importing the module defines none."""
  flags.DEFINE_integer("vocab_size", 2305, "the tokenizer's vocabulary", lower_bound=257, flag_values=fv)
  flags.DEFINE_integer("max_docs", 0, "documents of the built-in corpus (0: all)", lower_bound=0,
                       flag_values=fv)


def main(argv: list[str], fv: flags.FlagValues = flags.FLAGS) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments {argv[1:]}; every setting is a --flag")
  rows = run(fv.vocab_size, fv.max_docs)
  print(f"{'step':<28}{'seconds':>9}  {'throughput':>12}")
  for what, seconds, rate in rows:
    print(f"{what:<28}{seconds:>9.2f}  {rate:>12}")


if __name__ == "__main__":
  define_flags()
  from experiments import cli  # pylint: disable=ungrouped-imports
  cli.run(main)
