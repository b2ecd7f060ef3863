"""Encoding a corpus into token shards (``docs/corpus.md``, step 4), resumable: a reader
thread reads and splits, batches of runs are encoded on every core (the tokenizer's own
threads, or ``data.workers`` spawned processes), and fixed-size shards are written as they
fill. ``progress.json`` records the whole train shards and where in the stream they end: an
interrupted preparation resumes after its last whole shard.
"""

from __future__ import annotations

import dataclasses
import itertools
import multiprocessing
import os
import queue
import signal
import threading
from typing import TYPE_CHECKING, Iterator

import numpy as np

from andrea_jax import files
from andrea_jax import loader as loader_lib
from andrea_jax import prepared as prepared_lib
from andrea_jax import progress as progress_lib
from andrea_jax import shards
from andrea_jax import signals as signals_lib
from andrea_jax import split as split_lib
from andrea_jax import tokenizer as tokenizer_lib
from andrea_jax.progress import say

if TYPE_CHECKING:  # for the annotations alone: preparing data needs no JAX
  from andrea_jax.config import DataConfig

# Characters of text sent to the tokenizer at once (a batch's runs).
ENCODE_BATCH_CHARS = 4 << 20
# Batches read ahead of the encoder.
READ_AHEAD = 4


_worker_tok = None


def _worker_init(path: str) -> None:
  global _worker_tok
  signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops; the pool ends with it
  _worker_tok = tokenizer_lib.load(path)


