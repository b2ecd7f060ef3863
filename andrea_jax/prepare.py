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
"""

from __future__ import annotations

import dataclasses
import hashlib
import heapq
import itertools
import json
import multiprocessing
import os
import queue
import re
import shutil
import signal
import threading
from typing import TYPE_CHECKING, Iterator

import numpy as np

from andrea_jax import corpus
from andrea_jax import errors
from andrea_jax import files
from andrea_jax import loader as loader_lib
from andrea_jax import progress as progress_lib
from andrea_jax import shards
from andrea_jax import signals as signals_lib
from andrea_jax import tokenizer as tokenizer_lib

if TYPE_CHECKING:  # for the annotations alone: preparing data needs no JAX
  from andrea_jax.config import DataConfig, RunConfig

# Bump when the shard contents or cache layout change, so old caches are not reused.
# 2: generated tables left out of the built-in corpus, split by bytes, split_seed.
# 3: streamed: the block hash split, sampled tokenizer, fixed-size shards, manifest.json.
# 4: tokens a function of the documents alone: the block size from the text's bytes, blocks cut
#    across a document's pieces, the tokenizer's sample the training runs of lowest hash.
CACHE_FORMAT = 4
# The split's unit: a document longer than this many characters is cut at line breaks ...
SPLIT_BLOCK_CHARS = 8192
# ... or, in a small corpus, than its size over this (at least SPLIT_MIN_CHARS): a corpus of
# a few files still holds out about data.val_fraction, in about this many blocks.
SPLIT_MIN_BLOCKS = 256
SPLIT_MIN_CHARS = 64
# A run (a document's consecutive blocks on one side, encoded at once) ends after the block
# that takes it past this many characters: a long document is encoded a bounded run at a time.
RUN_CHARS = 1 << 20
# Characters of text sent to the tokenizer at once (a batch's runs).
ENCODE_BATCH_CHARS = 4 << 20
# Batches read ahead of the encoder.
READ_AHEAD = 4
SIDES = ("train", "val")


# ----------------------------------------------------------------------------- the split


def block_chars(total_bytes: int) -> int:
  """The split's block size for a source of ``total_bytes`` (0: unknown, the largest)."""
  if not total_bytes:
    return SPLIT_BLOCK_CHARS
  return int(min(SPLIT_BLOCK_CHARS, max(SPLIT_MIN_CHARS, total_bytes // SPLIT_MIN_BLOCKS)))


def blocks(text: str, size: int = SPLIT_BLOCK_CHARS) -> list[str]:
  """``text`` cut into blocks of about ``size`` characters, each ending at a line break
  (a block with no line break within ``2 * size`` is cut at ``size``)."""
  if len(text) <= size:
    return [text]
  out, at = [], 0
  while len(text) - at > size:
    cut = text.find("\n", at + size, at + 2 * size) + 1 or at + size
    out.append(text[at:cut])
    at = cut
  if at < len(text):
    out.append(text[at:])
  return out


def _unit(raw: bytes, key: bytes) -> float:
  """A keyed hash of ``raw`` as a number uniform in [0, 1)."""
  digest = hashlib.blake2b(raw, digest_size=8, key=key).digest()
  return int.from_bytes(digest, "little") / 2.0**64


@dataclasses.dataclass
class Run:
  """Consecutive blocks of one document on one side: encoded together."""
  side: str  # "train" or "val"
  text: str
  starts: bool  # an EOT comes before it: a document begins on this side
  index: int = -1  # its number among its side's runs (the resume position counts them)


class Splitter:
  """Turns a stream of ``(text, starts_document)`` pieces into ``Run``s, in order, counting.

  Every decision is a function of the documents and the settings alone, never of how they
  were stored: a document's blocks are cut across the pieces it arrives in (a text file's
  pieces, a JSONL line), so the blocks, their sides and the runs are the same whether it
  came whole or in pieces; a run is cut after ``RUN_CHARS`` at a block's end. A rerun (a
  resume) makes the same runs.
  """

  def __init__(self, data: DataConfig, block_chars: int = SPLIT_BLOCK_CHARS):
    self.block_chars = block_chars
    if not 0.0 < data.val_fraction < 1.0:
      raise errors.DataError(f"data.val_fraction={data.val_fraction}; expected a fraction "
                             f"strictly between 0 and 1, e.g. 0.05")
    self.fraction, self.cap = data.val_fraction, data.val_max_bytes
    self.key = f"andrea-split-{data.split_seed}".encode()
    self.content = hashlib.sha256()  # of every block, with document starts marked
    self.bytes = {side: 0 for side in SIDES}
    self.runs = {side: 0 for side in SIDES}
    self.docs = {side: 0 for side in SIDES}
    self._side = None  # the side of the current document's last block
    self._carry = ""  # the current document's text not yet cut into blocks
    self._run: Run | None = None  # the open run: its blocks in ``_parts``
    self._parts: list[str] = []
    self._chars = 0

  def split(self, pieces: Iterator[tuple[str, bool]]) -> Iterator[Run]:
    """The runs of ``pieces`` (``corpus.pieces``), the last one when the stream ends."""
    for text, new_doc in pieces:
      if new_doc:
        yield from self._end_document()
        self.content.update(b"\x00doc\x00")
      self._carry += text
      # A block's cut is known once 2 * block_chars of text follow its start (``blocks``).
      size, at, cuts = self.block_chars, 0, []
      while len(self._carry) - at >= 2 * size:
        cut = self._carry.find("\n", at + size, at + 2 * size) + 1 or at + size
        cuts.append(self._carry[at:cut])
        at = cut
      self._carry = self._carry[at:]
      for block in cuts:
        yield from self._block(block)
    yield from self._end_document()

  def _end_document(self) -> Iterator[Run]:
    for block in blocks(self._carry, self.block_chars) if self._carry else ():
      yield from self._block(block)
    self._carry, self._side = "", None
    yield from self._close()

  def _block(self, block: str) -> Iterator[Run]:
    raw = block.encode("utf-8")
    self.content.update(raw)
    side = "val" if (_unit(raw, self.key) < self.fraction
                     and self.bytes["val"] + len(raw) <= self.cap) else "train"
    self.bytes[side] += len(raw)
    if self._run is None or side != self._run.side or self._chars >= RUN_CHARS:
      yield from self._close()
      starts = side != self._side
      self._run = Run(side, "", starts, self.runs[side])
      self.runs[side] += 1
      self.docs[side] += starts
    self._parts.append(block)
    self._chars += len(block)
    self._side = side

  def _close(self) -> Iterator[Run]:
    if self._run is not None:
      self._run.text = "".join(self._parts)
      yield self._run
    self._run, self._parts, self._chars = None, [], 0


def _runs(source: corpus.Source, data: DataConfig, splitter: Splitter, bar=None) -> Iterator[Run]:
  return splitter.split(corpus.pieces(source, data, bar.update if bar else None))


def split_block_chars(source: corpus.Source, data: DataConfig) -> int:
  """The split's block size for ``source``, from the UTF-8 bytes of its documents (not its
  size on disk, which compression and JSON change): it reads at most the first
  ``SPLIT_BLOCK_CHARS * SPLIT_MIN_BLOCKS`` bytes of text, past which the size is the largest."""
  seen = 0
  for text, _ in corpus.pieces(source, data):
    seen += len(text.encode("utf-8"))
    if seen >= SPLIT_BLOCK_CHARS * SPLIT_MIN_BLOCKS:
      return SPLIT_BLOCK_CHARS
  return block_chars(seen)


# ----------------------------------------------------------------------------- the result


@dataclasses.dataclass(frozen=True)
class PreparedData:
  """Prepared data: a tokenizer and token shards (train and validation) with their counts."""
  directory: str
  train_paths: tuple[str, ...]
  val_paths: tuple[str, ...]
  tokenizer_path: str
  fingerprint: str
  train_tokens: int
  val_tokens: int
  # Documents on each side (a document split by a held-out block counts on both); None
  # for shards prepared elsewhere (data.shards), whose documents are not counted.
  train_docs: int | None
  val_docs: int | None
  # Share held out, in UTF-8 bytes (None for data.shards) and in tokens.
  val_share_bytes: float | None
  val_share_tokens: float
  vocab_size: int
  eot_id: int
  # True when the cache was complete and nothing was trained or encoded.
  reused: bool

  def stream(self, side: str) -> shards.TokenStream:
    """The ``"train"`` or ``"val"`` shards as one token stream."""
    return shards.TokenStream(self.train_paths if side == "train" else self.val_paths)


def cache_key(fingerprint: str, data: DataConfig, vocab_size: int | None = None) -> str:
  """Hash of everything that determines the cached files (``vocab_size``: a fitted one)."""
  if data.tokenizer_path:
    tokenizer_lib.check_file(data.tokenizer_path, "data.tokenizer_path",
                             "point it at a tokenizer.json or leave it empty to train one")
  source = files.sha256(data.tokenizer_path) if data.tokenizer_path else "trained"
  # data.shuffle_seed is left out on purpose: the batch order does not touch these files.
  spec = dict(format=CACHE_FORMAT, corpus=fingerprint, vocab_size=vocab_size or data.vocab_size,
              val_fraction=data.val_fraction, split_seed=data.split_seed, tokenizer=source,
              val_max_bytes=data.val_max_bytes, shard_tokens=data.shard_tokens,
              sample_bytes=data.tokenizer_sample_bytes, text_field=data.text_field,
              read=[data.extensions, data.doc_separator, data.utf8_errors, data.max_docs])
  return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:20]


def _check_vocab(config: RunConfig) -> int:
  vocab_size = config.data.vocab_size
  if config.model.vocab_size != vocab_size:
    raise errors.DataError(f"data.vocab_size={vocab_size} but model.vocab_size="
                           f"{config.model.vocab_size}; set both to the same value")
  tokenizer_lib.check_vocab_size(vocab_size)
  return vocab_size


def say(message: str) -> None:
  """A progress line on stdout, flushed: a log that is not a terminal shows it at once."""
  print(message, flush=True)


# ----------------------------------------------------------------------------- prepare


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
    return existing_shards(data, vocab_size, check)
  source = corpus.source_of(data)
  fp = corpus.source_fingerprint(source, data)
  if check is not None:
    check(fp)
  directory = os.path.join(data.cache_dir, cache_key(fp, data))
  cached = load_prepared(directory)
  if cached is not None:
    return cached
  _make_directory(data.cache_dir)  # fail before the work
  size = f"{source.total_bytes / 1e6:,.1f} MB" if source.total_bytes else "size unknown"
  say(f"data: preparing {source.name} ({size}) at vocabulary {vocab_size}; the result is "
      f"cached in {data.cache_dir}")
  where = [directory]
  try:
    tok, sample = _tokenizer(directory, config, source, fit_vocab)
    fitted = tok.get_vocab_size(with_added_tokens=True)
    if fitted != vocab_size:
      say(f"data: this corpus fills a vocabulary of {fitted} tokens, not model.vocab_size="
          f"{vocab_size} ({fitted - 1 - tokenizer_lib.N_BYTES} merges); using {fitted}")
      where.append(os.path.join(data.cache_dir, cache_key(fp, data, fitted)))
      cached = load_prepared(where[-1])
      if cached is not None:
        return cached
      _move_tokenizer(directory, where[-1])
    return _encode(where[-1], data, source, fp, tok, sample)
  except BaseException as e:
    if not isinstance(e, (signals_lib.Interrupted, KeyboardInterrupt)):
      _clean_up(where)
    raise
  finally:
    if len(where) > 1:
      shutil.rmtree(directory, ignore_errors=True)


def _move_tokenizer(directory: str, to: str) -> None:
  """The fitted tokenizer's files, to the directory keyed by its size."""
  os.makedirs(to, exist_ok=True)
  for name in ("tokenizer.json", "sample.json"):
    os.replace(os.path.join(directory, name), os.path.join(to, name))


def _clean_up(directories: list[str]) -> None:
  """After an error: a cache directory that holds no whole shard yet is removed (nothing
  to resume); one with shards is kept for the rerun (a full disk loses no hour of work)."""
  for d in directories:
    if not os.path.exists(os.path.join(d, "progress.json")):
      shutil.rmtree(d, ignore_errors=True)


def _make_directory(directory: str) -> None:
  """``directory`` (``data.cache_dir`` or an entry of it) made, or one line naming it."""
  files.make_directory(directory, "data.cache_dir", "for the prepared data "
                       "(--config.data.cache_dir=...)", errors.DataError)


# ----------------------------------------------------------------------------- the tokenizer


def _tokenizer(directory: str, config: RunConfig, source, fit: bool):
  """``(tokenizer, sample record)``: the one an interrupted preparation saved, the given
  ``data.tokenizer_path``, or one trained on a seeded sample of the training runs."""
  data, vocab_size = config.data, config.data.vocab_size
  path = os.path.join(directory, "tokenizer.json")
  saved = files.read_json(os.path.join(directory, "sample.json"))
  if saved is not None and os.path.isfile(path):
    say(f"data: resuming in {directory} with its tokenizer")
    return tokenizer_lib.load(path, saved["vocab_size"]), saved
  if data.tokenizer_path:
    tok = tokenizer_lib.load(data.tokenizer_path, vocab_size)
    sample = {"bytes": 0, "block_chars": split_block_chars(source, data)}
  else:
    tok, sample = _train_on_sample(config, source, fit)
  _make_directory(directory)
  tokenizer_lib.save(tok, path)
  sample["vocab_size"] = tok.get_vocab_size(with_added_tokens=True)
  files.write_json(os.path.join(directory, "sample.json"), sample)
  return tokenizer_lib.load(path, sample["vocab_size"]), sample


def _train_on_sample(config: RunConfig, source, fit: bool):
  """A tokenizer trained on the training runs of lowest keyed hash that fill
  ``data.tokenizer_sample_bytes`` (all of a small corpus's training split)."""
  data, limit = config.data, config.data.tokenizer_sample_bytes
  if limit < 1:
    raise errors.DataError(f"data.tokenizer_sample_bytes={limit}; expected a positive size, "
                           f"e.g. 200_000_000")
  sample = {"limit": limit, "block_chars": split_block_chars(source, data)}
  splitter = Splitter(data, sample["block_chars"])
  with progress_lib.Progress("sampling text for the tokenizer", source.total_bytes) as bar:
    kept = sample_runs(_runs(source, data, splitter, bar), f"andrea-sample-{data.split_seed}"
                       .encode(), limit)
  _check_batch_bound(config, splitter)
  _check_split(splitter, source)
  sample.update(bytes=sum(len(raw) for _, raw in kept), runs=len(kept),
                complete=len(kept) == splitter.runs["train"])  # the whole training split
  say(f"data: training a byte-level BPE tokenizer of {data.vocab_size} tokens on a sample of "
      f"the training split ({sample['bytes'] / 1e6:,.1f} MB, at most "
      f"data.tokenizer_sample_bytes={limit:,})")
  signals_lib.set_phase("training the tokenizer")
  texts = (raw.decode("utf-8") for _, raw in kept)  # in the stream's order
  tok = tokenizer_lib.train_tokenizer(texts, data.vocab_size, show_progress=False, fit=fit)
  signals_lib.check()
  return tok, sample


def sample_runs(runs: Iterator[Run], key: bytes, limit: int) -> list[tuple[int, bytes]]:
  """``(index, UTF-8 text)`` of the training runs whose keyed hashes are the lowest, as many as
  fill ``limit`` bytes (the one that crosses it included), in the stream's order.

  A bottom-k sample (by bytes): which runs it holds is a function of the runs' texts alone,
  not of the corpus's size on disk or where in the stream they come; it holds at most
  ``limit`` bytes and one run, whatever the corpus's size.
  """
  heap: list[tuple[float, int, bytes]] = []  # (-hash, -index, text): the highest hash on top
  held = 0
  for run in runs:
    signals_lib.check()
    if run.side != "train":
      continue
    raw = run.text.encode("utf-8")
    unit = _unit(raw, key)
    if held >= limit and unit > -heap[0][0]:
      continue  # above every kept run's hash, with the sample full: never kept
    heapq.heappush(heap, (-unit, -run.index, raw))
    held += len(raw)
    while held - len(heap[0][2]) >= limit:  # the sample stays full without its highest
      held -= len(heapq.heappop(heap)[2])
  return sorted((-index, raw) for _, index, raw in heap)


def _check_split(splitter: Splitter, source) -> None:
  if not sum(splitter.bytes.values()):
    raise corpus.no_documents(source)
  if not splitter.runs["train"] or not splitter.runs["val"]:
    total = sum(splitter.bytes.values())
    raise errors.DataError(
        f"{source.name} ({total:,} bytes) left the "
        f"{'training' if not splitter.runs['train'] else 'validation'} side empty: held out by "
        f"blocks of about {splitter.block_chars:,} characters, it is too small to hold out "
        f"data.val_fraction={splitter.fraction} and keep text to train on; add text, or change "
        f"data.val_fraction or data.split_seed")


def _check_batch_bound(config: RunConfig, splitter: Splitter) -> None:
  """Refuse a batch that cannot fit the training split whatever the tokenizer: a token is
  at least one byte, plus one EOT per document (``loader.check_batch_fits`` checks the
  exact count once the split is encoded)."""
  t, m = config.train, config.model
  docs = splitter.docs["train"]
  most = splitter.bytes["train"] + docs
  need = t.batch_size * (m.block_size + 1)
  if need > most:
    fits = most // (m.block_size + 1)  # windows of this block size the split can hold
    # The field that can fix it: the batch size while a smaller one fits, else the block size.
    fix = (f"use a train.batch_size of at most {fits} (or a smaller model.block_size)" if fits
           else f"use a model.block_size of at most {max(most // t.batch_size - 1, 1)}")
    raise errors.DataError(
        f"one batch of train.batch_size={t.batch_size} window{'s' * (t.batch_size != 1)} of "
        f"block_size + 1 = {m.block_size + 1} tokens is {need:,} tokens, more than the training "
        f"split can hold (at most {most:,} tokens: {docs:,} document{'s' * (docs != 1)}, a token "
        f"is at least a byte); {fix}, or more data")


# ----------------------------------------------------------------------------- encoding


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


def _batches(runs: Iterator[Run], wanted) -> Iterator[tuple[list[Run], list[str]]]:
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


def _encode(directory: str, data: DataConfig, source, fp: str, tok, sample: dict) -> PreparedData:
  """Encode the corpus into shards in ``directory``, resuming from ``progress.json``."""
  path = os.path.join(directory, "progress.json")
  done = _Progress(**(files.read_json(path) or {"train": []}))
  if not all(_whole(directory, s) for s in done.train):  # a damaged shard: from the start
    say(f"data: a shard listed in {path} is damaged or missing; encoding from the start")
    done = _Progress([])
  if done.train:
    say(f"data: resuming after {len(done.train)} whole train shard(s), "
        f"{sum(s['tokens'] for s in done.train):,} tokens")
  writers = {"train": shards.ShardWriter(directory, "train", data.shard_tokens, done.train),
             "val": shards.ShardWriter(directory, "val", data.shard_tokens)}
  eot = np.array([tokenizer_lib.eot_id(tok)], dtype=np.uint16)
  splitter = Splitter(data, sample["block_chars"])
  skip = lambda run: run.side == "train" and run.index < done.run  # whole shards hold it
  say(f"data: encoding {source.name} into shards of {data.shard_tokens:,} tokens"
      f"{f' with {data.workers} worker processes' if data.workers > 0 else ''}")
  signals_lib.set_phase("encoding the corpus")
  with progress_lib.Progress("encoding", source.total_bytes) as bar:
    runs = _runs(source, data, splitter, bar)
    # Reading and splitting in a thread, READ_AHEAD batches ahead: they overlap encoding.
    with loader_lib.Prefetch(_batches(runs, lambda run: not skip(run)), READ_AHEAD,
                             "andrea-prepare-reader") as batches:
      for batch, (ids, lengths) in _encoded(batches, os.path.join(directory, "tokenizer.json"),
                                            tok, data.workers):
        kept = [run for run in batch if not skip(run)]
        for side in SIDES:
          _write_side(writers[side], [(r, i) for i, r in enumerate(kept) if r.side == side],
                      ids, lengths, eot, done if side == "train" else None, path)
        bar.note = f"{len(writers['train'].shards)} train shard(s) written"
        signals_lib.check()
    _check_split(splitter, source)
    for writer in writers.values():
      writer.close()
    bar.note = (f"{len(writers['train'].shards)} train and {len(writers['val'].shards)} "
                f"validation shard(s) written")
  return _finish(directory, data, fp, tok, sample, splitter, writers)


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


def _whole(directory: str, entry: dict) -> bool:
  try:
    return shards.shard_count(os.path.join(directory, entry["file"])) == entry["tokens"]
  except errors.DataError:
    return False


def _finish(directory: str, data: DataConfig, fp: str, tok, sample: dict, splitter: Splitter,
            writers: dict) -> PreparedData:
  """``manifest.json`` (written last: its presence marks a complete directory)."""
  manifest = dict(
      format=CACHE_FORMAT, fingerprint=fp, content_sha256=splitter.content.hexdigest(),
      vocab_size=tok.get_vocab_size(with_added_tokens=True), eot_id=tokenizer_lib.eot_id(tok),
      corpus=data.path or data.hf_dataset or "builtin", max_docs=data.max_docs,
      val_fraction=data.val_fraction, val_max_bytes=data.val_max_bytes,
      split_seed=data.split_seed, split_block_chars=splitter.block_chars,
      shard_tokens=data.shard_tokens, tokenizer_source=data.tokenizer_path or "trained",
      tokenizer_sample=sample)
  for side in SIDES:
    manifest[side] = dict(shards=writers[side].shards, tokens=writers[side].tokens,
                          docs=splitter.docs[side], bytes=splitter.bytes[side])
  total_bytes = sum(splitter.bytes.values())
  total_tokens = writers["train"].tokens + writers["val"].tokens
  manifest.update(val_share_bytes=splitter.bytes["val"] / total_bytes,
                  val_share_tokens=writers["val"].tokens / total_tokens)
  files.write_json(os.path.join(directory, "manifest.json"), manifest)
  if os.path.exists(os.path.join(directory, "progress.json")):
    os.remove(os.path.join(directory, "progress.json"))
  return _prepared(directory, manifest, reused=False)


def _prepared(directory: str, manifest: dict, reused: bool) -> PreparedData:
  paths = {side: tuple(os.path.join(directory, s["file"]) for s in manifest[side]["shards"])
           for side in SIDES}
  return PreparedData(
      directory=directory, train_paths=paths["train"], val_paths=paths["val"],
      tokenizer_path=os.path.join(directory, "tokenizer.json"),
      fingerprint=manifest["fingerprint"], train_tokens=manifest["train"]["tokens"],
      val_tokens=manifest["val"]["tokens"], train_docs=manifest["train"]["docs"],
      val_docs=manifest["val"]["docs"], val_share_bytes=manifest["val_share_bytes"],
      val_share_tokens=manifest["val_share_tokens"], vocab_size=manifest["vocab_size"],
      eot_id=manifest["eot_id"], reused=reused)


def load_prepared(directory: str) -> PreparedData | None:
  """The complete prepared data in ``directory``, or None if it is missing or partial.

  Each shard's header and size are checked against the manifest, not its contents: a
  start reads no token (the manifest's sha256 are there to verify a copy)."""
  path = os.path.join(directory, "manifest.json")
  if not os.path.isfile(path):
    return None
  try:
    manifest = files.read_json(path)
    prepared = _prepared(directory, manifest, reused=True)
    ok = (all(_whole(directory, s) for side in SIDES for s in manifest[side]["shards"])
          and os.path.isfile(prepared.tokenizer_path))
  except (errors.AndreaError, ValueError, KeyError, TypeError):  # unreadable: rebuild
    return None
  return prepared if ok else None


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
    found = load_prepared(d) if d else None
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


# ----------------------------------------------------------------------------- given shards


def existing_shards(data: DataConfig, vocab_size: int, check=None) -> PreparedData:
  """Token shards prepared elsewhere (llm.c, modded-nanogpt: ``data.shards``), with the
  tokenizer they were made with (``data.tokenizer_path``), read where they are."""
  found = shards.find_shards(data.shards)
  if not data.tokenizer_path:
    raise errors.DataError(
        f"data.shards={data.shards!r} needs data.tokenizer_path: the tokenizer.json the shards "
        f"were made with (for llm.c's GPT-2 shards, GPT-2's tokenizer.json, with "
        f"--config.model.vocab_size=50257)")
  tok = tokenizer_lib.load(data.tokenizer_path, vocab_size)
  paths = found["train"] + found["val"]
  fp = corpus.source_fingerprint(corpus.Source(f"data.shards={data.shards!r}", tuple(paths)), data)
  if check is not None:
    check(fp)
  counts = {side: sum(shards.shard_count(p) for p in found[side]) for side in SIDES}
  return PreparedData(
      directory=os.path.dirname(os.path.abspath(paths[0])), train_paths=tuple(found["train"]),
      val_paths=tuple(found["val"]), tokenizer_path=data.tokenizer_path, fingerprint=fp,
      train_tokens=counts["train"], val_tokens=counts["val"], train_docs=None, val_docs=None,
      val_share_bytes=None, val_share_tokens=counts["val"] / sum(counts.values()),
      vocab_size=vocab_size, eot_id=tokenizer_lib.eot_id(tok), reused=True)


def opening_words(prepared: PreparedData, words: int = 5) -> str:
  """The first ``words`` words of the first validation document: a prompt from the data.

  The validation split is held out, so samples from it continue text the model never saw.
  """
  tok = tokenizer_lib.load(prepared.tokenizer_path, prepared.vocab_size)
  val = np.asarray(prepared.stream("val")[:256], dtype=np.int64)
  starts = np.flatnonzero(val != prepared.eot_id)
  ids = val[starts[0]:] if starts.size else val[:0]
  ends = np.flatnonzero(ids == prepared.eot_id)
  text = tokenizer_lib.decode(tok, ids[:ends[0]] if ends.size else ids)
  match = re.match(rf"\s*(\S+(?:[ \t]+\S+){{0,{words - 1}}})", text)
  return match[1] if match else ""
