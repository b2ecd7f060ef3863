"""Write a sweep's report: ``python -m experiments.report --sweep_dir=docs/results/norm_mlp-cpu``.

Reads the per-cell files a sweep leaves (in ``<sweep_dir>/**/``: ``cell.json``, what the cell
is; ``summary.json``, ``metrics.jsonl`` and ``diagnostics.jsonl``, what it did), so a
committed study can be re-judged from the repository alone, without checkpoints.
A directory with no per-cell files but a ``results.json`` (an older committed study) is
read from that instead. Writes ``REPORT.md``, ``results.json`` and PNG plots into
``--out`` (default: the sweep directory). The verdicts come from ``experiments/verdicts.py``.
"""

from __future__ import annotations

import dataclasses
import glob
import importlib
import json
import math
import os
import shutil
import sys

import numpy as np
from absl import flags

from andrea_jax import errors
from andrea_jax.metrics import read_jsonl
from experiments import cli
from experiments import stats
from experiments import verdicts as V

if __name__ == "__main__":
  # ``python -m experiments.report``: this module is also the one ``experiments.report``
  # names, so that a sweep's own report module (``REPORTS``) importing it shares its flags.
  sys.modules.setdefault("experiments.report", sys.modules["__main__"])

_SWEEP_DIR = flags.DEFINE_string("sweep_dir", None, "directory written by experiments.sweep")
_OUT = flags.DEFINE_string("out", None, "where REPORT.md and plots go (default: sweep_dir)")
_COMMAND = flags.DEFINE_string("command", "", "the command that produced the sweep, for the report")
_COPY = flags.DEFINE_bool("copy_cells", False, "copy the per-cell files into --out first (to "
                          "commit a study: the report is then read from --out alone)")

# What a cell record keeps of a probe (diagnostics.jsonl): per-layer lists, and log Z.
PROBED = ("grad_attn", "grad_mlp", "residual_norm", "attn_logit_max", "log_z")
# Sweeps with a report of their own (by sweep.json's name): the module with write_report.
REPORTS = {"proxies": "experiments.proxy_report"}

# What a committed study keeps of each cell (no checkpoints, TensorBoard files or logs).
CELL_FILES = ("cell.json", "summary.json", "metrics.jsonl", "diagnostics.jsonl")

# Comparisons plotted as learning-rate curves: title and the arms' name prefixes.
COMPARISONS = {
    "norm": ("Norm placement x warmup", ("norm:",)),
    "mlp_width": ("MLP ratio at fixed d_model (and SwiGLU)", ("mlp_width:", "swiglu")),
    "mlp_matched": ("MLP ratio, parameter-matched", ("mlp_matched:",)),
    "depth": ("Deeper models", ("depth:", "norm:pre/long", "norm:post/long")),
}


# ----------------------------------------------------------------------------- loading


def _read_json(path: str):
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def cell_record(d: str) -> dict | None:
  """One cell's results.json row from its directory (None if it has not finished)."""
  if not os.path.exists(os.path.join(d, "summary.json")):
    return None
  meta, summary = _read_json(os.path.join(d, "cell.json")), _read_json(os.path.join(d, "summary.json"))
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
    lr = _read_json(os.path.join(d, "config.json")).get("train", {}).get("learning_rate")
  return lr


def load(sweep_dir: str) -> tuple[dict, list[dict], str]:
  """``(index, cells, source)``: the sweep's description, its finished cells, and where from."""
  if not os.path.isdir(sweep_dir):
    raise errors.ConfigError(f"--sweep_dir={sweep_dir!r} is not a directory: pass a directory "
                             f"written by python -m experiments.sweep")
  index_path = os.path.join(sweep_dir, "sweep.json")
  index = _read_json(index_path) if os.path.exists(index_path) else {}
  dirs = sorted({os.path.dirname(p) for p in glob.glob(os.path.join(sweep_dir, "**", "cell.json"),
                                                       recursive=True)})
  if dirs:
    cells = [c for c in (cell_record(d) for d in dirs) if c]
    source = f"the per-cell files of {len(dirs)} cells"
  elif os.path.exists(os.path.join(sweep_dir, "results.json")):
    results = _read_json(os.path.join(sweep_dir, "results.json"))
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


