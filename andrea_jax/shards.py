"""Token shards on disk: llm.c's format, written once by ``prepare`` and memory-mapped by
the loader.

A shard is a 256-int32 header (magic 20240520, version 1, token count), then the tokens as
uint16, little-endian. ``ShardWriter`` writes fixed-size shards as tokens arrive (llm.c's
100 M tokens each by default, so no int32 count overflows whatever the corpus);
``TokenStream`` reads many shards as one stream; ``find_shards`` sorts a folder of them.
"""

from __future__ import annotations

import glob
import os
from typing import Sequence

import numpy as np

from andrea_jax import errors
from andrea_jax import files

SHARD_MAGIC = 20240520
SHARD_VERSION = 1
HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4


def write_shard(path: str | os.PathLike, tokens: np.ndarray) -> None:
  """Write tokens in llm.c's format (int32 header, uint16 little-endian tokens)."""
  tokens = np.asarray(tokens)
  if tokens.size >= 2**31:
    raise errors.DataError(f"{tokens.size:,} tokens do not fit one llm.c shard (its header "
                           f"counts in int32); write shards of at most 2**31 - 1 tokens "
                           f"(data.shard_tokens)")
  if tokens.size and tokens.dtype != np.uint16 and (tokens.min() < 0 or tokens.max() >= 65536):
    raise errors.DataError(f"token ids must be in 0..65535 for a uint16 shard, found "
                           f"{tokens.min()}..{tokens.max()}; use a vocab_size <= 65536")
  header = np.zeros(HEADER_INTS, dtype="<i4")
  header[:3] = (SHARD_MAGIC, SHARD_VERSION, tokens.size)
  files.atomic_write(path, header.tobytes(), tokens.astype("<u2").tobytes())


def read_shard(path: str | os.PathLike) -> np.memmap:
  """Memory-map a shard's tokens (uint16) after checking its header and length."""
  path = os.fspath(path)
  if not os.path.isfile(path):
    raise errors.DataNotFoundError(f"token shard {path!r} does not exist; run "
                                   f"`python -m experiments.prepare --config=...` to write it")
  size = os.path.getsize(path)
  if size < HEADER_BYTES:
    raise errors.DataError(f"token shard {path!r} has {size} bytes, expected at least the "
                           f"{HEADER_BYTES}-byte header; it is truncated, delete it and re-prepare")
  header = np.fromfile(path, dtype="<i4", count=HEADER_INTS)
  if header[0] != SHARD_MAGIC or header[1] != SHARD_VERSION:
    raise errors.DataError(f"{path!r} is not an llm.c token shard: expected magic {SHARD_MAGIC} "
                           f"version {SHARD_VERSION}, found magic {header[0]} version {header[1]}")
  count = int(header[2])
  if size != HEADER_BYTES + 2 * count:
    raise errors.DataError(f"token shard {path!r} has {size} bytes, expected "
                           f"{HEADER_BYTES + 2 * count} for its {count} tokens; it is truncated "
                           f"or corrupt, delete it and re-prepare")
  return np.memmap(path, dtype="<u2", mode="r", offset=HEADER_BYTES, shape=(count,))


def shard_count(path: str | os.PathLike) -> int:
  """The token count of a shard's header, after the same checks as ``read_shard``."""
  return len(read_shard(path))


