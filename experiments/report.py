"""Write a sweep's report: ``python -m experiments.report --sweep_dir=runs/sweeps/norm_mlp-cpu``.

Reads ``sweep.json`` and every cell's ``summary.json``, ``metrics.jsonl`` and
``diagnostics.jsonl``; writes ``REPORT.md`` and its PNG plots into ``--out`` (default: the
sweep directory). Each literature claim (brief, section 4) gets a verdict computed from
the numbers by the rules written next to it: reproduced, not reproduced, or inconclusive.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict

import numpy as np
from absl import flags

from andrea_jax import diagnostics
from andrea_jax import errors
from andrea_jax import train
from experiments import cli

_SWEEP_DIR = flags.DEFINE_string("sweep_dir", None, "directory written by experiments.sweep")
_OUT = flags.DEFINE_string("out", None, "where REPORT.md and plots go (default: sweep_dir)")
_COMMAND = flags.DEFINE_string("command", "", "the command that produced the sweep, for the report")


# ----------------------------------------------------------------------------- loading


def load_cells(sweep_dir: str) -> tuple[dict, list[dict]]:
  path = os.path.join(sweep_dir, "sweep.json")
  if not os.path.exists(path):
    raise errors.ConfigError(f"{path} not found: --sweep_dir must be a directory written by experiments.sweep")
  with open(path, encoding="utf-8") as f:
    index = json.load(f)
  cells = []
  for cell in index["cells"]:
    d = os.path.join(sweep_dir, cell["name"])
    summary_path = os.path.join(d, "summary.json")
    if not os.path.exists(summary_path):
      continue
    with open(summary_path, encoding="utf-8") as f:
      cell["summary"] = json.load(f)
    cell["metrics"] = train.read_metrics(d)
    cell["diagnostics"] = diagnostics.read(d)
    cells.append(cell)
  return index, cells


def by_arm(cells: list[dict]) -> dict[str, list[dict]]:
  arms = defaultdict(list)
  for cell in cells:
    for arm in cell["arms"]:
      arms[arm].append(cell)
  return dict(arms)


def final_losses(cells: list[dict]) -> list[float]:
  """Final validation losses of the cells that completed (diverged ones have none)."""
  return [c["summary"]["final_val_loss"] for c in cells
          if c["summary"]["status"] == "completed" and c["summary"]["final_val_loss"] is not None]


def mean_std(values: list[float]) -> tuple[float, float]:
  if not values:
    return float("nan"), float("nan")
  return float(np.mean(values)), float(np.std(values, ddof=1)) if len(values) > 1 else 0.0


def fmt(values: list[float]) -> str:
  m, s = mean_std(values)
  return "—" if np.isnan(m) else f"{m:.3f} ± {s:.3f}"


# ----------------------------------------------------------------------------- plots


def _plt():
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  return plt


def plot_curves(arms: dict, out: str) -> str:
  plt = _plt()
  names = sorted(a for a in arms if a.startswith("norm:")) or sorted(arms)
  fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
  for ax, key, title in ((axes[0], "loss", "train loss"), (axes[1], "val_loss", "validation loss")):
    for i, arm in enumerate(names):
      for j, cell in enumerate(arms[arm]):
        pts = [(r["step"], r[key]) for r in cell["metrics"] if key in r and np.isfinite(r[key])]
        if pts:
          ax.plot(*zip(*pts), color=f"C{i}", alpha=0.8, lw=1, label=arm if j == 0 else None)
    ax.set(title=title, xlabel="step")
  axes[0].set_ylabel("nats / token")
  if axes[1].get_legend_handles_labels()[0]:
    axes[1].legend(fontsize=8)
  return _save(fig, out, "loss_curves.png")


def plot_mlp(arms: dict, out: str) -> str:
  plt = _plt()
  fig, ax = plt.subplots(figsize=(6, 4))
  for series, label in (("mlp_width", "fixed d_model (size grows with r)"),
                        ("mlp_matched", "parameter-matched (d_model shrinks with r)")):
    pts = sorted((float(a.split(":")[1]), *mean_std(final_losses(c)))
                 for a, c in arms.items() if a.startswith(series + ":"))
    if pts:
      r, m, s = zip(*pts)
      ax.errorbar(r, m, yerr=s, marker="o", capsize=3, label=label)
  if "swiglu" in arms:
    m, s = mean_std(final_losses(arms["swiglu"]))
    ax.errorbar([8 / 3], [m], yerr=[s], marker="*", ms=12, ls="", capsize=3, label="SwiGLU, r = 8/3")
  ax.set(xscale="log", xlabel="MLP ratio r = d_ff / d_model", ylabel="final validation loss",
         title="Loss vs MLP expansion ratio")
  ax.set_xticks([1, 2, 4, 8], ["1", "2", "4", "8"])
  if ax.get_legend_handles_labels()[0]:
    ax.legend(fontsize=8)
  return _save(fig, out, "mlp_ratio.png")


def init_profile(cells: list[dict], key: str) -> np.ndarray | None:
  """Mean over cells of the step-0 per-layer profile ``key``."""
  rows = [c["diagnostics"][0][key] for c in cells if c["diagnostics"] and c["diagnostics"][0]["step"] == 0]
  return np.mean(rows, axis=0) if rows else None


def plot_profiles(arms: dict, out: str) -> str | None:
  plt = _plt()
  pairs = [(n, arms.get(f"norm:{n}/warmup", []) + arms.get(f"norm:{n}/no-warmup", []))
           for n in ("pre", "post")]
  fig, axes = plt.subplots(1, 3, figsize=(14, 4))
  drawn = False
  for i, (norm, cells) in enumerate(pairs):
    for ax, key, title in ((axes[0], "grad_attn", "attention weights"),
                           (axes[1], "grad_mlp", "MLP weights")):
      prof = init_profile(cells, key)
      if prof is not None:
        ax.plot(range(1, len(prof) + 1), prof, "o-", color=f"C{i}", label=f"{norm}-LN")
        ax.set(title=f"gradient norm at init: {title}", xlabel="layer", yscale="log")
        drawn = True
    prof = init_profile(cells, "residual_norm")
    if prof is not None:
      axes[2].plot(range(len(prof)), prof, "o-", color=f"C{i}", label=f"{norm}-LN")
      axes[2].set(title="residual-stream norm at init", xlabel="after block (0 = embedding)")
  for ax in axes:
    if ax.get_legend_handles_labels()[0]:
      ax.legend(fontsize=8)
  return _save(fig, out, "init_profiles.png") if drawn else None


def _save(fig, out: str, name: str) -> str:
  fig.tight_layout()
  fig.savefig(os.path.join(out, name), dpi=110)
  _plt().close(fig)
  return name


# ----------------------------------------------------------------------------- verdicts


def separated(a: list[float], b: list[float]) -> bool:
  """a's mean exceeds b's by more than twice their pooled spread (and by > 0.02 nats)."""
  (ma, sa), (mb, sb) = mean_std(a), mean_std(b)
  return ma - mb > max(2 * np.hypot(sa, sb), 0.02)


def claim_warmup(arms: dict) -> list[str]:
  get = lambda k: arms.get(f"norm:{k}", [])
  post_no, post_w, pre_no, pre_w = (get("post/no-warmup"), get("post/warmup"),
                                    get("pre/no-warmup"), get("pre/warmup"))
  if not (post_no and post_w and pre_no and pre_w):
    return ["Inconclusive: the norm x warmup arms are not all present."]
  div = lambda cs: sum(c["summary"]["status"] == "diverged" for c in cs)
  post_hurt = div(post_no) > div(post_w) or separated(final_losses(post_no), final_losses(post_w))
  pre_hurt = div(pre_no) > div(pre_w) or separated(final_losses(pre_no), final_losses(pre_w))
  verdict = ("Reproduced" if post_hurt and not pre_hurt else
             "Not reproduced" if not post_hurt else "Inconclusive")
  unigram = post_w[0]["summary"]["unigram_val_loss"]
  stuck = [name for name, cs in (("without", post_no), ("with", post_w))
           if final_losses(cs) and mean_std(final_losses(cs))[0] > unigram - 0.05]
  notes = []
  if stuck:
    notes.append(f"Post-LN {' and '.join(stuck)} warmup ended within 0.05 nats of the unigram "
                 f"baseline ({unigram:.3f}): it learned no more than token frequencies at this "
                 f"learning rate, so here warmup alone did not rescue it.")
  if pre_hurt:
    notes.append("Pre-LN did train without warmup, but finished worse than with it.")
  return [f"**{verdict}.** Post-LN: {fmt(final_losses(post_no))} without warmup "
          f"({div(post_no)} diverged) vs {fmt(final_losses(post_w))} with ({div(post_w)} diverged). "
          f"Pre-LN: {fmt(final_losses(pre_no))} without vs {fmt(final_losses(pre_w))} with.",
          *notes,
          "Rule: reproduced when removing warmup hurts post-LN (more divergences, or a mean "
          "worse by more than twice the pooled standard deviation) and does not hurt pre-LN."]


def slope_ratio(profile: np.ndarray | None) -> float:
  return float("nan") if profile is None else float(profile[-1] / profile[0])


def claim_gradients(arms: dict) -> list[str]:
  cells = lambda n: arms.get(f"norm:{n}/warmup", []) + arms.get(f"norm:{n}/no-warmup", [])
  post = slope_ratio(init_profile(cells("post"), "grad_mlp"))
  pre = slope_ratio(init_profile(cells("pre"), "grad_mlp"))
  if np.isnan(post) or np.isnan(pre):
    return ["Inconclusive: no step-0 diagnostics."]
  verdict = "Reproduced" if post > 1.5 and 0.5 < pre < 1.5 else "Not reproduced"
  return [f"**{verdict}.** Gradient norm of the MLP weights at init, last layer / first layer: "
          f"post-LN {post:.2f}, pre-LN {pre:.2f}.",
          "Rule: reproduced when post-LN's ratio exceeds 1.5 (growing toward the output) and "
          "pre-LN's lies within 0.5-1.5 (flat)."]


def claim_activations(arms: dict) -> list[str]:
  cells = lambda n: arms.get(f"norm:{n}/warmup", []) + arms.get(f"norm:{n}/no-warmup", [])
  pre = init_profile(cells("pre"), "residual_norm")
  post = init_profile(cells("post"), "residual_norm")
  if pre is None or post is None:
    return ["Inconclusive: no step-0 diagnostics."]
  # The last probe of each pre-LN cell (update-size rows carry no residual_norm).
  end_pre = [next((r["residual_norm"] for r in reversed(c["diagnostics"]) if "residual_norm" in r), None)
             for c in cells("pre")]
  end_pre = [r for r in end_pre if r]
  growth_end = float(np.mean([r[-1] / r[1] for r in end_pre])) if end_pre else float("nan")
  return [f"Residual-stream norm, last block / first block, at init: pre-LN "
          f"{pre[-1] / pre[1]:.2f}, post-LN {post[-1] / post[1]:.2f}; pre-LN at the end of "
          f"training: {growth_end:.2f}. "
          + ("**Reproduced**: pre-LN's stream grows with depth." if growth_end > 1.5 or pre[-1] / pre[1] > 1.5
             else "**Not reproduced** at this depth and length of training."),
          "Rule: reproduced when pre-LN's last/first ratio exceeds 1.5 at init or at the end."]


def claim_mlp(arms: dict) -> list[str]:
  lines = []
  matched = {float(a.split(":")[1]): final_losses(c) for a, c in arms.items() if a.startswith("mlp_matched:")}
  width = {float(a.split(":")[1]): final_losses(c) for a, c in arms.items() if a.startswith("mlp_width:")}
  if matched:
    means = {r: mean_std(v)[0] for r, v in sorted(matched.items()) if v}
    spread = (max(means.values()) - min(means.values())) / min(means.values()) * 100
    lines.append(f"Parameter-matched: final loss by ratio {', '.join(f'r={r:g}: {m:.3f}' for r, m in means.items())}; "
                 f"spread {spread:.1f} % of the best. "
                 + ("**Reproduced** (within a few percent, Kaplan et al.)." if spread < 5 else
                    "**Not reproduced** (spread of 5 % or more)."))
  if width:
    means = [mean_std(width[r])[0] for r in sorted(width)]
    gains = np.diff(means)
    monotone = all(g < 0 for g in gains)
    diminishing = all(abs(gains[i + 1]) <= abs(gains[i]) for i in range(len(gains) - 1))
    lines.append(f"Fixed width: {', '.join(f'r={r:g}: {m:.3f}' for r, m in zip(sorted(width), means))}. "
                 + ("**Reproduced**: wider is better with diminishing returns." if monotone and diminishing
                    else "**Partly reproduced**: wider is better, but the returns do not shrink monotonically."
                    if monotone else "**Not reproduced**: loss does not fall monotonically with the ratio."))
  if "swiglu" in arms and 4.0 in width:
    sw, ge = mean_std(final_losses(arms["swiglu"])), mean_std(width[4.0])
    diff = ge[0] - sw[0]
    lines.append(f"SwiGLU (r=8/3) {sw[0]:.3f} ± {sw[1]:.3f} vs GELU (r=4) {ge[0]:.3f} ± {ge[1]:.3f}: "
                 f"SwiGLU better by {diff:+.3f} nats (Shazeer: about +0.04). "
                 + ("**Reproduced**." if separated(width[4.0], final_losses(arms["swiglu"]))
                    else "**Inconclusive** at this scale (difference within twice the seed spread)."))
  return lines or ["Inconclusive: no MLP arms."]


# ----------------------------------------------------------------------------- the report


def write_report(sweep_dir: str, out: str | None = None, command: str = "") -> str:
  out = out or sweep_dir
  os.makedirs(out, exist_ok=True)
  index, cells = load_cells(sweep_dir)
  arms = by_arm(cells)
  plots = [plot_curves(arms, out), plot_mlp(arms, out), plot_profiles(arms, out)]
  lines = [f"# Sweep `{index['name']}` at scale `{index['scale']}`", ""]
  if command:
    lines += ["Produced by:", "", "```bash", command,
              f"python -m experiments.report --sweep_dir={sweep_dir}" + (f" --out={out}" if out != sweep_dir else ""),
              "```", ""]
  lines += [index.get("description", ""), "",
            f"{len(cells)} of {len(index['cells'])} cells have finished.", "",
            "## Final validation loss per arm", "",
            "| arm | cells | final val loss (mean ± std) | diverged | unigram baseline |",
            "|---|---|---|---|---|"]
  for arm in sorted(arms):
    cs = arms[arm]
    div = [c for c in cs if c["summary"]["status"] == "diverged"]
    at = ", ".join(str(c["summary"]["diverged_at_step"]) for c in div)
    lines.append(f"| {arm} | {len(cs)} | {fmt(final_losses(cs))} | {len(div)}"
                 f"{f' (at step {at})' if div else ''} | {cs[0]['summary']['unigram_val_loss']:.3f} |")
  lines += ["", "## What the literature predicts, and what these runs show", "",
            "### Post-LN needs warmup; pre-LN does not (Xiong et al. 2020; Liu et al. 2020)", "",
            *claim_warmup(arms), "",
            "### At init, post-LN's gradients grow toward the output; pre-LN's are flat (Xiong et al. 2020)", "",
            *claim_gradients(arms), "",
            "### Pre-LN's residual stream grows with depth", "", *claim_activations(arms), "",
            "### MLP ratio (Kaplan et al. 2020) and SwiGLU (Shazeer 2020)", "",
            *[f"- {l}" for l in claim_mlp(arms)], "", "## Plots", ""]
  lines += [f"![{p}]({p})" for p in plots if p]
  lines += ["", "## Cells", "", "| cell | arms | status | steps | final val loss | wall time (s) |",
            "|---|---|---|---|---|---|"]
  for c in cells:
    s = c["summary"]
    val = "—" if s["final_val_loss"] is None else f"{s['final_val_loss']:.3f}"
    lines.append(f"| {c['name']} | {', '.join(c['arms'])} | {s['status']} | {s['steps']} | {val} | "
                 f"{s['wall_time_s']:.0f} |")
  path = os.path.join(out, "REPORT.md")
  with open(path, "w", encoding="utf-8") as f:
    f.write("\n".join(lines) + "\n")
  write_results(index, cells, out)
  return path


def write_results(index: dict, cells: list[dict], out: str) -> str:
  """``results.json``: the numbers behind the report, small enough to commit (notebook 5)."""
  probe = lambda c, i: next((r for r in (c["diagnostics"][::-1] if i < 0 else c["diagnostics"])
                             if "residual_norm" in r), {})
  rows = []
  for c in cells:
    init, end = probe(c, 0), probe(c, -1)
    rows.append({
        "name": c["name"], "arms": c["arms"], "seed": c["seed"], "overrides": c["overrides"],
        "status": c["summary"]["status"], "steps": c["summary"]["steps"],
        "final_val_loss": c["summary"]["final_val_loss"],
        "unigram_val_loss": c["summary"]["unigram_val_loss"],
        "n_params": c["summary"]["n_params"], "wall_time_s": c["summary"]["wall_time_s"],
        "train_curve": [[r["step"], r["loss"]] for r in c["metrics"] if "loss" in r],
        "val_curve": [[r["step"], r["val_loss"]] for r in c["metrics"] if "val_loss" in r],
        "init": {k: init.get(k) for k in ("grad_attn", "grad_mlp", "residual_norm")},
        "end": {"step": end.get("step"), **{k: end.get(k) for k in ("grad_attn", "grad_mlp", "residual_norm")}},
        "early_updates": [{k: r[k] for k in ("step", "update_attn", "update_mlp")}
                          for r in c["diagnostics"] if "update_mlp" in r],
    })
  path = os.path.join(out, "results.json")
  with open(path, "w", encoding="utf-8") as f:
    json.dump({k: index[k] for k in ("name", "scale", "base_config", "description")} | {"cells": rows},
              f, indent=1)
  return path


def main(argv):
  del argv
  print(write_report(_SWEEP_DIR.value, _OUT.value, _COMMAND.value))


if __name__ == "__main__":
  flags.mark_flag_as_required("sweep_dir")
  cli.run(main)
