"""The z-loss probe's report page: the finding, log Z per setting and rate against a uniform softmax's, and a figure of it.

``python -m experiments.report --sweep_dir=results/zloss_probe-cpu --out=docs/studies/zloss_probe-cpu`` sends a sweep named
``zloss_probe`` here; results.json's ``finding`` is where a z-loss claim can be judged.
"""

from __future__ import annotations

import math
import statistics

from research import report as reporting
from experiments.studies.zloss_probe import rules

NAN = float("nan")


def to_row(c: dict) -> rules.Row:
  """A cell record (``cells.cell_record``) as the rule sees it."""
  o, done = c["overrides"], c["status"] == "completed"
  start, end = (c.get(k) or {} for k in ("init", "end"))
  value = lambda d: NAN if d.get("log_z") is None else float(d["log_z"])
  return rules.Row(int(o["model.d_model"]), int(o["model.vocab_size"]), float(o["train.weight_decay"]),
                   float(o["train.z_loss"]),
                   float(c["learning_rate"]), int(c["seed"]), done, value(start),
                   value(end) if done else NAN, float(c["final_val_loss"]) if done else NAN)


def table_lines(rows: list[rules.Row]) -> list[str]:
  out = ["## log Z per setting and rate", "",
         "Per (width, weight decay, z-loss, rate), over the seeds: the mean log Z of the output "
         "softmax at step 0 and at the end (medians), the excess (log Z at the end minus log V, a "
         "uniform softmax's: median, and each seed's), the rule's state, and the final validation "
         "loss (median; — where a model diverged).", "",
         "| d_model | weight decay | z-loss | rate | log Z start | log Z end | excess over log V (per seed) | state | final loss |",
         "|---" * 9 + "|"]
  med = lambda xs: statistics.median(xs) if xs else NAN
  for (w, wd, z, lr), rs in rules.settings(rows).items():
    fin = lambda f: [f(r) for r in rs if math.isfinite(f(r))]
    seeds = ", ".join("—" if not math.isfinite(r.excess) else f"{r.excess:+.2f}" for r in rs)
    loss = med(fin(lambda r: r.final))
    out.append(f"| {w} | {wd:g} | {z:g} | {lr:g} | {med(fin(lambda r: r.log_z_init)):.2f} | "
               f"{med(fin(lambda r: r.log_z_end)):.2f} | {rules.median_excess(rs):+.2f} ({seeds}) | "
               f"{rules.state(rs)} | {'—' if math.isnan(loss) else format(loss, '.3f')} |")
  return out + [""]


def plot_excess(rows: list[rules.Row], out: str) -> str | None:
  by = rules.settings(rows)
  if not by:
    return None
  widths = sorted({k[0] for k in by})
  fig = reporting.figure(figsize=(5 * len(widths), 3.8))
  for i, w in enumerate(widths):
    ax = fig.add_subplot(1, len(widths), i + 1)
    arms = sorted({(wd, z) for (ww, wd, z, _) in by if ww == w}, key=lambda a: (-a[0], a[1]))
    for j, (wd, z) in enumerate(arms):
      pts = sorted((lr, rules.median_excess(rs)) for (ww, d, zz, lr), rs in by.items() if (ww, d, zz) == (w, wd, z))
      ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-" if z == 0 else "s--", color=f"C{j}",
              label=f"weight decay {wd:g}, z-loss {z:g}")
    for bound in (-rules.GROWS_NATS, rules.GROWS_NATS):
      ax.axhline(bound, color="grey", lw=0.8, ls=":")
    ax.set(xscale="log", xlabel="peak learning rate", ylabel="log Z at the end - log V (nats)",
           title=f"d_model {w}")
    ax.legend(fontsize=7)
  return reporting.save(fig, out, "log_z_excess.png")


def page(index: dict, cells: list[dict], out: str) -> reporting.Page:
  del index
  rows = [to_row(c) for c in cells]
  finding = rules.find(rows)
  method = (f"The finding rule (`experiments/studies/zloss_probe/rules.py`, tested in "
            f"`tests/test_zloss_probe.py`; changed after the probe ran, see that file, so the "
            f"finding is exploratory): {rules.RULE}.")
  setting = {"verdict": finding.verdict, "width": finding.width,
             "grows": [{"weight_decay": wd, "learning_rate": lr} for wd, lr in finding.grows]}
  return reporting.Page(verdicts=rules.judge(rows), method=method, sections=table_lines(rows),
                        plots=[plot_excess(rows, out)], results={"finding": setting})
