"""Token shards on disk: llm.c's format, written once by ``prepare`` and memory-mapped by
the loader.

A shard is a 256-int32 header (magic 20240520, version 1, token count), then the tokens as
uint16, little-endian.
"""

from __future__ import annotations

import os

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
  if tokens.size and (tokens.min() < 0 or tokens.max() >= 65536):
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
