"""A sweep's per-cell files as records: what each finished cell was and did, read back from disk alone.

A sweep leaves, per cell (in ``<sweep_dir>/**/``), ``cell.json`` (what the cell is) and
``summary.json``, ``metrics.jsonl`` and ``diagnostics.jsonl`` (what it did), so a committed
study is re-judged from the repository alone, without checkpoints. ``load`` reads a sweep
directory into one record per finished cell (a directory with no per-cell files but a
``results.json``, an older committed study, is read from that instead); ``to_run`` is a
record as the curve maths sees it (``curves.Run``); ``copy_cells`` copies what a commit
keeps.
"""

from __future__ import annotations

import glob
import math
import os
import shutil

import numpy as np

from andrea_jax import errors
from andrea_jax.files import read_json
from andrea_jax.metrics import read_jsonl
from research import curves

# What a cell record keeps of a probe (diagnostics.jsonl): per-layer lists, and log Z.
PROBED = ("grad_attn", "grad_mlp", "residual_norm", "attn_logit_max", "log_z")

# What a committed study keeps of each cell (no checkpoints, TensorBoard files or logs).
CELL_FILES = ("cell.json", "summary.json", "metrics.jsonl", "diagnostics.jsonl")


def cell_record(d: str) -> dict | None:
  """One cell's results.json row from its directory (None if it has not finished)."""
  if not os.path.exists(os.path.join(d, "summary.json")):
    return None
  meta, summary = read_json(os.path.join(d, "cell.json")), read_json(os.path.join(d, "summary.json"))
  if summary.get("status") not in ("completed", "diverged"):
    return None
  metrics, diag = (read_jsonl(os.path.join(d, name)) for name in ("metrics.jsonl", "diagnostics.jsonl"))
  probes = [r for r in diag if "residual_norm" in r]
  pick = lambda r: {k: (r or {}).get(k) for k in PROBED}
  initial = summary.get("initial_val_loss")
  if initial is None and probes and probes[0]["step"] == 0:
    initial = probes[0]["loss"]
  return {
      "name": meta["name"], "arms": meta["arms"], "seed": meta["seed"], "group": meta.get("group"),
      "round": meta.get("round", 0),
      "overrides": meta["overrides"], "learning_rate": learning_rate(d, meta, summary),
      "status": summary["status"], "steps": summary["steps"],
      "diverged_at_step": summary.get("diverged_at_step"),
      "final_val_loss": summary["final_val_loss"], "initial_val_loss": initial,
      "unigram_val_loss": summary["unigram_val_loss"], "n_params": summary["n_params"],
      "wall_time_s": summary["wall_time_s"], "group_size": summary.get("group_size", 1),
      "train_curve": [[r["step"], r["loss"]] for r in metrics if "loss" in r],
      "val_curve": [[r["step"], r["val_loss"]] for r in metrics if "val_loss" in r],
      "init": pick(probes[0] if probes and probes[0]["step"] == 0 else None),
      "end": {"step": probes[-1]["step"] if probes else None, **pick(probes[-1] if probes else None)},
      "early_updates": [{k: r[k] for k in ("step", "update_attn", "update_mlp")}
                        for r in diag if "update_mlp" in r],
      # The code that trained it (experiments.sweep.code_version), where the sweep recorded it.
      **{k: meta[k] for k in ("code", "code_earlier") if k in meta},
  }


def copy_cells(sweep_dir: str, out: str) -> int:
  """Copy every cell's ``CELL_FILES`` (and ``sweep.json``) to the same paths under ``out``."""
  copied = 0
  for meta in glob.glob(os.path.join(sweep_dir, "**", "cell.json"), recursive=True):
    d = os.path.dirname(meta)
    target = os.path.join(out, os.path.relpath(d, sweep_dir))
    os.makedirs(target, exist_ok=True)
    for name in CELL_FILES:
      if os.path.exists(os.path.join(d, name)):
        shutil.copyfile(os.path.join(d, name), os.path.join(target, name))
    copied += 1
  if os.path.exists(os.path.join(sweep_dir, "sweep.json")):
    shutil.copyfile(os.path.join(sweep_dir, "sweep.json"), os.path.join(out, "sweep.json"))
  return copied


