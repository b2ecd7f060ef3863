"""Metrics: the one JSONL reader, and validation bits per byte against a brute-force count."""

import importlib.util
import json
import math
import os
import subprocess
import sys
import types

import jax
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


# ----------------------------------------------------------------------------- MFU's peak


@pytest.mark.parametrize("kind, dtype, platform, flops", [
    ("NVIDIA H100 80GB HBM3", "bfloat16", "gpu", 989.4e12),  # SXM5
    ("NVIDIA H100 PCIe", "bfloat16", "gpu", 756e12),
    ("NVIDIA H100 80GB HBM3", "float32", "gpu", 494.7e12),  # TF32 at the default precision
    ("NVIDIA H200", "float16", "gpu", 989.4e12),
    ("NVIDIA B200", "bfloat16", "gpu", 2250e12),
    ("NVIDIA H200 NVL", "bfloat16", "gpu", 835e12),
    ("NVIDIA A100-SXM4-80GB", "bfloat16", "gpu", 312e12),
    ("NVIDIA A10", "bfloat16", "gpu", 125e12),  # not an A100's figure
    ("NVIDIA L4", "float32", "gpu", 60e12),
    ("NVIDIA GeForce RTX 4090", "bfloat16", "gpu", 165.2e12),
    ("Tesla V100-SXM2-16GB", "float16", "gpu", 125e12),
    ("TPU v5 lite", "bfloat16", "tpu", 197e12),
    ("TPU v5", "float32", "tpu", 459e12),  # one bf16 pass at the default precision
])
def test_the_peak_is_the_datasheets_for_the_device_kind_and_precision(kind, dtype, platform, flops):
  device = types.SimpleNamespace(platform=platform, device_kind=kind)
  peak = metrics.device_peak(device, dtype)
  assert peak.flops == pytest.approx(flops) and kind in peak.source


def test_float32_at_the_highest_precision_is_the_fp32_peak():
  assert metrics.precision("float32", "gpu", "highest") == "fp32"
  assert metrics.table_peak("NVIDIA A100-PCIE-40GB", "fp32").flops == pytest.approx(19.5e12)


@pytest.mark.parametrize("kind, dtype, message", [
    ("NVIDIA A10G", "bfloat16",
     "MFU: unknown peak for device kind 'NVIDIA A10G'; add it to metrics.PEAK_FLOPS"),
    ("NVIDIA GB200", "bfloat16",
     "MFU: unknown peak for device kind 'NVIDIA GB200'; add it to metrics.PEAK_FLOPS"),
    ("Tesla V100-SXM2-16GB", "bfloat16",
     "MFU: no bf16 peak for device kind 'Tesla V100-SXM2-16GB' (it has fp16, fp32); add it to "
     "metrics.PEAK_FLOPS")])
def test_a_device_the_table_does_not_know_says_so_and_gets_no_peak(kind, dtype, message):
  peak = metrics.device_peak(types.SimpleNamespace(platform="gpu", device_kind=kind), dtype)
  assert peak == metrics.Peak(None, message)


def test_a_cpus_peak_is_measured_once_then_read_from_the_cache(tmp_path, monkeypatch):
  calls = []
  measure = metrics.matmul_flops

  def counted(device, dtype, **kw):
    calls.append(dtype)
    return measure(device, dtype, **kw)

  monkeypatch.setattr(metrics, "matmul_flops", counted)
  monkeypatch.setattr(metrics.os, "getloadavg", lambda: (0.0, 0.0, 0.0))  # an idle machine
  cpu = types.SimpleNamespace(platform="cpu", device_kind="cpu")
  first = metrics.device_peak(cpu, "float32", cache_dir=str(tmp_path))
  again = metrics.device_peak(cpu, "float32", cache_dir=str(tmp_path))
  assert calls == ["float32"] and first == again and first.flops > 1e8
  assert "measured on this CPU" in first.source and str(tmp_path) in first.source
  assert "at load 0.00 per core" in first.source and "busy" not in first.source
  cached = json.loads((tmp_path / "cpu_peak.json").read_text())
  (entry,) = cached.values()
  assert entry["flops"] == first.flops and entry["cpu"] == metrics.cpu_model()
  assert entry["load_per_core"] == 0 and "float32" in next(iter(cached))
  metrics.device_peak(cpu, "bfloat16", cache_dir=str(tmp_path))  # another dtype: its own
  assert calls == ["float32", "bfloat16"]
  assert len(json.loads((tmp_path / "cpu_peak.json").read_text())) == 2


