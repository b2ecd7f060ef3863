"""The formats a researcher's corpus ships in (corpus.py): each read as documents, each
format we do not read refused by its bytes in one line, never decoded as text."""

import gzip
import json
import os
import re
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from andrea_jax import config as config_lib
from andrea_jax import corpus as corpus_lib
from andrea_jax import errors
from andrea_jax import readers
from experiments.configs import tiny

DOCS = ["first document\nwith two lines", "second: é, 漢字, 🙂", "third\u2028with a line "
        "separator\u0085and a next-line inside", "fourth"]


def data_config(**overrides) -> config_lib.DataConfig:
  config = tiny.get_config()
  config.data.update(overrides)
  return config_lib.RunConfig.from_configdict(config).data


def read(path, **overrides) -> list[str]:
  return list(corpus_lib.documents(data_config(path=str(path), **overrides)))


def jsonl(docs, field="text") -> bytes:
  # ensure_ascii=False, as most dataset exports write: U+2028 and U+0085 stay unescaped.
  return "".join(json.dumps({field: d, "id": i}, ensure_ascii=False) + "\n"
                 for i, d in enumerate(docs)).encode("utf-8")


def test_jsonl_with_unescaped_line_separators_reads(tmp_path):
  path = tmp_path / "d.jsonl"
  path.write_bytes(jsonl(DOCS))
  assert "\u2028".encode() in path.read_bytes()  # the raw file holds the separators
  assert read(path) == DOCS


@pytest.mark.parametrize("name,compress", [("d.jsonl.gz", gzip.compress),
                                           ("d.jsonl.zst", zstandard.ZstdCompressor().compress),
                                           ("d.json.gz", gzip.compress)])
def test_compressed_jsonl(tmp_path, name, compress):
  (tmp_path / name).write_bytes(compress(jsonl(DOCS)))
  assert read(tmp_path / name) == DOCS


def test_compressed_text_and_a_folder_of_mixed_formats(tmp_path):
  (tmp_path / "a.txt.gz").write_bytes(gzip.compress("plain text, gzipped".encode()))
  (tmp_path / "b.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(jsonl(DOCS[:2])))
  pq.write_table(pa.table({"text": DOCS[2:]}), tmp_path / "c.parquet")
  assert read(tmp_path) == ["plain text, gzipped", *DOCS]


def test_parquet_row_groups_and_text_field(tmp_path):
  path = tmp_path / "d.parquet"
  pq.write_table(pa.table({"id": list(range(4)), "content": DOCS}), path, row_group_size=1)
  assert read(path, text_field="content") == DOCS
  with pytest.raises(errors.DataError, match=r"d\.parquet has no column 'text' \(its columns: "
                     r"id, content\); set data.text_field"):
    read(path)
  with pytest.raises(errors.DataError, match=r"column 'id' holds int64, not text"):
    read(path, text_field="id")


def test_a_saved_hugging_face_dataset_folder(tmp_path):
  datasets = pytest.importorskip("datasets")
  datasets.Dataset.from_dict({"text": DOCS, "n": [1, 2, 3, 4]}).save_to_disk(tmp_path / "saved")
  assert read(tmp_path / "saved") == DOCS
  dd = datasets.DatasetDict({"train": datasets.Dataset.from_dict({"text": DOCS[:2]}),
                             "validation": datasets.Dataset.from_dict({"text": DOCS[2:]})})
  dd.save_to_disk(tmp_path / "dict")
  assert read(tmp_path / "dict") == DOCS[:2]
  assert read(tmp_path / "dict", hf_split="validation") == DOCS[2:]
  with pytest.raises(errors.DataError, match=r"splits \['train', 'validation'\], not "
                     r"data.hf_split='test'"):
    read(tmp_path / "dict", hf_split="test")


def test_a_datasets_dataset_streamed_from_local_files(tmp_path):
  pytest.importorskip("datasets")
  (tmp_path / "hub").mkdir()
  pq.write_table(pa.table({"text": DOCS}), tmp_path / "hub" / "train-00000.parquet")
  data = data_config(hf_dataset=str(tmp_path / "hub"))
  assert list(corpus_lib.documents(data)) == DOCS
  assert corpus_lib.source_of(data).name == f"data.hf_dataset={str(tmp_path / 'hub')!r}"


def test_a_hub_name_offline_is_one_line(tmp_path, monkeypatch):
  pytest.importorskip("datasets")
  monkeypatch.setenv("HF_HUB_OFFLINE", "1")
  monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
  monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
  # Modules imported before this test read the offline switch at import: set theirs too (else
  # the load waits on the network's timeouts, about 20 s, before it fails the same way).
  import huggingface_hub.constants  # pylint: disable=import-outside-toplevel
  monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
  import datasets.config  # pylint: disable=import-outside-toplevel
  monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
  monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True, raising=False)
  with pytest.raises(errors.DataError, match=r"data.hf_dataset='HuggingFaceFW/fineweb-edu' .*"
                     r"could not be loaded: .*needs the network") as caught:
    list(corpus_lib.documents(data_config(hf_dataset="HuggingFaceFW/fineweb-edu",
                                          hf_config="sample-10BT")))
  assert "\n" not in str(caught.value)


def test_a_json_array_of_records_and_its_size_limit(tmp_path, monkeypatch):
  path = tmp_path / "d.json"
  path.write_text(json.dumps([{"text": d} for d in DOCS], indent=1), encoding="utf-8")
  assert read(path) == DOCS  # not one plain-text document
  monkeypatch.setattr(readers, "MAX_JSON_ARRAY_BYTES", 10)
  with pytest.raises(errors.DataError, match=r"one JSON array .* write it as JSONL"):
    read(path)


