"""Batches from token shards: ``batch_at`` (a pure function of seed and step, the train
batches), ``eval_batches`` (a fixed evaluation set) and ``Loader`` (prefetching, over one
shard or many read as one stream: ``shards.TokenStream``; a window may cross shards).

Each process takes its rows of the global batch, so all processes together see exactly
the global batch whatever their number.
"""

from __future__ import annotations

import itertools
import os
import queue
import threading
from typing import Iterable, Iterator

import numpy as np

from andrea_jax import errors
from andrea_jax import shards

def _check_length(tokens: np.ndarray, block_size: int, name: str) -> None:
  if len(tokens) < block_size + 1:
    raise errors.DataError(f"{name} has {len(tokens)} tokens, fewer than one window of "
                           f"block_size + 1 = {block_size + 1}; use a smaller block_size or "
                           f"more data")


def check_batch_fits(tokens: np.ndarray, batch_size: int, block_size: int, name: str) -> None:
  """Refuse a batch holding more tokens than the stream: each batch would repeat the data."""
  _check_length(tokens, block_size, name)
  need = batch_size * (block_size + 1)
  if need > len(tokens):
    raise errors.DataError(
        f"one batch of train.batch_size={batch_size} windows of block_size + 1 = "
        f"{block_size + 1} tokens is {need:,} tokens, more than the {len(tokens):,} of {name}; "
        f"use a train.batch_size of at most {len(tokens) // (block_size + 1)}, or more data")


