"""What a run measures and where it goes: the one writer and the one reader of a run's
``{"step": ...}`` JSONL files (``metrics.jsonl`` + TensorBoard, and Weights & Biases when
asked, ``diagnostics.jsonl``); throughput as model FLOPs utilisation; validation bits per
byte.

MFU divides the model's FLOP/s by the peak of the devices it runs on (``device_peak``):
an accelerator's dense peak from its datasheet, by device kind and by the precision its
matmuls run in (``PEAK_FLOPS``, ``precision``); a CPU's measured once on a matmul of the
model's compute dtype and cached (``cpu_peak``). A device the table does not know has no
MFU, and a line that says so (``Peak.source``), never an invented peak.

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
import platform
import re
import secrets
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from andrea_jax import errors
from andrea_jax import files
from andrea_jax import tokenizer as tokenizer_lib

# Dense peak FLOP/s of one device by the precision its matmuls run in (``precision``):
# tensor-core figures where the device has them, never the 2:4-sparse ones datasheets print
# beside them (twice as large). ``device_kind`` (``jax.devices()[0].device_kind``) is
# searched for each pattern in order, the first found wins: the more specific names come
# first (an "H100 PCIe" is not an SXM part; "A10" must not match "A100"; a GH200 or GB200,
# not listed, is not an H200 or a B200). Sources, dense:
#   NVIDIA H100 datasheet: SXM5 ("NVIDIA H100 80GB HBM3") bf16/fp16 989.4 T, tf32 494.7 T,
#     fp32 66.9 T; PCIe bf16/fp16 756 T, tf32 378 T, fp32 51.2 T; NVL bf16/fp16 835 T,
#     tf32 417.5 T, fp32 60 T.
#   NVIDIA H200 datasheet: SXM as H100 SXM5; NVL as H100 NVL.
#   NVIDIA HGX B200 datasheet: per GPU bf16/fp16 2.25 P, tf32 1.125 P (fp32 not listed here).
#   NVIDIA A100 datasheet (SXM4 and PCIe, 40 and 80 GB): bf16/fp16 312 T, tf32 156 T, fp32 19.5 T.
#   NVIDIA L4 datasheet: bf16/fp16 121 T, tf32 60 T, fp32 30.3 T.
#   NVIDIA Ada Lovelace whitepaper, GeForce RTX 4090: bf16/fp16 with fp32 accumulate (what
#     XLA asks for) 165.2 T, tf32 82.6 T, fp32 82.6 T.
#   NVIDIA A10 datasheet: bf16/fp16 125 T, tf32 62.5 T, fp32 31.2 T (the A10G of AWS is not
#     an A10 and has no NVIDIA datasheet: it is left unknown).
#   NVIDIA V100 datasheet: SXM2 fp16 125 T, fp32 15.7 T; PCIe fp16 112 T, fp32 14 T (no
#     bf16 or tf32 tensor cores).
#   Google Cloud TPU system architecture pages, bf16 per chip: v4 275 T, v5e 197 T, v5p
#     459 T, v6e (Trillium) 918 T; float32 at the default precision runs as one bf16 pass.
# The fields of a metrics row read from the clock (logger.py): two runs of the same updates,
# bit-identical otherwise, differ in these.
CLOCK_FIELDS = ("tokens_per_s", "wall_time_s", "train_time_s", "mfu")

_T = 1e12
PEAK_FLOPS = {
    r"\bH100.*PCIe": {"bf16": 756 * _T, "fp16": 756 * _T, "tf32": 378 * _T, "fp32": 51.2 * _T},
    r"\bH[12]00 NVL": {"bf16": 835 * _T, "fp16": 835 * _T, "tf32": 417.5 * _T, "fp32": 60 * _T},
    r"\bH[12]00\b": {"bf16": 989.4 * _T, "fp16": 989.4 * _T, "tf32": 494.7 * _T, "fp32": 66.9 * _T},
    r"\bB200\b": {"bf16": 2250 * _T, "fp16": 2250 * _T, "tf32": 1125 * _T},
    r"A100": {"bf16": 312 * _T, "fp16": 312 * _T, "tf32": 156 * _T, "fp32": 19.5 * _T},
    r"\bL4\b": {"bf16": 121 * _T, "fp16": 121 * _T, "tf32": 60 * _T, "fp32": 30.3 * _T},
    r"RTX 4090": {"bf16": 165.2 * _T, "fp16": 165.2 * _T, "tf32": 82.6 * _T, "fp32": 82.6 * _T},
    r"\bA10\b": {"bf16": 125 * _T, "fp16": 125 * _T, "tf32": 62.5 * _T, "fp32": 31.2 * _T},
    r"V100.*PCIE": {"fp16": 112 * _T, "fp32": 14 * _T},
    r"V100": {"fp16": 125 * _T, "fp32": 15.7 * _T},
    r"TPU v4": {"bf16": 275 * _T},
    r"TPU v5 ?(lite|e)": {"bf16": 197 * _T},
    r"TPU v5": {"bf16": 459 * _T},  # v5p
    r"TPU v6": {"bf16": 918 * _T},  # v6e ("TPU v6 lite")
}
# The matmul a CPU's peak is measured on: n x n by n x n, the best of a few calls in each
# of a few rounds a short pause apart (a burst of other work slows one round, not all).
CPU_PEAK_N = 512
CPU_PEAK_CALLS = 3
CPU_PEAK_ROUNDS = 5
CPU_PEAK_PAUSE_S = 0.05
# The 1-minute load per usable core above which a measurement is taken as contended: it is
# flagged in the cache and on the MFU line, and measured again by the next run.
CPU_PEAK_BUSY = 0.5


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


@dataclasses.dataclass(frozen=True)
class Peak:
  """The peak that MFU divides by: dense FLOP/s of one device, and where it comes from."""
  flops: float | None  # None: not known (``source`` says so, and how to add it)
  source: str


def precision(dtype, platform: str, matmul_precision: str | None = None) -> str:
  """The precision a device's matmuls of ``dtype`` run in: a key of ``PEAK_FLOPS``' rows.

  float32 at JAX's default matmul precision runs as TF32 on NVIDIA tensor cores and as one
  bf16 pass on a TPU; ``jax_default_matmul_precision="highest"`` (or ``"float32"``) keeps
  it float32.
  """
  name = np.dtype(dtype).name
  if name in ("bfloat16", "float16"):
    return {"bfloat16": "bf16", "float16": "fp16"}[name]
  if name == "float32" and matmul_precision not in ("highest", "float32"):
    return {"gpu": "tf32", "tpu": "bf16"}.get(platform, "fp32")
  return {"float32": "fp32", "float64": "fp64"}.get(name, name)


def table_peak(device_kind: str, prec: str) -> Peak:
  """The datasheet peak of ``device_kind`` at ``prec`` (``PEAK_FLOPS``), or why there is none."""
  row = next((r for pattern, r in PEAK_FLOPS.items()
              if re.search(pattern, device_kind, re.IGNORECASE)), None)
  if row is None:
    return Peak(None, f"MFU: unknown peak for device kind {device_kind!r}; add it to "
                      f"metrics.PEAK_FLOPS")
  if prec not in row:
    return Peak(None, f"MFU: no {prec} peak for device kind {device_kind!r} (it has "
                      f"{', '.join(row)}); add it to metrics.PEAK_FLOPS")
  return Peak(row[prec], f"{device_kind}'s dense {prec} peak, {row[prec] / 1e12:,.1f} TFLOP/s "
                         f"(datasheet, metrics.PEAK_FLOPS)")


def device_peak(device, dtype, cache_dir: str | None = None) -> Peak:
  """The peak of ``device`` for matmuls of ``dtype`` (the model's compute dtype): its
  datasheet figure (``table_peak``), or on a CPU the measured one (``cpu_peak``)."""
  if device.platform == "cpu":
    return cpu_peak(dtype, cache_dir)
  matmul_precision = jax.config.jax_default_matmul_precision
  return table_peak(device.device_kind, precision(dtype, device.platform, matmul_precision))


def peak_flops(device, dtype="bfloat16") -> float | None:
  """``device_peak``'s FLOP/s alone (None where it is not known)."""
  return device_peak(device, dtype).flops


def cpu_peak(dtype, cache_dir: str | None = None, remeasure: bool = False) -> Peak:
  """This CPU's peak FLOP/s on ``dtype``: the best of ``CPU_PEAK_ROUNDS`` short measurements
  (``matmul_flops``, well under a second), cached in ``<cache_dir>/cpu_peak.json`` (default
  ``files.user_cache_dir()``) with the CPU's model name and the load it was measured at,
  keyed by the CPU's model, its cores, JAX's version, the dtype and any ``XLA_FLAGS``.

  Measured again (``remeasure``, or a cached figure that was measured at a load above
  ``CPU_PEAK_BUSY`` per core, on another CPU model, or that records neither): a contended
  measurement reads low, so a contended figure is kept only while nothing higher is known,
  and its line says so.
  """
  name = np.dtype(dtype).name
  flags = os.environ.get("XLA_FLAGS", "").strip()  # compile flags move the peak (the tests' -O0)
  cores = len(os.sched_getaffinity(0))
  key = (f"{cpu_model()} x {cores} cores, jax {jax.__version__}, {name}"
         + (f", XLA_FLAGS {flags}" if flags else ""))
  path = os.path.join(cache_dir or files.user_cache_dir(), "cpu_peak.json")
  entry = (files.read_json(path, error=errors.ConfigError) or {}).get(key)
  trusted = (isinstance(entry, dict) and entry.get("cpu") == cpu_model()
             and entry.get("load_per_core", math.inf) <= CPU_PEAK_BUSY)
  if remeasure or not trusted:
    load = os.getloadavg()[0] / cores
    flops = matmul_flops(jax.devices("cpu")[0], name, rounds=CPU_PEAK_ROUNDS)
    new = {"flops": flops, "cpu": cpu_model(), "load_per_core": round(load, 2),
           "measured": time.strftime("%Y-%m-%d %H:%M")}
    # Contended again: the higher of the two figures (either reads low), with its load.
    keep_old = (not remeasure and isinstance(entry, dict) and load > CPU_PEAK_BUSY
                and entry.get("cpu") == cpu_model() and entry.get("flops", 0) > flops)
    entry = entry if keep_old else new
    os.makedirs(os.path.dirname(path), exist_ok=True)
    files.write_json(path, {**(files.read_json(path, error=errors.ConfigError) or {}), key: entry})
  return Peak(entry["flops"], cpu_peak_source(entry, name, key, path))


def cpu_peak_source(entry: dict, name: str, key: str, path: str) -> str:
  """Where a CPU's peak comes from, and a warning where it was measured under load."""
  text = (f"{entry['flops'] / 1e9:,.1f} GFLOP/s on {name} matmuls, measured on this CPU "
          f"{entry['measured']} at load {entry['load_per_core']:.2f} per core ({key}; cached "
          f"in {path})")
  if entry["load_per_core"] > CPU_PEAK_BUSY:
    text += (f"; measured while the CPU was busy, so it reads low and MFU high: the next run "
             f"measures again (docs/training.md#mfu)")
  return text


def mfu_reading(tokens_per_s: float, flops_per_token: float, peak: float | None,
                ) -> tuple[float | None, str]:
  """MFU and its printed form, or None and why not: no peak, or a peak below the model's
  measured FLOP/s (a utilisation above 100 % is never printed nor logged)."""
  if not peak:
    return None, ""
  value = mfu(tokens_per_s, flops_per_token, peak)
  if value > 1:
    return None, (f"MFU not shown: the model ran at {tokens_per_s * flops_per_token / 1e9:,.1f} "
                  f"GFLOP/s, above the peak of {peak / 1e9:,.1f} GFLOP/s it would divide by, so "
                  f"that peak is wrong; measure it again (docs/training.md#mfu)")
  return value, f"MFU {value:.2%}"


def cpu_model() -> str:
  """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` says."""
  try:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
      found = re.search(r"^model name\s*:\s*(.+)$", f.read(), re.MULTILINE)
    if found:
      return found.group(1).strip()
  except OSError:
    pass
  return platform.processor() or platform.machine()


def matmul_flops(device, dtype, n: int = CPU_PEAK_N, calls: int = CPU_PEAK_CALLS,
                 rounds: int = 1, pause_s: float = CPU_PEAK_PAUSE_S) -> float:
  """FLOP/s of the fastest of ``calls`` jitted ``n x n`` matmuls of ``dtype`` on ``device``,
  in each of ``rounds`` rounds ``pause_s`` apart (compiled once)."""
  a = jax.device_put(jnp.ones((n, n), dtype), device)
  f = jax.jit(lambda x: x @ x)
  f(a).block_until_ready()
  best = float("inf")
  for r in range(rounds):
    if r:
      time.sleep(pause_s)
    for _ in range(calls):
      start = time.perf_counter()
      f(a).block_until_ready()
      best = min(best, time.perf_counter() - start)
  return 2.0 * n ** 3 / max(best, 1e-9)


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
