"""A study's cells as records: what each finished cell was and did, read back from disk alone.

``load`` reads a sweep's per-cell files or a committed study's packed ``cells.jsonl`` (``pack``)
into one record per finished cell; ``to_run`` gives a ``curves.Run``.
"""

from __future__ import annotations

import glob
import json
import math
import os
import shutil

from andrea_jax import errors
from andrea_jax.files import atomic_write, make_directory, read_json
from andrea_jax.metrics import merge_rows, read_rows
from research import curves

# What a cell record keeps of a probe (diagnostics.jsonl): per-layer lists, and log Z.
PROBED = ("grad_attn", "grad_mlp", "residual_norm", "attn_logit_max", "log_z")

# A committed study's cells, one line each, in its results directory.
PACKED = "cells.jsonl"


def cell_parts(sweep_dir: str, path: str) -> dict:
  """The four files of ``<sweep_dir>/<path>`` (missing: None or no rows), plus the rate from
  ``config.json`` where they name none."""
  d = os.path.join(sweep_dir, path)
  parts = {"path": path, "cell": read_json(os.path.join(d, "cell.json")),
           "summary": read_json(os.path.join(d, "summary.json")),
           "metrics": read_rows(os.path.join(d, "metrics.jsonl")),
           "diagnostics": read_rows(os.path.join(d, "diagnostics.jsonl"))}
  config = os.path.join(d, "config.json")
  if learning_rate(parts) is None and os.path.exists(config):
    parts["config"] = {"train": {"learning_rate": read_json(config).get("train", {}).get("learning_rate")}}
  return parts


def record(parts: dict) -> dict | None:
  """One cell's record (a results.json row) from its parts (None if it has not finished)."""
  meta, summary = parts["cell"], parts["summary"]
  if summary is None or summary.get("status") not in ("completed", "diverged"):
    return None
  metrics, diag = merge_rows(parts["metrics"]), merge_rows(parts["diagnostics"])
  probes = [r for r in diag if "residual_norm" in r]
  timed = [r for r in metrics if "val_loss" in r and "tokens" in r]
  # DyT's saturation (diagnostics.dyt_saturation) only where the probe recorded it.
  pick = lambda r: {k: (r or {}).get(k) for k in PROBED + (("dyt_saturation",) if "dyt_saturation" in (r or {}) else ())}
  initial = summary.get("initial_val_loss")
  if initial is None and probes and probes[0]["step"] == 0:
    initial = probes[0]["loss"]
  return {
      "name": meta["name"], "arms": meta["arms"], "seed": meta["seed"], "group": meta.get("group"),
      "round": meta.get("round", 0),
      "overrides": meta["overrides"], "learning_rate": learning_rate(parts),
      "status": summary["status"], "steps": summary["steps"],
      "diverged_at_step": summary.get("diverged_at_step"),
      "final_val_loss": summary["final_val_loss"], "initial_val_loss": initial,
      "unigram_val_loss": summary["unigram_val_loss"], "n_params": summary["n_params"],
      "wall_time_s": summary["wall_time_s"], "group_size": summary.get("group_size", 1),
      "train_curve": [[r["step"], r["loss"]] for r in metrics if "loss" in r],
      "val_curve": [[r["step"], r["val_loss"]] for r in metrics if "val_loss" in r],
      # Against tokens and the wall clock, where the evaluations logged them (since issue 70).
      **({"val_tokens_curve": [[r["tokens"], r["val_loss"]] for r in timed],
          "val_seconds_curve": [[r["wall_time_s"], r["val_loss"]] for r in timed]} if timed else {}),
      # log Z and the max attention logit over layers, at every probe.
      "log_z_curve": [[r["step"], r["log_z"]] for r in diag if r.get("log_z") is not None],
      "attn_logit_curve": [[r["step"], max(r["attn_logit_max"])] for r in diag if r.get("attn_logit_max")],
      "init": pick(probes[0] if probes and probes[0]["step"] == 0 else None),
      "end": {"step": probes[-1]["step"] if probes else None, **pick(probes[-1] if probes else None)},
      "early_updates": [{k: r[k] for k in ("step", "update_attn", "update_mlp")}
                        for r in diag if "update_mlp" in r],
      # The code that trained it, where recorded.
      **{k: meta[k] for k in ("code", "code_earlier") if k in meta},
  }


