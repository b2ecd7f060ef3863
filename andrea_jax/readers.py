"""Reading a file's documents, format by format (text, JSONL, a JSON array, each also
gzip- or zstd-compressed; Parquet; Arrow) and a Hugging Face ``datasets`` dataset's, as
``(text, starts_document)`` pieces of a bounded size, counting the bytes read for progress.
``file_formats.py`` tells each file's format; ``corpus.py`` chains the pieces of a source.
"""

from __future__ import annotations

import codecs
import json
import os
from typing import TYPE_CHECKING, Iterator

from andrea_jax import errors
from andrea_jax import file_formats

if TYPE_CHECKING:  # for the annotations alone: reading text needs no JAX
  from andrea_jax.config import DataConfig

# A long text document streams in pieces of about this many characters, cut at a line break.
PIECE_CHARS = 1 << 20
# Rows of a Parquet or Arrow file converted to Python at a time.
ROW_BATCH = 1024
# A .json file holding one array of records is read whole, so only up to this size.
MAX_JSON_ARRAY_BYTES = 256 << 20


def file_pieces(path: str, data: DataConfig, progress) -> Iterator[tuple[str, bool]]:
  fmt = file_formats.file_format(path)
  if fmt.kind in ("parquet", "arrow", "arrow_file"):
    yield from _table_pieces(path, fmt.kind, data.text_field, progress)
    return
  reader = {"text": _text_pieces, "jsonl": _jsonl_pieces, "json_array": _json_array_pieces}
  with file_formats.open_file(path, fmt.compression) as (raw, stream):
    done, count = 0, 0
    try:
      for piece in reader[fmt.kind](stream, path, data):
        yield piece
        count += 1
        if count % 64 == 0:
          done = _advance(raw, done, progress)
    except (OSError, EOFError) as e:
      if isinstance(e, FileNotFoundError):
        raise
      raise errors.DataError(f"{path}: cannot read past byte {raw.tell():,} ({e}); the file "
                             f"is truncated or corrupt: fix or remove it") from None
    _advance(raw, done, progress, os.path.getsize(path))


def _advance(raw, done: int, progress, at: int | None = None) -> int:
  at = raw.tell() if at is None else at
  if at > done:
    progress(at - done)
  return max(at, done)


def _decode(raw: bytes, where: str, utf8_errors: str, offset: int = 0) -> str:
  try:
    # data.utf8_errors "error" is Python's "strict" handler.
    return raw.decode("utf-8", errors="strict" if utf8_errors == "error" else utf8_errors)
  except UnicodeDecodeError as e:
    raise errors.DataError(f"{where}: not valid UTF-8 at byte offset {offset + e.start} "
                           f"({e.reason}); fix the file or set data.utf8_errors='replace'") from None


def _text_pieces(stream, path: str, data: DataConfig) -> Iterator[tuple[str, bool]]:
  """A text file's documents (split at ``data.doc_separator``), in pieces of a bounded size."""
  handler = "strict" if data.utf8_errors == "error" else data.utf8_errors
  decoder = codecs.getincrementaldecoder("utf-8")(handler)
  sep, carry, new, offset = data.doc_separator, "", True, 0
  while True:
    chunk = stream.read(PIECE_CHARS)
    try:
      carry += decoder.decode(chunk, final=not chunk)
    except UnicodeDecodeError as e:  # e.object: bytes held from the last chunk, then chunk
      _decode(e.object, path, "error", offset - (len(e.object) - len(chunk)))
    offset += len(chunk)
    if sep:
      *done, carry = carry.split(sep)
      for part in done:
        if part:
          yield part, new
        new = True
    keep = len(sep)  # a separator may be arriving: its head stays in carry
    while len(carry) > PIECE_CHARS + keep or (not chunk and carry):
      cut = len(carry) if not chunk else carry.rfind("\n", 0, PIECE_CHARS) + 1 or PIECE_CHARS
      yield carry[:cut], new
      carry, new = carry[cut:], False
    if not chunk:
      return


def _jsonl_pieces(stream, path: str, data: DataConfig) -> Iterator[tuple[str, bool]]:
  """One document a line. Lines end at b"\\n" only: U+2028 and U+0085, which JSON may hold
  unescaped inside a string, do not end a line."""
  field = data.text_field
  for number, raw in enumerate(stream, start=1):
    if not raw.strip():
      continue
    line = _decode(raw, f"{path}:{number}", data.utf8_errors)
    try:
      record = json.loads(line)
    except json.JSONDecodeError as e:
      raise errors.DataError(
          f"{path}:{number}: not valid JSON ({e.msg} at column {e.colno}); each line must be "
          f"a JSON object like {{\"{field}\": \"...\"}}") from None
    text = _field(record, field, f"{path}:{number}", line)
    if text:
      yield text, True


