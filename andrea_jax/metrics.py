"""What a run measures and where it goes: the one writer and the one reader of a run's
``{"step": ...}`` JSONL files (``metrics.jsonl`` + TensorBoard, and Weights & Biases when
asked, ``diagnostics.jsonl``); throughput as model FLOPs utilisation; validation bits per
byte.

Weights & Biases (``train.wandb_mode``; the optional ``wandb`` package) logs the same rows
as ``metrics.jsonl``, at the same steps, to ``<workdir>/wandb`` (``offline``; ``wandb sync``
uploads them later) or to the server (``online``). A resumed run continues its W&B run:
the run's id is kept in ``<workdir>/wandb/run_id``.

Bits per byte (``val_bpb``) puts runs with different vocabularies on one scale: the
validation loss in nats per token, over ``ln 2``, times tokens per byte of the targets that
were evaluated. In a byte-level BPE every token id stands for a fixed byte string, so each
id's byte length is read once from the tokenizer; the end-of-text token counts 0 bytes
(it marks a document boundary, no text).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import secrets
import sys

import numpy as np

from andrea_jax import errors
from andrea_jax import files
from andrea_jax import tokenizer as tokenizer_lib

# Peak dense bf16 FLOP/s by device kind, for the MFU estimate on accelerators (brief, sec. 5).
PEAK_FLOPS = {"H100": 989e12, "H200": 989e12, "B200": 2250e12, "A100": 312e12, "L4": 121e12,
              "TPU v4": 275e12, "TPU v5 lite": 197e12, "TPU v5p": 459e12, "TPU v6 lite": 918e12}


@dataclasses.dataclass(frozen=True)
class WandbRun:
  """Which Weights & Biases run a ``Writer`` logs to (``train.wandb_*``)."""
  mode: str  # "offline" or "online"
  project: str
  name: str
  group: str | None = None  # a group's members share one
  config: dict | None = None  # the hyperparameters the W&B run shows


class Writer:
  """Rows ``{"step": ..., **values}`` appended to ``<workdir>/<filename>``, one line each,
  plus TensorBoard event files of the scalars and, with ``wandb``, a W&B run's rows
  (written by process 0 only)."""

  def __init__(self, workdir: str, enabled: bool = True, tensorboard: bool = True,
               filename: str = "metrics.jsonl", wandb: WandbRun | None = None):
    self.enabled = enabled
    if not enabled:
      return
    self.tb = self.wandb = None
    if wandb:  # first: a refusal leaves no file open
      self.wandb = start_wandb(workdir, wandb)
    self.file = open_append(os.path.join(workdir, filename))
    if tensorboard:
      self.tb = _summary_writer_class()(os.path.join(workdir, "tensorboard"))

  def write(self, step: int, values: dict) -> None:
    if not self.enabled:
      return
    self.file.write(json.dumps({"step": step, **values}) + "\n")
    self.file.flush()
    scalars = {name: value for name, value in values.items() if value is not None}
    for name, value in scalars.items() if self.tb else ():
      self.tb.add_scalar(name, value, step)
    if self.wandb:
      self.wandb.log(scalars, step=step)

  def close(self) -> None:
    if self.enabled:
      self.file.close()
      if self.tb:
        self.tb.close()
      if self.wandb:
        self.wandb.finish()


def require_wandb(mode: str):
  """The ``wandb`` module, or one line naming the install (``train.wandb_mode`` asks for it)."""
  try:
    import wandb  # pylint: disable=import-outside-toplevel
  except ImportError:
    raise errors.ConfigError(
        f"train.wandb_mode={mode!r} needs Weights & Biases, which is not installed: pip "
        f"install wandb (or pip install -r requirements-interop.txt), or set "
        f"--config.train.wandb_mode=off") from None
  return wandb


def start_wandb(directory: str, run: WandbRun):
  """``wandb.init`` of ``run``, writing under ``<directory>/wandb``; a later start in the same
  directory (a resume) continues the same W&B run, whose id ``<directory>/wandb/run_id``
  keeps. Several may be open at once (a group's members)."""
  wandb = require_wandb(run.mode)
  id_path = os.path.join(directory, "wandb", "run_id")
  if not os.path.exists(id_path):
    os.makedirs(os.path.dirname(id_path), exist_ok=True)
    files.atomic_write(id_path, secrets.token_hex(8).encode())
  with open(id_path, encoding="utf-8") as f:
    run_id = f.read().strip()
  try:
    return wandb.init(dir=directory, mode=run.mode, project=run.project, name=run.name,
                      group=run.group, config=run.config, id=run_id, resume="allow",
                      reinit="create_new")
  except wandb.Error as e:  # online: not logged in, no network
    raise errors.ConfigError(
        f"train.wandb_mode={run.mode!r}: Weights & Biases did not start ({_first_line(e)}); run `wandb "
        f"login`, or set --config.train.wandb_mode=offline (wandb sync uploads later)") from None


def _summary_writer_class():
  """tensorboardX's ``SummaryWriter``, imported without PyTorch.

  tensorboardX imports torch whenever it is installed (the interop extra), only to accept
  torch tensors (``tensorboardX/writer.py``: ``numpy_compatible = torch.Tensor``): 3 s and
  a few hundred MB in every run's process, for scalars that are Python floats here. So
  torch is hidden while tensorboardX loads (unless the process has imported it already),
  and ``import torch`` works as before afterwards.
  """
  if "tensorboardX" in sys.modules or "torch" in sys.modules:
    from tensorboardX import SummaryWriter  # pylint: disable=import-outside-toplevel
    return SummaryWriter
  sys.modules["torch"] = None  # makes `import torch` raise ImportError
  try:
    from tensorboardX import SummaryWriter  # pylint: disable=import-outside-toplevel
  finally:
    del sys.modules["torch"]
  return SummaryWriter


def _first_line(e: Exception) -> str:
  return (str(e).strip().splitlines() or [type(e).__name__])[0]


def read_jsonl(path: str) -> list[dict]:
  """The rows of a ``{"step": ..., ...}`` JSONL file, one merged row per step, by step
  (``merge_rows`` of ``read_rows``)."""
  return merge_rows(read_rows(path))


def read_rows(path: str) -> list[dict]:
  """Every row of a ``{"step": ..., ...}`` JSONL file as written, in file order.

  The one reader of the project's append-only logs (``metrics.jsonl``,
  ``diagnostics.jsonl``): a last line cut short (a kill or a full disk during an append,
  no final newline) is left out; any other line that is not a JSON object with a ``step``
  is an error naming the file and the line.
  """
  if not os.path.exists(path):
    return []
  rows = []
  with open(path, "rb") as f:
    lines = f.read().split(b"\n")
  for n, raw in enumerate(lines, 1):
    if not raw.strip():
      continue
    try:
      row = json.loads(raw)
    except ValueError as e:
      if n == len(lines):  # no newline after it: an append that was cut short
        break
      raise errors.CheckpointError(
          f"{path}, line {n}: not valid JSON ({e}): {_shown(raw)}; restore the file from a "
          f"copy, or delete that line (it loses that row's values)") from None
    if not isinstance(row, dict) or not isinstance(row.get("step"), int):
      raise errors.CheckpointError(
          f"{path}, line {n}: expected an object with an integer \"step\", got "
          f"{_shown(raw)}; restore the file from a copy, or delete that line")
    rows.append(row)
  return rows


def merge_rows(rows: list[dict]) -> list[dict]:
  """One row per step, by step: rows of the same step merged (train and validation metrics,
  or several probes); where a resume re-ran a step, its newest values win."""
  merged: dict[int, dict] = {}
  for row in rows:
    merged.setdefault(row["step"], {}).update(row)
  return [merged[s] for s in sorted(merged)]


def _shown(raw: bytes, limit: int = 60) -> str:
  text = raw.decode("utf-8", errors="replace")
  return repr(text if len(text) <= limit else text[:limit] + "...")


def open_append(path: str):
  """``path`` opened to append rows: a last line cut short is cut off first, with a note.

  What a kill or a full disk during an append leaves is a last line without its newline;
  a row appended after it would be glued to it, one bad line in the middle. A last line
  that parses (only its newline is missing) keeps its row and gets the newline.
  """
  if os.path.exists(path):
    with open(path, "rb+") as f:
      end = f.seek(0, os.SEEK_END)
      start, tail = end, b""
      while start > 0 and b"\n" not in tail:  # read back to the last newline
        start = max(0, start - 65536)
        f.seek(start)
        tail = f.read(end - start)
      if tail and not tail.endswith(b"\n"):
        cut = start + tail.rfind(b"\n") + 1  # 0 when the file is one unfinished line
        last = tail[cut - start:]
        try:
          json.loads(last)
          f.write(b"\n")
        except ValueError:
          f.truncate(cut)
          errors.note(f"{path}: cut off its last line, written only in part when the run "
                      f"stopped ({len(last)} bytes: {_shown(last, 40)}); the steps after "
                      f"the checkpoint this run resumes from are logged again")
  return open(path, "a", encoding="utf-8")


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