def learning_rate(parts: dict) -> float | None:
  """The peak rate: override, else summary, else the run's config.json."""
  lr = (parts["cell"] or {}).get("overrides", {}).get("train.learning_rate",  # no cell.json: not started
                                                     (parts["summary"] or {}).get("learning_rate"))
  return lr if lr is not None else parts.get("config", {}).get("train", {}).get("learning_rate")


def read_parts(sweep_dir: str) -> tuple[list[dict], str] | None:
  """``(parts, source)`` from ``cells.jsonl``, else the per-cell directories; None if neither."""
  packed = os.path.join(sweep_dir, PACKED)
  if os.path.exists(packed):
    with open(packed, encoding="utf-8") as f:
      parts = [_line(packed, n, line) for n, line in enumerate(f, 1) if line.strip()]
    return parts, f"the {len(parts)} cells of {PACKED}"
  paths = sorted(os.path.relpath(os.path.dirname(p), sweep_dir)
                 for p in glob.glob(os.path.join(sweep_dir, "**", "cell.json"), recursive=True))
  if not paths:
    return None
  return [cell_parts(sweep_dir, p) for p in paths], f"the per-cell files of {len(paths)} cells"


def _line(path: str, n: int, line: str) -> dict:
  try:
    parts = json.loads(line)
  except ValueError as e:
    raise errors.ConfigError(f"{path}, line {n}: not valid JSON ({e}); restore it from git "
                             f"(git checkout -- {path}) or pack it again (cells.pack)") from None
  if not isinstance(parts, dict) or not {"path", "cell", "summary", "metrics", "diagnostics"} <= set(parts):
    raise errors.ConfigError(f"{path}, line {n}: expected a cell's path, cell, summary, metrics and "
                             f"diagnostics, got keys {sorted(parts) if isinstance(parts, dict) else parts!r}")
  return parts


def pack(sweep_dir: str, results_dir: str) -> int:
  """Pack ``sweep_dir``'s cells into ``<results_dir>/cells.jsonl`` (one line each, by path), with
  its ``sweep.json``; returns the number of cells."""
  parts = sorted(found(sweep_dir)[0], key=lambda p: p["path"])
  make_directory(results_dir, "--pack", "for the study's data, e.g. --pack=results/<study>-<scale>")
  lines = (json.dumps(p, separators=(",", ":")) + "\n" for p in parts)
  atomic_write(os.path.join(results_dir, PACKED), *(line.encode("utf-8") for line in lines))
  index = os.path.join(sweep_dir, "sweep.json")
  if os.path.exists(index) and os.path.abspath(sweep_dir) != os.path.abspath(results_dir):
    shutil.copyfile(index, os.path.join(results_dir, "sweep.json"))
  return len(parts)


