"""Metrics: the one JSONL reader, and validation bits per byte against a brute-force count."""

import importlib.util
import json
import math
import subprocess
import sys

import numpy as np
import pytest

from andrea_jax import diagnostics
from andrea_jax import metrics
from andrea_jax import tokenizer as tokenizer_lib

DOCS = ["héllo wörld, naïve café ☕ and more text " * 6, "def f(x):\n  return x * 2\n" * 8,
        "日本語のテキスト、そして ascii " * 4]


def test_bits_per_byte_counts_the_bytes_the_targets_decode_to():
  tok = tokenizer_lib.train_tokenizer(DOCS, 300, show_progress=False)
  eot = tokenizer_lib.eot_id(tok)
  ids = [i for doc in DOCS for i in tokenizer_lib.encode(tok, doc) + [eot]]
  # Brute force: the UTF-8 size of the decoded documents (EOT is a boundary, not text).
  n_bytes = sum(len(tokenizer_lib.decode(tok, tokenizer_lib.encode(tok, d)).encode()) for d in DOCS)
  assert n_bytes == sum(len(d.encode()) for d in DOCS)
  lengths = metrics.token_bytes(tok, 304)  # a model vocabulary padded past the tokenizer's
  assert len(lengths) == 304 and lengths[eot] == 0 and not lengths[300:].any()
  assert lengths[ids].sum() == n_bytes
  targets = np.array(ids).reshape(1, -1)
  expected = 1.7 / math.log(2) * len(ids) / n_bytes
  assert metrics.bits_per_byte(1.7, targets, lengths) == pytest.approx(expected)


def test_one_reader_merges_rows_of_a_step_and_keeps_the_newest(tmp_path):
  rows = [{"step": 1, "loss": 5.0}, {"step": 2, "loss": 4.0}, {"step": 2, "val_loss": 4.5},
          {"step": 2, "loss": 3.9}]  # a resume re-ran step 2
  for name in ("metrics.jsonl", "diagnostics.jsonl"):
    (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
  expected = [{"step": 1, "loss": 5.0}, {"step": 2, "loss": 3.9, "val_loss": 4.5}]
  assert metrics.read_metrics(str(tmp_path)) == expected
  assert diagnostics.read(str(tmp_path)) == expected
  assert metrics.read_metrics(str(tmp_path / "missing")) == []


def test_a_torn_last_line_is_left_out_and_cut_off_before_the_next_append(tmp_path, capsys):
  path = tmp_path / "metrics.jsonl"
  path.write_text('{"step": 1, "loss": 5.0}\n{"step": 2, "lo')  # a kill during an append
  assert metrics.read_jsonl(str(path)) == [{"step": 1, "loss": 5.0}]
  with metrics.open_append(str(path)) as f:
    f.write(json.dumps({"step": 2, "loss": 4.0}) + "\n")
  assert "cut off its last line" in capsys.readouterr().err
  assert path.read_text() == '{"step": 1, "loss": 5.0}\n{"step": 2, "loss": 4.0}\n'
  path.write_text('{"step": 1, "loss": 5.0}')  # whole but for its newline: kept
  metrics.open_append(str(path)).close()
  assert path.read_text() == '{"step": 1, "loss": 5.0}\n' and not capsys.readouterr().err


@pytest.mark.parametrize("line", ['{"step": 2, "lo{"step": 3}', '[1, 2]', '{"loss": 1.0}'])
def test_a_bad_line_in_the_middle_is_an_error_naming_file_and_line(tmp_path, line):
  path = tmp_path / "diagnostics.jsonl"
  path.write_text(f'{{"step": 1}}\n{line}\n{{"step": 4}}\n')
  with pytest.raises(ValueError, match=rf"{path}, line 2: .*delete that line"):
    diagnostics.read(str(tmp_path))


@pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                    reason="torch is not installed (requirements-interop.txt installs it)")
def test_the_writer_logs_scalars_to_tensorboard_without_importing_torch(tmp_path):
  """A run's process does not load PyTorch for its TensorBoard scalars (3 s and hundreds of
  MB when the interop extra is installed), and ``import torch`` still works after."""
  code = f"""
import glob, sys
from andrea_jax import metrics
w = metrics.Writer({str(tmp_path)!r})
w.write(3, {{"loss": 1.5, "lr": None}})
w.close()
assert "torch" not in sys.modules, "tensorboardX brought torch in"
(events,) = glob.glob({str(tmp_path / "tensorboard" / "events.*")!r})
assert b"loss" in open(events, "rb").read()
import torch
print("ok", torch.zeros(2).sum().item())
"""
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
  assert out.returncode == 0 and out.stdout.startswith("ok 0.0"), out.stderr[-2000:]