def to_run(c: dict) -> V.Run:
  o = c.get("overrides", {})
  final = c["final_val_loss"]
  return V.Run(
      arms=tuple(c["arms"]), lr=float(c["learning_rate"] or float("nan")), seed=int(c["seed"]),
      final=float("nan") if final is None else float(final), initial=initial_loss(c),
      diverged=c["status"] == "diverged", norm=o.get("model.norm", "pre"),
      init=o.get("model.init", "gpt2"),
      grad_ratio_init=_ratio((c.get("init") or {}).get("grad_mlp")),
      resid_ratio_init=_ratio((c.get("init") or {}).get("residual_norm"), 1),
      resid_ratio_end=_ratio((c.get("end") or {}).get("residual_norm"), 1),
      unigram=float("nan") if c.get("unigram_val_loss") is None else float(c["unigram_val_loss"]),
      round=int(c.get("round") or 0))


# ----------------------------------------------------------------------------- numbers per arm


def arm_table(runs: list[V.Run]) -> dict[str, dict]:
  """Per arm: the learning-rate curve and ``verdicts.summary`` (the fitted optimum with its
  interval, the per-seed sensitivity over the base grid, whether it learns)."""
  out = {}
  for arm, rs in sorted(V.by_arm(runs).items()):
    curve = V.rate_curve(rs)
    out[arm] = {"rates": {f"{lr:g}": c for lr, c in curve.items()}, **V.summary(rs),
                "cells": len(rs), "diverged": sum(r.diverged for r in rs)}
  return out


def single_rate_note(table: dict) -> list[str]:
  if not table or any(len(a["rates"]) > 1 for a in table.values()):
    return []
  return ["**Every arm was trained at a single learning rate**, so no optimum is bracketed: "
          "the verdicts on those claims are inconclusive by rule. The study over a rate grid is "
          "`python -m experiments.sweep --sweep=norm_mlp --scale=cpu`.", ""]


def _pm(mean: float, std: float) -> str:
  return f"{mean:.3f}" + ("" if np.isnan(std) else f" ± {std:.3f}")


def interval_text(x: float | None, ci, fmt: str) -> str:
  if x is None:
    return "—"
  return format(x, fmt) + ("" if ci is None else " [" + ", ".join(format(c, fmt) for c in ci) + "]")


def table_lines(table: dict) -> list[str]:
  rates = sorted({float(lr) for a in table.values() for lr in a["rates"]})
  lines = ["| arm | fitted optimum [95 % CI] | loss there [95 % CI] | bracketed | learns | "
           "LR sensitivity [95 % CI] | diverged | " + " | ".join(f"{lr:.3g}" for lr in rates) + " |",
           "|---" * (7 + len(rates)) + "|"]
  for arm, a in table.items():
    cells = []
    for lr in rates:
      c = a["rates"].get(f"{lr:g}")
      cells.append("" if c is None else _pm(c["mean"], c["std"]) + (f" ({c['diverged']}✕)" if c["diverged"] else ""))
    lines.append(f"| {arm} | {interval_text(a['optimum_lr'], a['optimum_lr_interval'], '.2g')} | "
                 f"{interval_text(a['optimum_loss'], a['optimum_loss_interval'], '.3f')} | "
                 f"{a['bracketed_seeds']}/{a['seeds']} | {'yes' if a['learns'] else 'no'} | "
                 f"{interval_text(a['sensitivity'], a['sensitivity_interval'], '.3f')} | "
                 f"{a['diverged']}/{a['cells']} | " + " | ".join(cells) + " |")
  return lines


# ----------------------------------------------------------------------------- plots


def figure(*args, **kwargs):
  # A bare Figure, not pyplot: no global state in the caller's process or notebook.
  from matplotlib.figure import Figure  # pylint: disable=import-outside-toplevel
  fig = Figure(*args, **kwargs)
  return fig


def save(fig, out: str, name: str) -> str:
  fig.tight_layout()
  fig.savefig(os.path.join(out, name), dpi=100)
  return name


