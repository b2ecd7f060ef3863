"""Preparing a corpus for training: the split, the tokenizer, the token shards and their
cache (``prepare(config)``), streamed: memory does not grow with the corpus.

Pipeline (``docs/corpus.md``):

1. The source (``corpus.py``) is named by a fingerprint that reads little of it (each
   file's path, size and a sample of its bytes); it keys the cache directory
   ``data.cache_dir/<key>/``. A complete directory (``manifest.json``) is reused at once.
2. The split, per block without a global pass: documents are cut at line breaks into
   blocks of about ``SPLIT_BLOCK_CHARS``; a block is held out when a keyed hash of its
   text and ``data.split_seed`` falls below ``data.val_fraction``, until the validation
   side holds ``data.val_max_bytes``. Most web documents are one block, so this is the
   per-document hash split; a long file is split inside. Consecutive blocks of a document
   on one side form a run, and each side's stream is ``EOT run EOT run ...``.
3. The tokenizer trains on a seeded sample of the training runs, at most
   ``data.tokenizer_sample_bytes`` (or loads ``data.tokenizer_path``).
4. Encoding: a reader thread reads and splits, batches are encoded on every core (the
   tokenizer's own threads, or ``data.workers`` processes), and fixed-size llm.c shards
   (``data.shard_tokens``) are written as they fill. ``progress.json`` records the whole
   shards and where in the stream they end: an interrupted preparation (Ctrl-C, SIGTERM,
   a kill) resumes after its last whole shard. ``manifest.json``, written last, lists
   every shard with its token count and sha256.

The batch order is ``data.shuffle_seed``'s (``loader.py``), outside the cache key: runs that
differ only in it share one tokenizer and one validation set.

This module runs the pipeline (``prepare``) and finds a run's recorded data again
(``reuse_recorded``); each step lives in the module of its job, and the names callers use
are re-exported here:

- ``andrea_jax/split.py``: the split (step 2): blocks, their sides, the runs; the checks on
  what a split holds.
- ``andrea_jax/tokenizer_sample.py``: the tokenizer (step 3): resumed, given, or trained on
  the sample of the training runs.
- ``andrea_jax/encode.py``: the encoding into shards and its resume (step 4).
- ``andrea_jax/prepared.py``: ``PreparedData``, the cache key, ``manifest.json`` written and
  read back, shards prepared elsewhere (``data.shards``) and ``opening_words``.
"""

from __future__ import annotations

import os
import shutil
from typing import TYPE_CHECKING

from andrea_jax import corpus
from andrea_jax import encode as encode_lib
from andrea_jax import errors
from andrea_jax import prepared as prepared_lib
from andrea_jax import signals as signals_lib
from andrea_jax import tokenizer as tokenizer_lib
from andrea_jax import tokenizer_sample
from andrea_jax.progress import say
# The names callers use from here, re-exported from their homes.
from andrea_jax.prepared import (PreparedData, cache_key, existing_shards,  # noqa: F401
                                 load_prepared, opening_words)
from andrea_jax.split import SPLIT_BLOCK_CHARS, Splitter, blocks, split_block_chars  # noqa: F401
from andrea_jax.tokenizer_sample import sample_runs  # noqa: F401

if TYPE_CHECKING:  # for the annotations alone: preparing data needs no JAX
  from andrea_jax.config import RunConfig


def _check_vocab(config: RunConfig) -> int:
  vocab_size = config.data.vocab_size
  if config.model.vocab_size != vocab_size:
    raise errors.DataError(f"data.vocab_size={vocab_size} but model.vocab_size="
                           f"{config.model.vocab_size}; set both to the same value")
  tokenizer_lib.check_vocab_size(vocab_size)
  return vocab_size