MAGIC = {"archive.zip": b"PK\x03\x04rest", "data.bz2": b"BZh91AY&SY", "data.xz": b"\xfd7zXZ\x00..",
         "doc.pdf": b"%PDF-1.7\n", "img.png": b"\x89PNG\r\n\x1a\n", "shard.bin":
         (20240520).to_bytes(4, "little") + b"\x01\x00\x00\x00"}


@pytest.mark.parametrize("name", sorted(MAGIC))
def test_formats_we_do_not_read_are_refused_by_their_bytes(tmp_path, name):
  (tmp_path / name).write_bytes(MAGIC[name] + b"\x00" * 100)
  with pytest.raises(errors.DataError, match=r"a format data.path does not read; accepted: "
                     r"UTF-8 text, JSONL") as caught:
    read(tmp_path / name, extensions="*")
  assert "\n" not in str(caught.value)
  if name == "shard.bin":
    assert "data.shards=FOLDER" in str(caught.value)


@pytest.mark.parametrize("command,name,looks", [
    ("run", "img.png", "a PNG image, a format data.path does not read"),
    ("run", "archive.zip", "a ZIP archive, a format data.path does not read"),
    ("run", "empty.txt", "an empty file \\(0 bytes\\), which holds no documents"),
    ("prepare", "archive.zip", "a ZIP archive, a format data.path does not read")])
def test_a_wrong_corpus_is_the_first_line_printed(tmp_path, command, name, looks):
  # The file's first bytes are sniffed at the start (corpus.source_of): nothing is prepared,
  # sampled or compiled before the refusal, and nothing else is printed.
  (tmp_path / name).write_bytes(MAGIC.get(name, b"") + b"\x00" * 100 * (name != "empty.txt"))
  args = [f"--config.data.path={tmp_path / name}", f"--config.data.cache_dir={tmp_path / 'cache'}"]
  args += [f"--workdir={tmp_path / 'run'}"] if command == "run" else []
  done = subprocess.run([sys.executable, "-m", f"experiments.{command}", "--config=tiny", *args],
                        capture_output=True, text=True, timeout=120, check=False,
                        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  assert done.returncode == errors.EXIT_USER_ERROR, done.stderr
  assert done.stdout == "" and len(done.stderr.splitlines()) == 1, (done.stdout, done.stderr)
  assert re.fullmatch(rf"error: {re.escape(str(tmp_path / name))} is {looks}; accepted: "
                      rf"{re.escape(corpus_lib.ACCEPTED)}\n", done.stderr), done.stderr
  assert not (tmp_path / "cache").exists() and not (tmp_path / "run").exists()


def test_binary_text_and_broken_compression_are_refused(tmp_path):
  (tmp_path / "blob.txt").write_bytes(b"looks like text\x00but is not")
  with pytest.raises(errors.DataError, match=r"blob\.txt is a binary file"):
    read(tmp_path / "blob.txt")
  (tmp_path / "cut.jsonl.gz").write_bytes(gzip.compress(jsonl(DOCS * 200))[:-40])
  with pytest.raises(errors.DataError, match=r"cut\.jsonl\.gz: cannot read past byte .* "
                     r"truncated or corrupt"):
    read(tmp_path / "cut.jsonl.gz")
  (tmp_path / "cut.parquet").write_bytes(b"PAR1" + b"\x01" * 50)
  with pytest.raises(errors.DataError, match=r"cut\.parquet: cannot read it as parquet"):
    read(tmp_path / "cut.parquet")


def test_a_long_text_file_streams_in_pieces_and_utf8_errors_keep_their_offset(tmp_path,
                                                                            monkeypatch):
  monkeypatch.setattr(readers, "PIECE_CHARS", 100)
  text = "".join(f"line {i}: é and 漢字\n" for i in range(200))
  (tmp_path / "long.txt").write_text(text, encoding="utf-8")
  data = data_config(path=str(tmp_path / "long.txt"))
  pieces = list(corpus_lib.pieces(corpus_lib.source_of(data), data))
  assert len(pieces) > 20 and all(len(t) <= 2 * 100 for t, _ in pieces)
  assert [new for _, new in pieces] == [True] + [False] * (len(pieces) - 1)
  assert "".join(t for t, _ in pieces) == text
  assert read(tmp_path / "long.txt", doc_separator="\n") == text.split("\n")[:-1]
  raw = text.encode()
  at = raw.index(b"\n", 1000) + 1  # past the first read of 100 characters, at a character
  (tmp_path / "bad.txt").write_bytes(raw[:at] + b"\xff" + raw[at:])
  with pytest.raises(errors.DataError, match=rf"bad\.txt: not valid UTF-8 at byte offset {at} "):
    read(tmp_path / "bad.txt")


def test_the_fingerprint_reads_samples_not_the_whole_file(tmp_path, monkeypatch):
  monkeypatch.setattr(corpus_lib, "SAMPLE_BYTES", 16)
  path = tmp_path / "big.txt"
  path.write_bytes(b"a" * 1000)
  data = data_config(path=str(path))
  first = corpus_lib.source_fingerprint(corpus_lib.source_of(data), data)
  path.write_bytes(b"a" * 100 + b"b" + b"a" * 899)  # outside the three samples: unseen
  assert corpus_lib.source_fingerprint(corpus_lib.source_of(data), data) == first
  path.write_bytes(b"a" * 999 + b"b")  # in the last sample
  assert corpus_lib.source_fingerprint(corpus_lib.source_of(data), data) != first
  os.truncate(path, 999)  # another size
  assert corpus_lib.source_fingerprint(corpus_lib.source_of(data), data) != first