def test_a_peak_is_the_best_of_several_rounds(monkeypatch):
  times = iter([0.4, 0.5] * 3 + [0.1, 0.9] + [0.4, 0.5] * 6)  # round 2's first call is fastest
  clock = {"t": 0.0}

  def perf_counter():
    clock["t"] += next(times) if clock.setdefault("odd", False) else 0.0
    clock["odd"] = not clock["odd"]
    return clock["t"]

  monkeypatch.setattr(metrics.time, "perf_counter", perf_counter)
  monkeypatch.setattr(metrics.time, "sleep", lambda s: None)
  flops = metrics.matmul_flops(jax.devices("cpu")[0], "float32", n=8, calls=2, rounds=4)
  assert flops == pytest.approx(2 * 8 ** 3 / 0.1)


@pytest.mark.parametrize("entry", [
    1e9,  # the old cache's bare figure: no load, no model recorded
    {"flops": 1e9, "cpu": "cpu", "load_per_core": 2.5, "measured": "2024-01-01 00:00"},  # busy
    {"flops": 1e9, "cpu": "Another CPU", "load_per_core": 0.0, "measured": "2024-01-01 00:00"}])
def test_a_peak_cached_under_load_or_on_another_cpu_is_measured_again(tmp_path, monkeypatch, entry):
  monkeypatch.setattr(metrics, "cpu_model", lambda: "cpu")
  monkeypatch.setattr(metrics, "matmul_flops", lambda device, dtype, **kw: 80e9)
  monkeypatch.setattr(metrics.os, "getloadavg", lambda: (0.1, 0.0, 0.0))
  cpu = types.SimpleNamespace(platform="cpu", device_kind="cpu")
  key = next(iter(json.loads(_cache_with(tmp_path, cpu, entry).read_text())))
  peak = metrics.device_peak(cpu, "float32", cache_dir=str(tmp_path))
  assert peak.flops == 80e9 and "80.0 GFLOP/s" in peak.source
  assert json.loads((tmp_path / "cpu_peak.json").read_text())[key]["flops"] == 80e9


def _cache_with(tmp_path, cpu, entry):
  """A cache holding ``entry`` under the key this machine reads (written by one measurement)."""
  path = tmp_path / "cpu_peak.json"
  metrics.device_peak(cpu, "float32", cache_dir=str(tmp_path))
  (key,) = json.loads(path.read_text())
  path.write_text(json.dumps({key: entry}))
  return path


def test_a_peak_measured_under_load_is_flagged_kept_at_its_best_and_measured_again(
    tmp_path, monkeypatch):
  figures = iter([30e9, 20e9, 90e9])
  monkeypatch.setattr(metrics, "matmul_flops", lambda device, dtype, **kw: next(figures))
  load = {"now": 5.0 * len(os.sched_getaffinity(0))}
  monkeypatch.setattr(metrics.os, "getloadavg", lambda: (load["now"], 0.0, 0.0))
  cpu = types.SimpleNamespace(platform="cpu", device_kind="cpu")
  busy = metrics.device_peak(cpu, "float32", cache_dir=str(tmp_path))
  assert busy.flops == 30e9 and "at load 5.00 per core" in busy.source
  assert "measured while the CPU was busy, so it reads low and MFU high" in busy.source
  # Busy again, and lower: measured, the higher figure kept.
  assert metrics.device_peak(cpu, "float32", cache_dir=str(tmp_path)).flops == 30e9
  load["now"] = 0.0  # idle: measured again, and trusted from then on
  idle = metrics.device_peak(cpu, "float32", cache_dir=str(tmp_path))
  assert idle.flops == 90e9 and "busy" not in idle.source
  assert metrics.device_peak(cpu, "float32", cache_dir=str(tmp_path)) == idle


@pytest.mark.parametrize("peak, shown", [(100e9, "MFU 50.00%"), (None, "")])
def test_mfu_is_shown_below_its_peak(peak, shown):
  assert metrics.mfu_reading(1e3, 5e7, peak) == ((0.5 if peak else None), shown)


def test_a_peak_below_the_models_own_flops_gives_no_mfu_but_says_why():
  value, text = metrics.mfu_reading(1e3, 5e7, 1e9)  # 50 GFLOP/s run, 1 GFLOP/s "peak"
  assert value is None and text == (
      "MFU not shown: the model ran at 50.0 GFLOP/s, above the peak of 1.0 GFLOP/s it would "
      "divide by, so that peak is wrong; measure it again (docs/training.md#mfu)")