def plot_lr_curves(runs: list[V.Run], out: str, unigram: float = float("nan")) -> list[str]:
  """One plot per comparison: final loss (mean ± std over seeds) vs learning rate, per arm,
  with the loss at init and the unigram baseline (a model that learnt only token frequencies)."""
  arms, names = V.by_arm(runs), []
  for key, (title, prefixes) in COMPARISONS.items():
    chosen = sorted(a for a in arms if a.startswith(prefixes))
    if key == "depth" and not any(a.startswith("depth:") for a in chosen):
      continue
    if not chosen or not any(len(V.by_rate(arms[a])) > 1 for a in chosen):
      continue
    fig = figure(figsize=(7, 4.5))
    ax = fig.subplots()
    for i, arm in enumerate(chosen):
      curve = V.rate_curve(arms[arm])
      lrs = list(curve)
      mean = np.array([curve[lr]["mean"] for lr in lrs])
      std = np.nan_to_num(np.array([curve[lr]["std"] for lr in lrs]))
      ax.errorbar(lrs, mean, yerr=std, marker="o", ms=4, capsize=3, color=f"C{i}", label=arm)
      div = [lr for lr in lrs if curve[lr]["diverged"]]
      ax.plot(div, [curve[lr]["mean"] for lr in div], "x", color=f"C{i}", ms=10, mew=2)
    initial = np.nanmedian([r.initial for r in runs])
    ax.axhline(initial, color="gray", ls=":", lw=1, label=f"loss at init ({initial:.2f})")
    if np.isfinite(unigram):
      ax.axhline(unigram, color="gray", ls="--", lw=1, label=f"unigram baseline ({unigram:.2f})")
    ax.set(xscale="log", xlabel="peak learning rate", ylabel="final validation loss (nats)",
           title=f"{title}\n(mean ± std over seeds; ✕ = a seed diverged, counted at the init loss)")
    ax.legend(fontsize=7)
    names.append(save(fig, out, f"lr_{key}.png"))
  return names


def profiles(cells: list[dict], norm: str, init: str, key: str, when: str = "init"):
  """Mean over seeds of a per-layer profile of the norm/init arms (one per seed)."""
  seen = {}
  for c in cells:
    o = c.get("overrides", {})
    prof = (c.get(when) or {}).get(key)
    if (o.get("model.norm", "pre") == norm and o.get("model.init", "gpt2") == init and prof
        and any(a.startswith(("norm:", "init:")) for a in c["arms"]) and np.all(np.isfinite(prof))):
      seen.setdefault(c["seed"] if when == "init" else c["name"], prof)
  return np.mean(list(seen.values()), axis=0) if seen else None


def plot_profiles(cells: list[dict], out: str) -> str | None:
  """Per-layer gradient norms at init, pre vs post, under both initialisations."""
  fig = figure(figsize=(13, 4))
  axes = fig.subplots(1, 3)
  drawn = False
  for i, (norm, init) in enumerate((n, s) for s in ("gpt2", "xavier") for n in ("pre", "post")):
    style = dict(color=f"C{i % 2}", ls="-" if init == "gpt2" else "--", marker="o", ms=4,
                 label=f"{norm}-LN, {init} init")
    for ax, key in ((axes[0], "grad_attn"), (axes[1], "grad_mlp")):
      prof = profiles(cells, norm, init, key)
      if prof is not None:
        ax.plot(range(1, len(prof) + 1), prof, **style)
        drawn = True
    prof = profiles(cells, norm, init, "residual_norm")
    if prof is not None:
      axes[2].plot(range(len(prof)), prof, **style)
  for ax, title in zip(axes, ("gradient norm at init: attention", "gradient norm at init: MLP",
                              "residual-stream norm at init")):
    ax.set(title=title, xlabel="layer" if "gradient" in title else "after block (0 = embedding)",
           yscale="log")
    if ax.get_legend_handles_labels()[0]:
      ax.legend(fontsize=7)
  return save(fig, out, "init_profiles.png") if drawn else None


def plot_residual(cells: list[dict], out: str) -> str | None:
  """The residual stream's norm per layer at init and at the end of training (gpt2 init)."""
  fig = figure(figsize=(11, 4))
  axes = fig.subplots(1, 2, sharey=True)
  drawn = False
  for ax, when in zip(axes, ("init", "end")):
    for i, norm in enumerate(("pre", "post")):
      done = [c for c in cells if c["status"] == "completed"]
      prof = profiles(done, norm, "gpt2", "residual_norm", when)
      if prof is not None:
        ax.plot(range(len(prof)), prof, "o-", color=f"C{i}", label=f"{norm}-LN")
        drawn = True
    ax.set(title=f"residual-stream norm {'at init' if when == 'init' else 'at the end of training'}"
           f" (mean over cells)", xlabel="after block (0 = embedding)", yscale="log")
    if ax.get_legend_handles_labels()[0]:
      ax.legend(fontsize=8)
  return save(fig, out, "residual.png") if drawn else None