def restore(pack_dir: str, sweep_dir: str, cells) -> int:
  """Write back into ``sweep_dir`` the finished cells that ``<pack_dir>/cells.jsonl`` holds (``pack``
  of an earlier session's, or machine's, part of the same sweep), each as the files the runner
  leaves (``cell.json``, ``summary.json``, ``metrics.jsonl``, ``diagnostics.jsonl``), so the runner
  skips them and a study that needs more time than one session trains in parts. ``cells`` are the
  sweep's (``Sweep.cells``): a packed cell of the design must carry its overrides, and one outside
  it must be a later rate round's (``base.refine`` adds those again from the same results); any
  other is another design's, refused in one line before a file is written. A directory already
  holding a finished cell is left as it is. Returns the number of cells written."""
  found_parts = read_parts(pack_dir) if os.path.isdir(pack_dir) else None
  if not found_parts:
    raise errors.ConfigError(f"--restore={pack_dir!r} holds no {PACKED}: pass the directory an earlier "
                             f"--save wrote (or a study's results/<study>-<scale>)")
  design = {c.path: c for c in cells}
  for parts in found_parts[0]:
    cell = design.get(parts["path"])
    meta = parts["cell"] or {}
    other = (json.dumps(meta.get("overrides"), sort_keys=True) != json.dumps(cell.overrides, sort_keys=True)
             if cell is not None else not meta.get("round"))
    if other:
      raise errors.ConfigError(f"--restore={pack_dir!r}: its cell {parts['path']!r} is not this sweep's (another "
                               f"grid or overrides): restore a pack of this design, or drop --restore")
  written = 0
  for parts in found_parts[0]:
    d = os.path.join(sweep_dir, parts["path"])
    if (read_json(os.path.join(d, "summary.json")) or {}).get("status") in ("completed", "diverged"):
      continue
    if record(parts) is None:
      continue  # packed before it finished: it trains here
    os.makedirs(d, exist_ok=True)
    for name, rows in (("metrics.jsonl", parts["metrics"]), ("diagnostics.jsonl", parts["diagnostics"])):
      atomic_write(os.path.join(d, name), *(json.dumps(r).encode("utf-8") + b"\n" for r in rows))
    atomic_write(os.path.join(d, "cell.json"), json.dumps(parts["cell"]).encode("utf-8"))
    if "config" in parts:  # the rate of a cell whose overrides name none (``cell_parts``)
      atomic_write(os.path.join(d, "config.json"), json.dumps(parts["config"]).encode("utf-8"))
    atomic_write(os.path.join(d, "summary.json"), json.dumps(parts["summary"]).encode("utf-8"))  # last: marks it done
    written += 1
  return written


def found(sweep_dir: str) -> tuple[list[dict], str]:
  """``read_parts``, or a ConfigError unless ``sweep_dir`` is a directory that holds cells."""
  if not os.path.isdir(sweep_dir):
    what = "is a file" if os.path.exists(sweep_dir) else "does not exist"
    raise errors.ConfigError(f"--sweep_dir={sweep_dir!r} {what}: pass a directory written by "
                             f"python -m experiments.sweep, or a study's results/<study>-<scale>")
  parts = read_parts(sweep_dir)
  if not parts:
    raise errors.ConfigError(f"{sweep_dir} holds no cells (no {PACKED}, no */cell.json): is it a "
                             f"directory written by python -m experiments.sweep?")
  return parts


def load(sweep_dir: str) -> tuple[dict, list[dict], str]:
  """``(index, cells, source)``: the sweep's description, its finished cells, and where from."""
  parts, source = found(sweep_dir)
  index = {"name": os.path.basename(os.path.normpath(sweep_dir)), "scale": "?", "description": "",
           "base_config": "?", **(read_json(os.path.join(sweep_dir, "sweep.json")) or {})}
  return index, [c for c in map(record, parts) if c], source


def initial_loss(c: dict) -> float:
  """The loss at initialisation: measured, else ln V, else the first logged training loss."""
  if c.get("initial_val_loss") is not None:
    return float(c["initial_val_loss"])
  vocab = c.get("overrides", {}).get("model.vocab_size")
  if vocab:
    return math.log(vocab)
  first = [l for _, l in c.get("train_curve", []) if l is not None and math.isfinite(l)]
  return float(first[0]) if first else float("nan")


def diverged(c: dict) -> bool:
  """Stopped by the divergence guard, or ended above its initial loss (as Wortsman et al. 2023
  count it)."""
  if c["status"] == "diverged":
    return True
  final = c.get("final_val_loss")
  return final is not None and math.isfinite(final) and final > initial_loss(c)


def to_run(c: dict) -> curves.Run:
  final = c["final_val_loss"]
  return curves.Run(
      arms=tuple(c["arms"]), lr=float(c["learning_rate"] or float("nan")), seed=int(c["seed"]),
      final=float("nan") if final is None else float(final), initial=initial_loss(c),
      diverged=c["status"] == "diverged",
      unigram=float("nan") if c.get("unigram_val_loss") is None else float(c["unigram_val_loss"]),
      round=int(c.get("round") or 0))
