"""The confirmatory norm x MLP study's report page: the pre-registered plan beside the verdicts, what was revised after the exploratory data, the code that trained each cell, and the exploratory study's table and figures.

``python -m experiments.report --sweep_dir=results/norm_mlp_confirm-cpu --out=docs/studies/norm_mlp_confirm-cpu`` sends a sweep
named ``norm_mlp_confirm`` here. The verdicts are ``rules.py``'s (frozen before the run);
the plan is ``plan.py``'s, recomputed from the committed exploratory study (it is a function
of committed data alone, so it is the plan the run was made with); the table and figures are
the exploratory study's page functions (``experiments/studies/norm_mlp/report.py``).
"""

from __future__ import annotations

import subprocess

import numpy as np

from research import cells as cells_lib
from research import report as reporting
from research import stats
from experiments.studies.norm_mlp import report as exploratory
from experiments.studies.norm_mlp_confirm import plan as plan_lib
from experiments.studies.norm_mlp_confirm import rules


def in_history(commit: str, root: str = plan_lib.ROOT) -> bool:
  """Whether ``commit`` is a commit of this repository's history."""
  try:
    subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=root, check=True,
                   capture_output=True, timeout=10)
    return True
  except (OSError, subprocess.SubprocessError):
    return False


def code_lines(cells: list[dict]) -> list[str]:
  """Which code trained the cells: each commit, how many cells, whether the tree was clean,
  whether the commit is in the repository's history."""
  seen: dict[tuple, int] = {}
  for c in cells:
    code = c.get("code") or {}
    key = (code.get("commit"), code.get("clean"), bool(c.get("code_earlier")))
    seen[key] = seen.get(key, 0) + 1
  out = ["## The code that trained the cells", ""]
  for (commit, clean, resumed), n in sorted(seen.items(), key=lambda kv: -kv[1]):
    if commit is None:
      out.append(f"- {n} cells: **no commit recorded**.")
      continue
    out.append(f"- {n} cells: commit `{commit}`, "
               + ("clean tree" if clean else "**uncommitted changes at run time**")
               + ("" if in_history(commit) else ", **not in this repository's history**")
               + ("; resumed by other code (see code_earlier)" if resumed else "") + ".")
  return out + [""]


def page(index: dict, cells: list[dict], out: str) -> reporting.Page:
  del index
  runs = [cells_lib.to_run(c) for c in cells]
  table, judged = exploratory.arm_table(runs), rules.judge(runs)
  known = [c["unigram_val_loss"] for c in cells if c.get("unigram_val_loss") is not None]
  unigram = float(np.median(known)) if known else float("nan")
  plots = [*exploratory.plot_lr_curves(runs, out, unigram), exploratory.plot_profiles(cells, out),
           exploratory.plot_residual(cells, out), exploratory.plot_best_curves(cells, runs, out)]
  planned = plan_lib.compute()
  method = (
      f"Each claim is judged by a rule in `experiments/studies/norm_mlp_confirm/rules.py`, "
      f"committed before the run with the grid and the plan (tested on synthetic results in "
      f"`tests/test_norm_mlp_confirm.py`). One multiplicity rule across the study: Holm over "
      f"the family of the claims the plan powered (family-wise error {stats.ALPHA}), for the "
      f"tests for the claims and, apart, the tests against them; claims the plan could not "
      f"power are **not powered**, declared before the run, their figures reported and not "
      f"judged. Per seed: optima are parabola vertices in log(rate) over the one grid; arms "
      f"that share seeds are compared by per-seed differences; intervals are 95 % t "
      f"intervals; an equivalence is two one-sided tests against a margin from the claim's "
      f"literature. Leave-one-seed-out is reported from {rules.LOSO_MIN_SEEDS} seeds. A "
      f"diverged model counts with the loss at initialisation.")
  notes = ["## Pre-registered plan", "", *plan_lib.lines(planned),
           f"Frozen in the rules before the run, not powered: {', '.join(rules.NOT_POWERED)}.", "",
           "## Rules revised after the exploratory data", "", *rules.REVISIONS, ""]
  sections = [*code_lines(cells), "## Learning-rate curves per arm", "",
              "As in the exploratory report: final validation loss (mean ± std over seeds) at "
              "each rate of the one grid, the fitted optimum and the LR sensitivity per arm.", "",
              *exploratory.table_lines(table), ""]
  return reporting.Page(verdicts=judged, method=method, sections=sections, plots=plots,
                        results={"arms": table, "verdicts": judged,
                                 "plan": {"not_powered": list(planned.not_powered),
                                          "seeds": planned.seeds, "alpha": planned.alpha,
                                          "family": planned.family,
                                          "minutes": planned.minutes}},
                        notes=notes)
