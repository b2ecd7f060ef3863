"""Where the documents come from: the built-in corpus, or the user's files (``data.path``).

``documents(config.data)`` returns the documents of ``data.path`` when it is set, else
of the built-in corpus; ``fingerprint`` names a list of documents by its content.

User formats (``path_documents``): a text file (any name), a glob (``docs/**/*.txt``), a
directory of files (recursive, those ending in ``data.extensions``, or every file but
hidden ones with ``data.extensions="*"``, in path order) or a ``.jsonl`` file of
``{"text": ...}`` objects; a text file may hold several documents split by ``data.doc_separator``. Files
must be UTF-8 (``data.utf8_errors='replace'`` to accept others). Empty documents are
dropped (they would only add an EOT).

This module names a source (``source_of``, ``sniff``), chains its documents in order
(``pieces``, ``documents``) and fingerprints it (``source_fingerprint``, ``fingerprint``);
the rest lives in the module of its job, and the names callers use are re-exported here:

- ``andrea_jax/builtin_corpus.py``: the built-in corpus and its rule (the stdlib's pydoc
  topics and ``.py`` files, generated tables left out).
- ``andrea_jax/file_formats.py``: the files of a path, glob, folder or saved dataset, and
  each file's format told by its first bytes, refusing what is not read.
- ``andrea_jax/readers.py``: each format's documents, read in pieces (text, JSONL, a JSON
  array, gzip or zstd; Parquet, Arrow; a Hugging Face dataset).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from typing import TYPE_CHECKING, Iterator, Sequence

from andrea_jax import builtin_corpus
from andrea_jax import errors
from andrea_jax import file_formats
from andrea_jax import readers
# The names callers use from here, re-exported from their homes.
from andrea_jax.builtin_corpus import (builtin_corpus_summary, builtin_documents,  # noqa: F401
                                       builtin_source_files, is_generated_table)
from andrea_jax.file_formats import ACCEPTED, EXTENSIONS, list_files  # noqa: F401

if TYPE_CHECKING:  # for the annotations alone: reading text needs no JAX
  from andrea_jax.config import DataConfig


@dataclasses.dataclass(frozen=True)
class Source:
  """Where the documents come from: files in order, a ``datasets`` dataset, or the built-in corpus."""
  name: str  # for messages: "data.path='...'", "data.hf_dataset='...'", "the built-in corpus"
  files: tuple[str, ...] = ()
  # Bytes on disk (compressed as they are): progress is counted in them, and nothing else
  # (tokens are a function of the documents alone).
  total_bytes: int = 0


def source_of(data: DataConfig) -> Source:
  """The documents' ``Source`` for ``data``: files listed and each one's format told by its
  first bytes (``file_format``, which refuses what it does not read), no text read yet."""
  if data.utf8_errors not in ("error", "replace"):
    raise errors.DataError(f"data.utf8_errors={data.utf8_errors!r}; expected 'error' or 'replace'")
  if data.hf_dataset and data.path:
    raise errors.DataError(f"both data.path={data.path!r} and data.hf_dataset="
                           f"{data.hf_dataset!r} are set; keep one of them")
  if data.hf_dataset:
    return Source(f"data.hf_dataset={data.hf_dataset!r}")
  if not data.path:  # its size: the progress bars' total
    return Source("the built-in corpus", total_bytes=sum(
        len(d.encode("utf-8")) for d in builtin_corpus.builtin_documents(data.max_docs)))
  found = tuple(map(str, file_formats.list_files(data.path, data.extensions, data.hf_split)))
  for path in found:
    file_formats.file_format(path)
  source = Source(f"data.path={data.path!r}", found, sum(map(os.path.getsize, found)))
  if not source.total_bytes:
    what = (f"{found[0]} is an empty file" if len(found) == 1 else
            f"every one of the {len(found)} files of {source.name} ({found[0]}, ...) is empty")
    raise errors.DataError(f"{what} (0 bytes), which holds no documents; accepted: {file_formats.ACCEPTED}")
  return source


def sniff(data: DataConfig) -> None:
  """Refuse, before anything runs, a ``data.path`` whose files are in a format we do not
  read or empty (``source_of``). A path that does not exist is left to the preparation: a
  resumed run's recorded shards serve without it."""
  try:
    source_of(data)
  except errors.DataNotFoundError:
    pass


def pieces(source: Source, data: DataConfig, progress=None) -> Iterator[tuple[str, bool]]:
  """The documents of ``source`` as ``(text, starts_document)`` pieces, in a fixed order.

  Most documents are one piece; a document longer than ``readers.PIECE_CHARS`` (a large text file)
  comes in pieces cut at line breaks, so nothing holds more than a piece of it. Empty
  documents are dropped. ``progress(n)`` is told each ``n`` bytes of the source read.
  """
  progress = progress or (lambda n: None)
  if source.files:
    for path in source.files:
      yield from readers.file_pieces(path, data, progress)
  elif data.hf_dataset:
    yield from readers.hf_pieces(data, progress)
  else:
    for doc in builtin_corpus.builtin_documents(data.max_docs):
      yield doc, True
      progress(len(doc.encode("utf-8")))


def documents(data: DataConfig) -> Iterator[str]:
  """Whole documents of ``data``'s source (pieces joined): for tests and small corpora."""
  source, doc = source_of(data), None
  for text, new in pieces(source, data):
    if new and doc is not None:
      yield doc
    doc = text if new else doc + text
  if doc is None:
    raise no_documents(source)
  yield doc


def no_documents(source: Source) -> errors.DataError:
  return errors.DataError(f"{source.name} has no non-empty documents; add text or point "
                          f"data.path elsewhere")


def source_fingerprint(source: Source, data: DataConfig) -> str:
  """A name for the source's content that reads little of it: for files, each file's
  path, size and a sample of its bytes (all of a file up to 1 MB, else its first, middle
  and last MB); for the built-in corpus, every document (``fingerprint``); for a hub
  dataset, its name, config and split."""
  h = hashlib.sha256()
  if source.files:
    root = os.path.commonpath([os.path.abspath(f) for f in source.files])
    for path in source.files:
      rel = os.path.relpath(os.path.abspath(path), root if len(source.files) > 1 else
                            os.path.dirname(os.path.abspath(path)))
      size = os.path.getsize(path)
      h.update(f"{rel}\0{size}\0".encode())
      with open(path, "rb") as f:
        for at in ([0] if size <= SAMPLE_BYTES else [0, size // 2, size - SAMPLE_BYTES]):
          f.seek(at)
          h.update(f.read(SAMPLE_BYTES))
    return h.hexdigest()
  if data.hf_dataset:
    if os.path.exists(data.hf_dataset):
      local = Source("", tuple(str(p) for p in file_formats.list_files(data.hf_dataset, "*")))
      return source_fingerprint(local, data)
    h.update(json.dumps([data.hf_dataset, data.hf_config, data.hf_split]).encode())
    return h.hexdigest()
  return fingerprint(builtin_corpus.builtin_documents(data.max_docs))


# A file's bytes that its fingerprint reads: all of a small file, three samples of a large one.
SAMPLE_BYTES = 1 << 20


def fingerprint(docs: Sequence[str]) -> str:
  """sha256 over the documents in order (length-prefixed, so boundaries count)."""
  h = hashlib.sha256()
  for d in docs:
    b = d.encode("utf-8")
    h.update(len(b).to_bytes(8, "little"))
    h.update(b)
  return h.hexdigest()