def _json_array_pieces(stream, path: str, data: DataConfig) -> Iterator[tuple[str, bool]]:
  size = os.path.getsize(path)
  if size > MAX_JSON_ARRAY_BYTES:
    raise errors.DataError(f"{path} is one JSON array of {size / 1e6:,.0f} MB, which is read "
                           f"whole; write it as JSONL (one object a line) to stream it")
  try:
    records = json.loads(_decode(stream.read(), path, data.utf8_errors))
  except json.JSONDecodeError as e:
    raise errors.DataError(f"{path}: not valid JSON ({e.msg} at line {e.lineno}); fix the "
                           f"file") from None
  field = data.text_field
  for number, record in enumerate(records if isinstance(records, list) else [records]):
    text = _field(record, field, f"{path}[{number}]", json.dumps(record)[:80])
    if text:
      yield text, True


def _field(record, field: str, where: str, shown: str) -> str:
  if not isinstance(record, dict) or not isinstance(record.get(field), str):
    raise errors.DataError(f"{where}: expected a JSON object with a string {field!r} field, "
                           f"found {shown[:80]!r}; add the field, drop the record or set "
                           f"data.text_field")
  _check_encodable(record[field], where, field)
  return record[field]


def _check_encodable(text: str, where: str, field: str = "text") -> None:
  # JSON escapes can smuggle in lone surrogates, which no UTF-8 tokenizer can encode.
  try:
    text.encode("utf-8")
  except UnicodeEncodeError as e:
    raise errors.DataError(f"{where}: {field!r} has a lone surrogate {text[e.start]!r} at "
                           f"character {e.start}, which is not valid Unicode; fix the "
                           f"record") from None


def _table_pieces(path: str, kind: str, field: str, progress) -> Iterator[tuple[str, bool]]:
  """The ``field`` column of a Parquet or Arrow file, a batch of rows at a time."""
  import pyarrow as pa  # pylint: disable=import-outside-toplevel
  import pyarrow.parquet as pq  # pylint: disable=import-outside-toplevel
  with open(path, "rb") as raw:
    try:
      if kind == "parquet":
        table = pq.ParquetFile(raw)
        schema = table.schema_arrow
        batches = table.iter_batches(batch_size=ROW_BATCH, columns=[field] if field in
                                     schema.names else None)
      else:
        table = (pa.ipc.open_stream if kind == "arrow" else pa.ipc.open_file)(raw)
        schema = table.schema
        batches = (iter(table) if kind == "arrow" else
                   (table.get_batch(i) for i in range(table.num_record_batches)))
      _check_column(schema, field, path)
      done = 0
      for batch in batches:
        for text in batch.column(batch.schema.get_field_index(field)).to_pylist():
          if text:
            yield text, True
        done = _advance(raw, done, progress)
    except (pa.ArrowException, OSError) as e:
      raise errors.DataError(f"{path}: cannot read it as {kind.replace('_', ' ')} ({e}); the "
                             f"file is truncated or corrupt: fix or remove it") from None
    _advance(raw, done, progress, os.path.getsize(path))


def _check_column(schema, field: str, path: str) -> None:
  import pyarrow as pa  # pylint: disable=import-outside-toplevel
  if field not in schema.names:
    raise errors.DataError(f"{path} has no column {field!r} (its columns: "
                           f"{', '.join(schema.names)}); set data.text_field to the text column")
  kind = schema.field(field).type
  if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
    raise errors.DataError(f"{path}: column {field!r} holds {kind}, not text; set "
                           f"data.text_field to the text column")


def hf_pieces(data: DataConfig, progress) -> Iterator[tuple[str, bool]]:
  """A ``datasets`` dataset (a hub name, or a local folder or script), streamed."""
  dataset = load_hf(data)
  field = data.text_field
  for number, row in enumerate(dataset):
    text = _field(row, field, f"data.hf_dataset={data.hf_dataset!r} row {number}", str(row))
    if text:
      yield text, True
      progress(len(text))  # characters: a hub stream's size on disk is unknown


def load_hf(data: DataConfig):
  """``datasets.load_dataset(data.hf_dataset, data.hf_config, split=..., streaming=True)``,
  with one line for what goes wrong (no network, no such dataset or split)."""
  try:
    import datasets  # pylint: disable=import-outside-toplevel
  except ImportError:
    raise errors.DataError(f"data.hf_dataset={data.hf_dataset!r} needs Hugging Face datasets: "
                           f"pip install datasets") from None
  try:
    return datasets.load_dataset(data.hf_dataset, data.hf_config or None, split=data.hf_split,
                                 streaming=True)
  except Exception as e:  # pylint: disable=broad-except  # network, hub and format errors
    reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
    raise errors.DataError(
        f"data.hf_dataset={data.hf_dataset!r} (config {data.hf_config or 'default'!r}, split "
        f"{data.hf_split!r}) could not be loaded: {type(e).__name__}: {reason}. A hub name needs "
        f"the network; offline, point data.hf_dataset at a local folder of the dataset's files, "
        f"or data.path at them") from None