def plot_best_curves(cells: list[dict], runs: list[V.Run], out: str) -> str | None:
  """Training and validation loss of every norm arm at its own best rate, one line per seed."""
  arms = V.by_arm(runs)
  chosen = sorted(a for a in arms if a.startswith("norm:")) or sorted(arms)[:6]
  if not chosen:
    return None
  fig = figure(figsize=(12, 4.5))
  axes = fig.subplots(1, 2, sharey=True)
  for i, arm in enumerate(chosen):
    opts = V.optima(arms[arm])  # each seed at its best rate tried
    mine = [c for c in cells if arm in c["arms"] and c["seed"] in opts
            and c["learning_rate"] == opts[c["seed"]].grid_lr]
    best = np.exp(np.mean([np.log(o.grid_lr) for o in opts.values()])) if opts else float("nan")
    for j, c in enumerate(sorted(mine, key=lambda c: c["seed"])):
      for ax, key in ((axes[0], "train_curve"), (axes[1], "val_curve")):
        pts = [(s, l) for s, l in c[key] if l is not None and np.isfinite(l)]
        if pts:
          ax.plot(*zip(*pts), color=f"C{i}", lw=1, alpha=0.8,
                  label=f"{arm} @ ~{best:.2g}" if j == 0 else None)
  for ax, title in zip(axes, ("train loss", "validation loss")):
    ax.set(title=f"{title} at each arm's best rate", xlabel="step")
  axes[0].set_ylabel("nats / token")
  if axes[1].get_legend_handles_labels()[0]:
    axes[1].legend(fontsize=7)
  return save(fig, out, "loss_curves.png")


# ----------------------------------------------------------------------------- the report


def measured_time(cells: list[dict]) -> str:
  """What the study cost: the wall time of each program (a vmapped group, or a single run)."""
  programs: dict[str, float] = {}
  for c in cells:
    key = c.get("group") or c["name"]
    programs[key] = max(programs.get(key, 0.0), c.get("wall_time_s") or 0.0)
  total = sum(programs.values())
  return (f"Training time measured: {total / 60:.0f} minutes in {len(programs)} "
          f"program{'s' * (len(programs) != 1)} (the sum of each program's wall time: "
          f"compiles, evaluations and probes included, data preparation not).")


def rules_lines(recorded: dict | None, rules=V) -> list[str]:
  """Which rules judged the study: those of the run (recorded in sweep.json) or changed since.
  ``rules``: the module of the rules (its ``rules_version()`` and ``RULE_FILES``)."""
  now = rules.rules_version()
  if not recorded:
    return [f"Rules: `{' '.join(rules.RULE_FILES)}` at content hash {now['sha256']}; the sweep "
            f"recorded no rules of its own (it predates the record)."]
  same = recorded.get("sha256") == now["sha256"]
  at = f"commit {recorded.get('commit') or '?'}, content hash {recorded.get('sha256')}"
  if recorded.get("uncommitted_changes"):
    at += ", **with uncommitted changes at run time**"
  if same:
    return [f"Rules: judged with the rules fixed before the run ({at}), unchanged since."]
  return [f"Rules: **re-judged with rules changed since the run.** The run was made with the "
          f"rules of {at}; these verdicts come from content hash {now['sha256']} (last commit "
          f"{now['commit'] or '?'}). What changed: `git diff {recorded.get('commit') or '<run commit>'} "
          f"{now['commit'] or 'HEAD'} -- {' '.join(rules.RULE_FILES)}`."]


def prepare_out(sweep_dir: str, out: str | None, command: str, copy: bool) -> tuple[str, str, str]:
  """``(sweep_dir, out, command)`` to report from: with ``copy``, the cells copied into
  ``out`` first and read from there (only what will be committed), the copy in the command."""
  out = out or sweep_dir
  os.makedirs(out, exist_ok=True)
  if copy and os.path.abspath(out) != os.path.abspath(sweep_dir):
    copy_cells(sweep_dir, out)
    command = " && ".join(filter(None, [command, f"python -m experiments.report "
                                        f"--sweep_dir={sweep_dir} --out={out} --copy_cells"]))
    sweep_dir = out
  return sweep_dir, out, command