class ShardWriter:
  """Tokens into fixed-size shards written as they fill: ``<prefix>_000000.bin``, ...

  A shard holds ``shard_tokens`` tokens (the last one what is left), so no header count
  overflows whatever the corpus. Each whole shard is written atomically and reported to
  ``shards`` with its name, token count and sha256, what a manifest lists; ``done``: the
  whole shards an interrupted preparation wrote, which it keeps. Memory: one shard's buffer.
  """

  def __init__(self, directory: str, prefix: str, shard_tokens: int,
               done: list[dict] | None = None):
    if not 1 <= shard_tokens < 2**31:
      raise errors.DataError(f"data.shard_tokens={shard_tokens}; expected 1..2**31 - 1 (an "
                             f"llm.c header counts in int32), e.g. 100_000_000 (llm.c's size)")
    self.directory, self.prefix, self.shard_tokens = directory, prefix, shard_tokens
    self.shards: list[dict] = list(done or [])  # the whole shards written so far
    self._buffer = np.empty(min(shard_tokens, 1 << 20), dtype="<u2")
    self._filled = 0

  @property
  def tokens(self) -> int:
    """Tokens written to whole shards plus those waiting in the buffer."""
    return sum(s["tokens"] for s in self.shards) + self._filled

  def add(self, tokens: np.ndarray) -> int:
    """Append ``tokens``; returns how many of them the shards written by this call took."""
    taken, at = 0, 0
    while at < len(tokens):
      room = self.shard_tokens - self._filled
      part = tokens[at:at + room]
      self._grow(self._filled + len(part))
      self._buffer[self._filled:self._filled + len(part)] = part
      self._filled += len(part)
      at += len(part)
      if self._filled == self.shard_tokens:
        self._flush()
        taken = at
    return taken

  def _grow(self, need: int) -> None:
    if need > len(self._buffer):  # doubles up to one shard: small corpora stay small
      bigger = np.empty(min(max(need, 2 * len(self._buffer)), self.shard_tokens), dtype="<u2")
      bigger[:self._filled] = self._buffer[:self._filled]
      self._buffer = bigger

  def close(self) -> None:
    """Write the last, partial shard (if any tokens wait)."""
    if self._filled:
      self._flush()

  def _flush(self) -> None:
    name = f"{self.prefix}_{len(self.shards):06d}.bin"
    path = os.path.join(self.directory, name)
    write_shard(path, self._buffer[:self._filled])
    entry = {"file": name, "tokens": int(self._filled), "sha256": files.sha256(path)}
    self.shards.append(entry)
    self._filled = 0


class TokenStream:
  """Many shards read as one token stream: ``len`` and slices, each shard memory-mapped.

  What the loader's windows need (``tokens[start:stop]``) crosses shard boundaries; no
  shard is read until a window touches it.
  """

  def __init__(self, paths: Sequence[str]):
    if not paths:
      raise errors.DataNotFoundError("no token shards to read; prepare the data first "
                                     "(`python -m experiments.prepare --config=...`)")
    self.paths = [os.fspath(p) for p in paths]
    self.parts = [read_shard(p) for p in self.paths]
    self.starts = np.cumsum([0] + [len(p) for p in self.parts])

  def __len__(self) -> int:
    return int(self.starts[-1])

  def __getitem__(self, key) -> np.ndarray:
    if not isinstance(key, slice) or key.step not in (None, 1):
      raise TypeError("a TokenStream takes contiguous slices, e.g. tokens[10:20]")
    start, stop, _ = key.indices(len(self))
    if stop <= start:
      return np.zeros(0, dtype="<u2")
    first = int(np.searchsorted(self.starts, start, side="right")) - 1
    pieces = []
    while start < stop:
      offset = start - self.starts[first]
      take = min(stop, self.starts[first + 1]) - start
      pieces.append(self.parts[first][offset:offset + take])
      start += take
      first += 1
    return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)

  def head(self, limit: int) -> np.ndarray:
    """The first ``limit`` tokens (or all): a bounded sample for statistics."""
    return self[:min(limit, len(self))]


def find_shards(spec: str) -> dict[str, list[str]]:
  """``{"train": [...], "val": [...]}``: the token shards of a folder or glob, in name order.

  A file whose name holds ``val`` is a validation shard (llm.c's ``fineweb_val_000000.bin``,
  nanoGPT's ``val.bin``); every other ``.bin`` file trains.
  """
  if glob.has_magic(spec):
    paths = sorted(p for p in glob.glob(spec, recursive=True) if os.path.isfile(p))
  elif os.path.isdir(spec):
    paths = sorted(os.path.join(spec, n) for n in os.listdir(spec) if n.endswith(".bin"))
  elif os.path.isfile(spec):
    raise errors.DataError(f"data.shards={spec!r} is a file; point it at the folder (or a glob) "
                           f"of token shards, train and validation ones together")
  else:
    raise errors.DataNotFoundError(f"data.shards={spec!r} does not exist; point it at a folder "
                                   f"or glob of llm.c token shards (*.bin)")
  split = {"train": [], "val": []}
  for p in paths:
    split["val" if "val" in os.path.basename(p).lower() else "train"].append(p)
  for name, found in split.items():
    if not found:
      raise errors.DataError(
          f"data.shards={spec!r} has no {name} shard among its {len(paths)} .bin file(s); a "
          f"file whose name holds 'val' is a validation shard, every other one trains")
  return split