def learning_rate(d: str, meta: dict, summary: dict) -> float | None:
  """The cell's peak rate: its override, its summary, or the config.json its run saved."""
  lr = meta["overrides"].get("train.learning_rate", summary.get("learning_rate"))
  if lr is None and os.path.exists(os.path.join(d, "config.json")):
    lr = read_json(os.path.join(d, "config.json")).get("train", {}).get("learning_rate")
  return lr


def load(sweep_dir: str) -> tuple[dict, list[dict], str]:
  """``(index, cells, source)``: the sweep's description, its finished cells, and where from."""
  if not os.path.isdir(sweep_dir):
    raise errors.ConfigError(f"--sweep_dir={sweep_dir!r} is not a directory: pass a directory "
                             f"written by python -m experiments.sweep")
  index_path = os.path.join(sweep_dir, "sweep.json")
  index = read_json(index_path) if os.path.exists(index_path) else {}
  dirs = sorted({os.path.dirname(p) for p in glob.glob(os.path.join(sweep_dir, "**", "cell.json"),
                                                       recursive=True)})
  if dirs:
    cells = [c for c in (cell_record(d) for d in dirs) if c]
    source = f"the per-cell files of {len(dirs)} cells"
  elif os.path.exists(os.path.join(sweep_dir, "results.json")):
    results = read_json(os.path.join(sweep_dir, "results.json"))
    index = {**results, **index}
    cells = [legacy_cell(c) for c in results["cells"]]
    source = ("results.json alone: this study has no per-cell files (it predates them), "
              "so its report is regenerated from the numbers results.json kept; its arms "
              "'warmup' and 'no-warmup' are called 'long' and 'none' here")
  else:
    raise errors.ConfigError(f"{sweep_dir} holds no cells (no */cell.json) and no results.json: "
                             f"is it a directory written by python -m experiments.sweep?")
  index.setdefault("name", os.path.basename(os.path.normpath(sweep_dir)))
  index.setdefault("scale", "?")
  index.setdefault("description", "")
  index.setdefault("base_config", "?")
  return index, cells, source


def legacy_cell(c: dict) -> dict:
  """A results.json row of a study written before the learning-rate grid (one rate, 'warmup' arms)."""
  rename = {"norm:pre/warmup": "norm:pre/long", "norm:post/warmup": "norm:post/long",
            "norm:pre/no-warmup": "norm:pre/none", "norm:post/no-warmup": "norm:post/none"}
  return {"learning_rate": c.get("overrides", {}).get("train.learning_rate"), "initial_val_loss": None,
          "diverged_at_step": None, "group_size": 1,
          **c, "arms": [rename.get(a, a) for a in c["arms"]]}


def initial_loss(c: dict) -> float:
  """The loss at initialisation: measured, else ln V, else the first logged training loss."""
  if c.get("initial_val_loss") is not None:
    return float(c["initial_val_loss"])
  vocab = c.get("overrides", {}).get("model.vocab_size")
  if vocab:
    return math.log(vocab)
  first = [l for _, l in c.get("train_curve", []) if l is not None and np.isfinite(l)]
  return float(first[0]) if first else float("nan")


def _ratio(profile, lo: int = 0) -> float:
  if not profile or len(profile) <= lo or not profile[lo]:
    return float("nan")
  return float(profile[-1] / profile[lo])


def to_run(c: dict) -> curves.Run:
  o = c.get("overrides", {})
  final = c["final_val_loss"]
  return curves.Run(
      arms=tuple(c["arms"]), lr=float(c["learning_rate"] or float("nan")), seed=int(c["seed"]),
      final=float("nan") if final is None else float(final), initial=initial_loss(c),
      diverged=c["status"] == "diverged", norm=o.get("model.norm", "pre"),
      init=o.get("model.init", "gpt2"),
      grad_ratio_init=_ratio((c.get("init") or {}).get("grad_mlp")),
      resid_ratio_init=_ratio((c.get("init") or {}).get("residual_norm"), 1),
      resid_ratio_end=_ratio((c.get("end") or {}).get("residual_norm"), 1),
      unigram=float("nan") if c.get("unigram_val_loss") is None else float(c["unigram_val_loss"]),
      round=int(c.get("round") or 0))