def batch_fix(train: int, val: int, batch_size: int, block_size: int, multiple: int = 1,
              prompt: int = 0, new_tokens: int = 0) -> str | None:
  """None where ``train`` and ``val`` tokens pass every check a run makes of the data's size;
  else one clause naming settings that pass them all at once, so following it meets no
  second refusal: a batch of ``batch_size`` windows of ``block_size + 1`` tokens within the
  training tokens (``check_batch_fits``), one window within the validation tokens
  (``eval_batches``), the batch a multiple of ``multiple`` (train.grad_accum_steps x the
  devices that share a batch: ``sharding.check_batch``) and, where the run ends with
  samples (``new_tokens > 0``), a prompt of ``prompt`` tokens plus ``new_tokens`` within the
  block (``workdir.check_samples``). The block is kept as long as the data allows (a batch
  is cut before a context is), then the batch as large as that block allows."""
  window = min(train, val)  # the longest window (block_size + 1) both sides hold
  most_rows = lambda block: train // (block + 1) // multiple * multiple
  if block_size < window and batch_size * (block_size + 1) <= train:
    return None
  # The block as long as both sides' windows allow, shorter only where a batch of
  # `multiple` rows would not fit; then the batch as large as that block allows.
  block = min(block_size, window - 1, max(train // multiple - 1, 0))
  if block < 1:
    return "add text: no block_size of 1 or more leaves a window on both sides"
  rows = most_rows(block)
  if batch_size <= rows:
    fix = f"use a model.block_size of at most {block}"
  elif block == block_size:
    fix = f"use a train.batch_size of at most {rows} (or a smaller model.block_size)"
  else:  # neither alone: both at once
    fix = f"set both --config.model.block_size={block} and --config.train.batch_size={rows}"
  if new_tokens and prompt + new_tokens > block:  # the samples the run ends with must fit too
    fix += (f", with --config.sample.max_new_tokens={block - prompt}" if block > prompt else
            ", with --config.sample.num_samples=0 (no room for a prompt and a sample)")
  return fix


def check_fits(train: int, val: int, batch_size: int, block_size: int, name: str,
               multiple: int = 1, prompt: int = 0, new_tokens: int = 0) -> None:
  """Refuse data too small for the run's batch, block and samples, with the settings that
  fit (``batch_fix``); ``name`` says where the ``train`` and ``val`` tokens are."""
  fix = batch_fix(train, val, batch_size, block_size, multiple, prompt, new_tokens)
  if fix is None:
    return
  window = block_size + 1
  if window > min(train, val):
    what = (f"one window of block_size + 1 = {window} tokens is more than the "
            f"{'training' if train < window else 'validation'} tokens of {name} "
            f"({train:,} training, {val:,} validation)")
  else:
    what = (f"one batch of train.batch_size={batch_size} window{'s' * (batch_size != 1)} of "
            f"block_size + 1 = {window} tokens is {batch_size * window:,} tokens, more than the "
            f"{train:,} training tokens of {name}")
  raise errors.DataError(f"{what}; {fix}" + ("" if fix.startswith("add text") else
                                              ", or more data"))


def _local_slice(batch_size: int, process_index: int, process_count: int) -> slice:
  if batch_size % process_count:
    raise errors.DataError(f"global batch_size={batch_size} is not divisible by "
                           f"process_count={process_count}; use a multiple of {process_count}")
  if not 0 <= process_index < process_count:
    raise errors.DataError(f"process_index={process_index} is outside 0..{process_count - 1}")
  local = batch_size // process_count
  return slice(process_index * local, (process_index + 1) * local)


def _windows(tokens: np.ndarray, starts: np.ndarray, block_size: int) -> np.ndarray:
  return np.stack([tokens[s:s + block_size + 1] for s in starts]).astype(np.int32)


def batch_at(tokens: np.ndarray, step: int, *, batch_size: int, block_size: int, seed: int,
             process_index: int = 0, process_count: int = 1,
             name: str = "token stream") -> np.ndarray:
  """This process's rows of the global batch of ``step``: int32 ``[B_local, T+1]``.

  The global batch is a pure function of ``(seed, step)``; process p takes rows
  ``p*B_local:(p+1)*B_local``, so all processes together see exactly the global batch.
  Inputs are ``batch[:, :-1]``, targets ``batch[:, 1:]``.
  """
  _check_length(tokens, block_size, name)
  rows = _local_slice(batch_size, process_index, process_count)
  rng = np.random.default_rng([seed, step])
  starts = rng.integers(0, len(tokens) - block_size, size=batch_size)
  return _windows(tokens, starts[rows], block_size)


def eval_batches(tokens: np.ndarray, n_batches: int, batch_size: int, block_size: int, *,
                 process_index: int = 0, process_count: int = 1,
                 name: str = "token stream") -> np.ndarray:
  """A fixed eval set ``[n_batches, B_local, T+1]``: evenly spaced windows.

  The windows do not overlap when the stream is long enough; otherwise they are still
  evenly spaced (and overlap), so every evaluation sees the same tokens.
  """
  _check_length(tokens, block_size, name)
  rows = _local_slice(batch_size, process_index, process_count)
  starts = np.linspace(0, len(tokens) - block_size - 1, n_batches * batch_size)
  starts = starts.astype(np.int64).reshape(n_batches, batch_size)[:, rows]
  return np.stack([_windows(tokens, s, block_size) for s in starts])


def _process_defaults(process_index, process_count) -> tuple[int, int]:
  if process_index is None or process_count is None:
    import jax  # pylint: disable=import-outside-toplevel
    process_index = jax.process_index() if process_index is None else process_index
    process_count = jax.process_count() if process_count is None else process_count
  return process_index, process_count


class Prefetch:
  """``items`` made by a background thread, up to ``size`` ahead of the consumer.

  The one home of a producer thread in the project: the loader's batches, the data
  preparation's reading and splitting. An error in the thread is re-raised by ``next``;
  ``close()`` stops the thread, also one blocked on a full queue, and waits for it.
  """

  _END = object()

  def __init__(self, items: Iterable, size: int = 2, name: str = "andrea-prefetch"):
    self._queue: queue.Queue = queue.Queue(maxsize=max(size, 1))
    self._stop = threading.Event()
    self._thread = threading.Thread(target=self._fill, args=(iter(items),), name=name,
                                    daemon=True)
    self._thread.start()

  def _fill(self, items: Iterator) -> None:
    try:
      for item in items:
        self._put((item, None))
        if self._stop.is_set():
          return
      self._put((self._END, None))
    except BaseException as e:  # pylint: disable=broad-except  # re-raised by next()
      self._put((self._END, e))

  def _put(self, item) -> None:
    # Poll so close() can stop a producer that is blocked on a full queue.
    while not self._stop.is_set():
      try:
        self._queue.put(item, timeout=0.1)
        return
      except queue.Full:
        continue

  def __iter__(self) -> Iterator:
    return self

  def __next__(self):
    if self._stop.is_set():
      raise StopIteration
    item, error = self._queue.get()
    if item is self._END:
      self.close()
      if error is not None:
        raise error
      raise StopIteration
    return item

  def close(self) -> None:
    self._stop.set()
    self._thread.join()

  def __enter__(self):
    return self

  def __exit__(self, *exc) -> None:
    self.close()


class Loader(Prefetch):
  """Batches ``batch_at(step)`` for step = start_step, start_step+1, ..., prefetched.

  A background thread (``Prefetch``) fills a bounded queue of ``prefetch`` batches. Errors
  in the thread are re-raised by ``next``. Use as a context manager or call ``close()``.
  """

  def __init__(self, shard_paths, batch_size: int, block_size: int, seed: int,
               start_step: int = 0, process_index: int | None = None,
               process_count: int | None = None, prefetch: int = 2):
    paths = [shard_paths] if isinstance(shard_paths, (str, os.PathLike)) else list(shard_paths)
    self.tokens = shards.TokenStream(paths)
    p, n = _process_defaults(process_index, process_count)
    name = f"token shard {paths[0]!r}" if len(paths) == 1 else f"{len(paths)} token shards"
    args = dict(batch_size=batch_size, block_size=block_size, seed=seed,
                process_index=p, process_count=n, name=name)
    # Fail here, in the caller, rather than later in the worker thread.
    check_batch_fits(self.tokens, batch_size, block_size, name)
    _local_slice(batch_size, p, n)
    self.step = start_step
    # batch_at is looked up at each step (a module global), as a test replaces it.
    super().__init__(((step, batch_at(self.tokens, step, **args))
                      for step in itertools.count(start_step)), prefetch, "andrea-loader")

  def __next__(self) -> np.ndarray:
    step, batch = super().__next__()
    self.step = step + 1
    return batch