def write_report(sweep_dir: str, out: str | None = None, command: str = "",
                 copy: bool = False) -> str:
  """REPORT.md, results.json and the plots of a sweep; a sweep named in ``REPORTS`` gets
  its own module's report."""
  name = (_read_json(os.path.join(sweep_dir, "sweep.json")) if os.path.exists(
      os.path.join(sweep_dir, "sweep.json")) else {}).get("name")
  if name in REPORTS:
    return importlib.import_module(REPORTS[name]).write_report(sweep_dir, out, command, copy)
  sweep_dir, out, command = prepare_out(sweep_dir, out, command, copy)
  index, cells, source = load(sweep_dir)
  runs = [to_run(c) for c in cells]
  table, judged = arm_table(runs), V.judge(runs)
  known = [c["unigram_val_loss"] for c in cells if c.get("unigram_val_loss") is not None]
  unigram = float(np.median(known)) if known else float("nan")
  plots = [*plot_lr_curves(runs, out, unigram), plot_profiles(cells, out), plot_residual(cells, out),
           plot_best_curves(cells, runs, out)]
  lines = [f"# Sweep `{index['name']}` at scale `{index['scale']}`", ""]
  regenerate = f"python -m experiments.report --sweep_dir={sweep_dir}" + (f" --out={out}" if out != sweep_dir else "")
  lines += ["Produced by:", "", "```bash", *([command] if command else []), regenerate, "```", "",
            f"Read from {source}.", "", index.get("description", ""), "",
            f"{len(cells)} models, {sum(r.diverged for r in runs)} diverged. {measured_time(cells)}", "",
            *single_rate_note(table),
            "## Verdicts", "",
            f"Each claim is judged by a rule in `experiments/verdicts.py` with the statistics of "
            f"`experiments/stats.py` (both tested on synthetic results in `tests/test_report.py` "
            f"and `tests/test_stats.py`). Each seed's optimum is the vertex of a parabola in "
            f"log(rate) through its best rate tried and the two beside it; arms that share seeds "
            f"are compared by per-seed differences, others by Welch's test; intervals are 95 % "
            f"t intervals for the degrees of freedom; a claim's several tests are Holm-corrected "
            f"(family-wise error {stats.ALPHA}); an equivalence is two one-sided tests against a "
            f"margin from the claim's literature. What the seeds cannot decide is inconclusive. "
            f"A diverged model counts with the loss at initialisation.", "",
            *rules_lines(index.get("rules")), ""]
  for verdict in judged:
    lines += [f"### {verdict.claim}", "", *verdict.markdown(), ""]
  lines += ["## Learning-rate curves per arm", "",
            "Final validation loss (mean ± std over seeds, a diverged seed counted at the loss "
            "at init) at each peak learning rate; ✕ = diverged seeds. Fitted optimum: the "
            "geometric mean over seeds of each seed's fitted optimal rate, and the mean of the "
            "fitted losses there, with 95 % t intervals over seeds; bracketed: seeds whose best "
            "rate tried is not the smallest or largest; learns: best loss decisively "
            f"{V.LEARNS_BY} nats below the unigram baseline. LR sensitivity (Wortsman et al. 2023), "
            "per seed over the arm's base grid (the sweep's first-round rates): the mean of "
            "min(final, initial loss) minus the best, then the mean over seeds with its interval "
            "(the same definition the sensitivity verdict uses); it depends on the grid, so it "
            "compares arms on the same base grid only.", "",
            *table_lines(table), "", "## Plots", "", *[f"![{p}]({p})" for p in plots if p]]
  path = os.path.join(out, "REPORT.md")
  with open(path, "w", encoding="utf-8") as f:
    f.write("\n".join(lines) + "\n")
  write_results(index, cells, table, judged, out)
  return path


def write_results(index: dict, cells: list[dict], table: dict, judged: list, out: str) -> str:
  """``results.json``: the numbers behind the report, small enough to commit (notebook 5)."""
  path = os.path.join(out, "results.json")
  body = {k: index.get(k) for k in ("name", "scale", "base_config", "description")}
  body |= {"arms": table, "verdicts": [dataclasses.asdict(v) for v in judged], "cells": cells}
  with open(path, "w", encoding="utf-8") as f:
    json.dump(body, f, indent=1, allow_nan=True)
  return path


def main(argv):
  del argv
  print(write_report(_SWEEP_DIR.value, _OUT.value, _COMMAND.value, _COPY.value))


if __name__ == "__main__":
  flags.mark_flag_as_required("sweep_dir")
  cli.run(main)