def _worker_encode(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
  return encode_runs(_worker_tok, texts)


def encode_runs(tok, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
  """``(ids, lengths)``: the texts' token ids end to end (uint16) and each one's count."""
  encoded = tokenizer_lib.encode_batch(tok, texts)
  lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
  ids = np.fromiter(itertools.chain.from_iterable(encoded), dtype=np.uint16,
                    count=int(lengths.sum()))
  return ids, lengths


def _batches(runs: Iterator[split_lib.Run],
             wanted) -> Iterator[tuple[list[split_lib.Run], list[str]]]:
  """Runs in batches of about ``ENCODE_BATCH_CHARS``, with the texts to encode (``wanted``)."""
  batch, texts, chars = [], [], 0
  for run in runs:
    batch.append(run)
    if wanted(run):
      texts.append(run.text)
      chars += len(run.text)
    if chars >= ENCODE_BATCH_CHARS or len(batch) >= 1 << 16:
      yield batch, texts
      batch, texts, chars = [], [], 0
  if batch:
    yield batch, texts


def _encoded(batches: Iterator, tok_path: str, tok, workers: int) -> Iterator:
  """``(batch, (ids, lengths))`` in order: in this process (the tokenizer's threads use every
  core) or in ``workers`` processes."""
  if workers <= 0:
    for batch, texts in batches:
      yield batch, encode_runs(tok, texts)
    return
  slots = threading.Semaphore(2 * workers + 2)  # bounds what waits for the workers

  def bounded():
    for batch, texts in batches:
      slots.acquire()
      pending.put(batch)
      yield texts

  pending: queue.Queue = queue.Queue()
  context = multiprocessing.get_context("spawn")  # never fork a process that runs JAX
  with context.Pool(workers, initializer=_worker_init, initargs=(tok_path,)) as pool:
    for result in pool.imap(_worker_encode, bounded()):
      slots.release()
      yield pending.get(), result


@dataclasses.dataclass
class _Progress:
  """``progress.json``: the whole train shards and where in the stream they end."""
  train: list
  run: int = 0  # the train run the last whole shard ends in ...
  taken: int = 0  # ... after this many of its tokens (EOT included)


def encode(directory: str, data: DataConfig, source, fp: str, tok,
           sample: dict) -> prepared_lib.PreparedData:
  """Encode the corpus into shards in ``directory``, resuming from ``progress.json``."""
  path = os.path.join(directory, "progress.json")
  done = _Progress(**(files.read_json(path) or {"train": []}))
  if not all(prepared_lib.is_whole(directory, s)
             for s in done.train):  # a damaged shard: from the start
    say(f"data: a shard listed in {path} is damaged or missing; encoding from the start")
    done = _Progress([])
  if done.train:
    say(f"data: resuming after {len(done.train)} whole train shard(s), "
        f"{sum(s['tokens'] for s in done.train):,} tokens")
  writers = {"train": shards.ShardWriter(directory, "train", data.shard_tokens, done.train),
             "val": shards.ShardWriter(directory, "val", data.shard_tokens)}
  splitter = split_lib.Splitter(data, sample["block_chars"])
  skip = lambda run: run.side == "train" and run.index < done.run  # whole shards hold it
  say(f"data: encoding {source.name} into shards of {data.shard_tokens:,} tokens"
      f"{f' with {data.workers} worker processes' if data.workers > 0 else ''}")
  signals_lib.set_phase("encoding the corpus")
  try:
    return _encode(directory, data, source, fp, tok, sample, done, writers, splitter, skip, path)
  except signals_lib.Interrupted as e:  # the whole shards stay: say so, and that a rerun uses them
    kept = writers["train"].shards  # the whole shards: those found at the start and written since
    n = len(kept)
    e.kept = (f"{n} whole train shard(s), {sum(s['tokens'] for s in kept):,} tokens, kept "
              f"in {directory}; the same command resumes after them" if n else
              f"no whole train shard was written yet in {directory}; the same command starts "
              f"the encoding again")
    raise


def _encode(directory, data, source, fp, tok, sample, done, writers, splitter, skip, path):
  """``encode``'s loop: the batches of runs encoded and written to their sides' shards."""
  eot = np.array([tokenizer_lib.eot_id(tok)], dtype=np.uint16)
  with progress_lib.Progress("encoding", source.total_bytes) as bar:
    runs = split_lib.runs(source, data, splitter, bar)
    # Reading and splitting in a thread, READ_AHEAD batches ahead: they overlap encoding.
    with loader_lib.Prefetch(_batches(runs, lambda run: not skip(run)), READ_AHEAD,
                             "andrea-prepare-reader") as batches:
      for batch, (ids, lengths) in _encoded(batches, os.path.join(directory, "tokenizer.json"),
                                            tok, data.workers):
        kept = [run for run in batch if not skip(run)]
        for side in split_lib.SIDES:
          _write_side(writers[side], [(r, i) for i, r in enumerate(kept) if r.side == side],
                      ids, lengths, eot, done if side == "train" else None, path)
        bar.note = f"{len(writers['train'].shards)} train shard(s) written"
        signals_lib.check()
    split_lib.check_split(splitter, source)
    for writer in writers.values():
      writer.close()
    bar.note = (f"{len(writers['train'].shards)} train and {len(writers['val'].shards)} "
                f"validation shard(s) written")
  return prepared_lib.finish(directory, data, fp, tok, sample, splitter, writers)


def _write_side(writer: shards.ShardWriter, runs: list, ids: np.ndarray, lengths: np.ndarray,
                eot: np.ndarray, done: _Progress | None, path: str) -> None:
  """One side's runs of a batch into its writer; a train shard that fills is recorded."""
  if not runs:
    return
  ends = np.cumsum(lengths)
  parts, bounds = [], []
  for run, i in runs:
    part = ids[ends[i] - lengths[i]:ends[i]]
    part = np.concatenate([eot, part]) if run.starts else part
    if done is not None and run.index == done.run and done.taken:  # resumed inside this run
      part = part[done.taken:]
    parts.append(part)
    bounds.append(len(part))
  before = len(writer.shards)
  taken = writer.add(np.concatenate(parts))
  if done is not None and len(writer.shards) > before:
    starts = np.cumsum([0] + bounds)
    k = int(np.searchsorted(starts, taken, side="right")) - 1  # the run the shard ended in
    run = runs[min(k, len(runs) - 1)][0]
    offset = taken - starts[k] if k < len(runs) else bounds[-1]
    if run.index == done.run:
      offset += done.taken  # its first tokens were written before this start
    done.train, done.run, done.taken = list(writer.shards), run.index, int(offset)
    files.write_json(path, dataclasses.asdict(done))
