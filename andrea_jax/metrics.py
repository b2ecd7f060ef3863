"""What a run measures and where it goes: the one writer and the one reader of a run's
``{"step": ...}`` JSONL files (``metrics.jsonl`` + TensorBoard, ``diagnostics.jsonl``);
throughput as model FLOPs utilisation; validation bits per byte.

Bits per byte (``val_bpb``) puts runs with different vocabularies on one scale: the
validation loss in nats per token, over ``ln 2``, times tokens per byte of the targets that
were evaluated. In a byte-level BPE every token id stands for a fixed byte string, so each
id's byte length is read once from the tokenizer; the end-of-text token counts 0 bytes
(it marks a document boundary, no text).
"""

from __future__ import annotations

import json
import math
import os

import numpy as np

from andrea_jax import tokenizer as tokenizer_lib

# Peak dense bf16 FLOP/s by device kind, for the MFU estimate on accelerators (brief, sec. 5).
PEAK_FLOPS = {"H100": 989e12, "H200": 989e12, "B200": 2250e12, "A100": 312e12, "L4": 121e12,
              "TPU v4": 275e12, "TPU v5 lite": 197e12, "TPU v5p": 459e12, "TPU v6 lite": 918e12}


class Writer:
  """Rows ``{"step": ..., **values}`` appended to ``<workdir>/<filename>``, one line each,
  plus TensorBoard event files of the scalars (written by process 0 only)."""

  def __init__(self, workdir: str, enabled: bool = True, tensorboard: bool = True,
               filename: str = "metrics.jsonl"):
    self.enabled = enabled
    if not enabled:
      return
    self.file = open(os.path.join(workdir, filename), "a", encoding="utf-8")
    self.tb = None
    if tensorboard:
      from tensorboardX import SummaryWriter  # pylint: disable=import-outside-toplevel
      self.tb = SummaryWriter(os.path.join(workdir, "tensorboard"))

  def write(self, step: int, values: dict) -> None:
    if not self.enabled:
      return
    self.file.write(json.dumps({"step": step, **values}) + "\n")
    self.file.flush()
    for name, value in values.items() if self.tb else ():
      if value is not None:
        self.tb.add_scalar(name, value, step)

  def close(self) -> None:
    if self.enabled:
      self.file.close()
      if self.tb:
        self.tb.close()


def read_jsonl(path: str) -> list[dict]:
  """The rows of a ``{"step": ..., ...}`` JSONL file, one merged row per step, by step.

  Rows of the same step are merged (train and validation metrics, or several probes);
  after a resume re-ran a step, its newest values win.
  """
  if not os.path.exists(path):
    return []
  rows: dict[int, dict] = {}
  with open(path, encoding="utf-8") as f:
    for line in f:
      if line.strip():
        row = json.loads(line)
        rows.setdefault(row["step"], {}).update(row)
  return [rows[s] for s in sorted(rows)]


def read_metrics(workdir: str) -> list[dict]:
  """The rows of a run's ``metrics.jsonl`` (see ``read_jsonl``)."""
  return read_jsonl(os.path.join(workdir, "metrics.jsonl"))


def peak_flops(device) -> float | None:
  """Peak dense bf16 FLOP/s of an accelerator (None on CPUs and unknown devices)."""
  if device.platform == "cpu":
    return None
  return next((v for k, v in PEAK_FLOPS.items() if k.lower() in device.device_kind.lower()), None)


def mfu(tokens_per_s: float, flops_per_token: float, peak: float) -> float:
  """Model FLOPs utilisation: achieved model FLOP/s over the devices' peak."""
  return tokens_per_s * flops_per_token / peak


def token_bytes(tok, vocab_size: int) -> np.ndarray:
  """``[vocab_size]`` byte length of each token id (0 for EOT and ids past the tokenizer)."""
  lengths = tokenizer_lib.token_byte_lengths(tok)[:vocab_size]
  return np.pad(lengths.astype(np.int64), (0, vocab_size - len(lengths)))


def bits_per_byte(loss_nats: float, targets: np.ndarray, lengths: np.ndarray) -> float | None:
  """Bits per byte of ``targets`` (any shape) given their mean loss in nats per token."""
  n_bytes = int(lengths[np.asarray(targets)].sum())
  if n_bytes == 0:
    return None
  return loss_nats / math.log(2) * np.asarray(targets).size / n_bytes
