"""Which files ``data.path`` names and what each one holds: the files of a path, a glob, a
folder or a saved Hugging Face dataset (``list_files``), and each file's format told by its
first bytes (``file_format``), which refuses a format that is not read (an archive, an image,
a token shard, a binary file) before any of it is decoded as text. ``readers.py`` reads each
format's documents.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import gzip
import io
import os
import pathlib
import re

from andrea_jax import errors
from andrea_jax import files as files_lib

# What a file may hold, named in every refusal.
ACCEPTED = ("UTF-8 text, JSONL (.jsonl, or .json with one object a line), a JSON array of "
            "records (.json), Parquet, Arrow (a Hugging Face save_to_disk folder), the text "
            "and JSON ones also gzip- (.gz) or zstd-compressed (.zst)")
# Bytes read from a file's start to tell its format: magic numbers, a NUL byte in "text".
SNIFF_BYTES = 8192
# Formats that are refused by their magic bytes, never decoded as text.
REFUSED = {b"PK\x03\x04": "a ZIP archive", b"BZh": "bzip2-compressed", b"\xfd7zXZ\x00": "xz-compressed",
           b"7z\xbc\xaf\x27\x1c": "a 7-Zip archive", b"%PDF": "a PDF document",
           b"\x89PNG": "a PNG image", b"\xff\xd8\xff": "a JPEG image", b"GIF8": "a GIF image",
           b"SQLite format 3\x00": "an SQLite database", b"\x93NUMPY": "a NumPy array",
           b"\x7fELF": "an executable", (20240520).to_bytes(4, "little"): "an llm.c token shard "
           "(already tokenized: train on a folder of them with data.shards=FOLDER and "
           "data.tokenizer_path)"}
GZIP, ZSTD = b"\x1f\x8b", b"\x28\xb5\x2f\xfd"
# Default data.extensions of a folder: every format above.
EXTENSIONS = ".txt,.md,.rst,.jsonl,.json,.parquet,.arrow,.gz,.zst"


@dataclasses.dataclass(frozen=True)
class FileFormat:
  kind: str  # "text", "jsonl", "json_array", "parquet", "arrow" (IPC stream) or "arrow_file"
  compression: str = ""  # "", "gzip" or "zstd"


def list_files(path: str, extensions: str = EXTENSIONS, split: str = "train") -> list[pathlib.Path]:
  """The files of ``path``: itself, a glob's matches or a folder's (recursive, sorted)."""
  p = pathlib.Path(path)
  if path and glob.has_magic(path):
    files = sorted(pathlib.Path(f) for f in glob.glob(path, recursive=True)
                   if os.path.isfile(f))
    if not files:
      raise errors.DataNotFoundError(f"data.path {path!r} matches no file; check the pattern "
                                     f"(** matches folders at any depth)")
    return files
  if not path or not p.exists():
    raise errors.DataNotFoundError(f"data.path {path!r} does not exist; point data.path at a text "
                                   f"file, a folder of files, a glob, a .jsonl or Parquet file")
  if not p.is_dir():
    return [p]
  return _saved_dataset_files(p, split) or _directory_files(p, extensions)


def _saved_dataset_files(root: pathlib.Path, split: str) -> list[pathlib.Path]:
  """The ``.arrow`` files of a Hugging Face ``save_to_disk`` folder (a split's, for a
  DatasetDict), in their order; [] for any other folder."""
  splits = root / "dataset_dict.json"
  if splits.is_file():
    names = (files_lib.read_json(splits) or {}).get("splits", [])
    if split not in names:
      raise errors.DataError(f"{str(root)!r} is a saved DatasetDict with splits {names}, not "
                             f"data.hf_split={split!r}; set data.hf_split to one of them")
    root = root / split
  state = root / "state.json"
  if not state.is_file():
    return []
  listed = (files_lib.read_json(state) or {}).get("_data_files", [])
  return [root / f["filename"] for f in listed]


def _directory_files(root: pathlib.Path, extensions: str) -> list[pathlib.Path]:
  """The files under ``root`` ending in ``extensions``; ``"*"``: every file (extensionless
  ones such as LICENSE or README too), except hidden files and folders (``.git``)."""
  if extensions.strip() == "*":
    files = sorted((f for f in root.rglob("*") if f.is_file() and not any(
        part.startswith(".") for part in f.relative_to(root).parts)),
                   key=lambda f: f.relative_to(root).as_posix())
    if not files:
      raise errors.DataError(f"directory {str(root)!r} has no files (data.extensions='*'); "
                             f"add files or point data.path elsewhere")
    return files
  exts = tuple(e.strip() if e.strip().startswith(".") else "." + e.strip()
               for e in extensions.split(",") if e.strip())
  files = sorted((f for f in root.rglob("*") if f.is_file() and f.name.endswith(exts)),
                 key=lambda f: f.relative_to(root).as_posix())
  if not files:
    raise errors.DataError(f"directory {str(root)!r} has no files ending in {', '.join(exts)} "
                           f"(data.extensions={extensions!r}); add files or change data.extensions "
                           f"('*' reads every file)")
  return files


def file_format(path: str) -> FileFormat:
  """What ``path`` holds, from its first bytes (and its name for the text kinds).

  A format we do not read is refused by its magic number, and a "text" file with a NUL byte
  is refused as binary: nothing is ever decoded as text that is not text.
  """
  with open(path, "rb") as f:
    head = f.read(SNIFF_BYTES)
  if head.startswith(b"PAR1"):
    return FileFormat("parquet")
  if head.startswith(b"ARROW1"):
    return FileFormat("arrow_file")
  if head.startswith(b"\xff\xff\xff\xff") and path.endswith(".arrow"):
    return FileFormat("arrow")
  compression = {GZIP: "gzip", ZSTD: "zstd"}.get(head[:4] if head[:4] == ZSTD else head[:2], "")
  if compression:
    with open_file(path, compression) as (_, stream):
      head = _read_head(stream, path, compression)
  for magic, what in REFUSED.items():
    if head.startswith(magic):
      raise errors.DataError(f"{path} is {what}{' inside ' + compression if compression else ''}, "
                             f"a format data.path does not read; accepted: {ACCEPTED}")
  if b"\x00" in head:
    raise errors.DataError(f"{path} is a binary file (a NUL byte in its first "
                           f"{len(head):,} bytes), not text; accepted: {ACCEPTED}")
  name = re.sub(r"\.(gz|zst)$", "", os.path.basename(path))
  if name.endswith(".jsonl"):
    return FileFormat("jsonl", compression)
  if name.endswith(".json"):
    return FileFormat("json_array" if head.lstrip()[:1] == b"[" else "jsonl", compression)
  return FileFormat("text", compression)


def _read_head(stream, path: str, compression: str) -> bytes:
  try:
    return stream.read(SNIFF_BYTES)
  except (OSError, EOFError, ValueError) as e:  # gzip: BadGzipFile; zstd: ZstdError
    raise errors.DataError(f"{path} is not a readable {compression} file ({e}); fix or "
                           f"remove it") from None


@contextlib.contextmanager
def open_file(path: str, compression: str):
  """``(raw, stream)``: the file on disk (its ``tell`` counts progress) and its bytes."""
  with open(path, "rb") as raw:
    if compression == "gzip":
      stream = gzip.GzipFile(fileobj=raw)
    elif compression == "zstd":
      import zstandard  # pylint: disable=import-outside-toplevel
      stream = io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(
          raw, read_across_frames=True), buffer_size=1 << 20)
    else:
      stream = raw
    yield raw, stream
