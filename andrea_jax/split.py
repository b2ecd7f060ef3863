"""The train/validation split of a preparation (``docs/corpus.md``, step 2): a document's
text cut at line breaks into blocks, each held out by a keyed hash of its text and
``data.split_seed`` until the validation side is full, and a document's consecutive blocks on
one side joined into ``Run``s, in order; and the checks on what a split holds (neither side
empty, one batch's room on the training side).
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import TYPE_CHECKING, Iterator

from andrea_jax import corpus
from andrea_jax import errors

if TYPE_CHECKING:  # for the annotations alone: preparing data needs no JAX
  from andrea_jax.config import DataConfig, RunConfig

# The split's unit: a document longer than this many characters is cut at line breaks ...
SPLIT_BLOCK_CHARS = 8192
# ... or, in a small corpus, than its size over this (at least SPLIT_MIN_CHARS): a corpus of
# a few files still holds out about data.val_fraction, in about this many blocks.
SPLIT_MIN_BLOCKS = 256
SPLIT_MIN_CHARS = 64
# A run (a document's consecutive blocks on one side, encoded at once) ends after the block
# that takes it past this many characters: a long document is encoded a bounded run at a time.
RUN_CHARS = 1 << 20
SIDES = ("train", "val")


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


def keyed_unit(raw: bytes, key: bytes) -> float:
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
    side = "val" if (keyed_unit(raw, self.key) < self.fraction
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


def runs(source: corpus.Source, data: DataConfig, splitter: Splitter, bar=None) -> Iterator[Run]:
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


def check_split(splitter: Splitter, source) -> None:
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


def batch_may_fit(config: RunConfig, splitter: Splitter) -> bool:
  """Whether one batch, and one window on the validation side, may fit the split whatever
  the tokenizer: a token is at least one byte, plus one EOT per document. Where not, the
  split is smaller than one batch, and its exact token counts (cheap at that size) say which
  settings fit (``tokenizer_sample``, ``loader.check_fits``)."""
  t, m = config.train, config.model
  most = {side: splitter.bytes[side] + splitter.docs[side] for side in SIDES}
  return t.batch_size * (m.block_size + 1) <= most["train"] and m.block_size < most["val"]