def prepare(config: RunConfig, fit_vocab: bool = False, check=None) -> PreparedData:
  """Tokenizer and train/val shards for ``config``, from the cache when they are there.

  With ``fit_vocab``, a corpus too small to learn ``vocab_size`` tokens gets the
  vocabulary it fills instead of an error (``PreparedData.vocab_size`` says which); the
  cache is then keyed by that size. ``check(fingerprint)``, when given, is called before
  any text is read past the fingerprint (a run refuses other text than it trained on:
  ``resume.check_same_data``). An error leaves no new cache directory; an interrupt keeps
  every whole shard for the rerun to resume from.
  """
  data = config.data
  vocab_size = _check_vocab(config)
  if data.shards:
    return prepared_lib.existing_shards(data, vocab_size, check)
  source = corpus.source_of(data)
  fp = corpus.source_fingerprint(source, data)
  if check is not None:
    check(fp)
  directory = os.path.join(data.cache_dir, prepared_lib.cache_key(fp, data))
  cached = prepared_lib.load_prepared(directory)
  if cached is not None:
    return cached
  prepared_lib.make_directory(data.cache_dir)  # fail before the work
  size = f"{source.total_bytes / 1e6:,.1f} MB" if source.total_bytes else "size unknown"
  say(f"data: preparing {source.name} ({size}) at vocabulary {vocab_size}; the result is "
      f"cached in {data.cache_dir}")
  where = [directory]
  try:
    tok, sample = tokenizer_sample.load_or_train(directory, config, source, fit_vocab)
    fitted = tok.get_vocab_size(with_added_tokens=True)
    if fitted != vocab_size:
      say(f"data: this corpus fills a vocabulary of {fitted} tokens, not model.vocab_size="
          f"{vocab_size} ({fitted - 1 - tokenizer_lib.N_BYTES} merges); using {fitted}")
      where.append(os.path.join(data.cache_dir, prepared_lib.cache_key(fp, data, fitted)))
      cached = prepared_lib.load_prepared(where[-1])
      if cached is not None:
        return cached
      tokenizer_sample.move_tokenizer(directory, where[-1])
    return encode_lib.encode(where[-1], data, source, fp, tok, sample)
  except BaseException as e:
    if not isinstance(e, (signals_lib.Interrupted, KeyboardInterrupt)):
      _clean_up(where)
    raise
  finally:
    if len(where) > 1:
      shutil.rmtree(directory, ignore_errors=True)


def _clean_up(directories: list[str]) -> None:
  """After an error: a cache directory that holds no whole shard yet is removed (nothing
  to resume); one with shards is kept for the rerun (a full disk loses no hour of work)."""
  for d in directories:
    if not os.path.exists(os.path.join(d, "progress.json")):
      shutil.rmtree(d, ignore_errors=True)


def reuse_recorded(config: RunConfig, record: dict, fit_vocab: bool = False, check=None,
                   verbose: bool = True) -> PreparedData:
  """The prepared data a run recorded (its workdir's ``data.json``: a ``PreparedData``'s
  fields, paths absolute), read where it lies, or in a directory of the same name under
  ``data.cache_dir`` (a cache moved since): nothing is prepared, from any directory.

  A source that can still be read is fingerprinted first, for ``check`` (other text than
  the run trained on is refused, as in ``prepare``). Data gone from both places is prepared
  again from its source, with a note (``verbose``); when the source cannot be read either,
  one ``DataError`` names what is missing and the fixes.
  """
  try:
    source, unreadable = corpus.source_of(config.data), None
  except errors.DataNotFoundError as e:  # moved or deleted: the recorded shards still serve
    source, unreadable = None, e
  if source is not None and check is not None:
    check(corpus.source_fingerprint(source, config.data))
  directory = record.get("directory") or ""
  for d in dict.fromkeys([directory, os.path.join(config.data.cache_dir,
                                                  os.path.basename(directory))]):
    found = prepared_lib.load_prepared(d) if d else None
    if found is not None and found.fingerprint == record.get("fingerprint"):
      return found
  paths = [os.path.join(directory, "manifest.json"), record.get("tokenizer_path"),
           *record.get("train_paths", ()), *record.get("val_paths", ())]
  missing = next((p for p in paths if p and not os.path.isfile(p)), None)
  gone = (f"the prepared data this run recorded, {directory}, is gone ("
          f"{f'no {missing}' if missing else 'its shards no longer match its manifest.json'})")
  if unreadable is not None:
    raise errors.DataError(
        f"{gone}, and its source cannot be read either ({unreadable}): restore that directory, "
        f"pass --config.data.cache_dir=<the directory that now holds "
        f"{os.path.basename(directory)}/>, or restore the source")
  if verbose:
    say(f"data: {gone}; preparing it again from its source into data.cache_dir="
        f"{config.data.cache_dir!r}")
  return prepare(config, fit_vocab, check=check)
