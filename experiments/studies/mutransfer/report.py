"""The muTransfer ladder's report page: the verdicts, andrea120m's rates (with the command that trains it under muP), the table per arm and width, and the figures.

``python -m experiments.report --sweep_dir=results/mutransfer-cpu --out=docs/studies/mutransfer-cpu`` sends a sweep
named ``mutransfer`` here. The table and figures are the proxies study's page functions
(``experiments/studies/proxies/report.py``): the same ladder, other arms.
"""

from __future__ import annotations

from research import curves
from research import report as reporting
from research import stats
from experiments.studies.mutransfer import plan as plan_lib
from experiments.studies.mutransfer import rules
from experiments.studies.proxies import report as proxies


def rate_lines(rates: list[rules.Rate], cells: list[dict]) -> list[str]:
  o = next((c["overrides"] for c in cells if c["overrides"].get("model.parametrization") == "mup"), {})
  out = [f"## Learning rates for andrea120m (d_model {rules.TARGET_WIDTH})", ""]
  for r in rates:
    label = "muP" if r.arm == rules.MUP else "sp"
    if r.lr is None:
      out.append(f"- {label}: none ({r.method}).")
      continue
    ci = (f" [95 % CI {r.interval[0]:.2g}, {r.interval[1]:.2g}; x{r.interval[1] / r.interval[0]:.1f} "
          f"between its ends]" if r.interval else "")
    out.append(f"- {label}: {r.lr:.2g}{ci}: {r.method}" + (f"; check: {r.check}" if r.check else "") + ".")
  mup = rates[0]
  if mup.lr is not None and o:
    out += ["", "Under muP, with the base stage's multipliers:", "", "```bash",
            f"python -m experiments.run --config=andrea120m --config.model.parametrization=mup "
            f"--config.model.base_width={o.get('model.base_width')} "
            f"--config.model.readout_multiplier={o.get('model.readout_multiplier', 1.0):g} "
            f"--config.model.attention_multiplier={o.get('model.attention_multiplier', 1.0):g} "
            f"--config.train.learning_rate={mup.lr:.2g}", "```"]
  out += ["", "Caveats: the ladder's depth (2 layers), heads (2: andrea120m has 12, so its "
          "d_head at the base width differs), context, batch, steps and vocabulary are not "
          "andrea120m's; the rate carries the width rule only."]
  return out + [""]


def page(index: dict, cells: list[dict], out: str) -> reporting.Page:
  del index
  rows = [proxies.to_row(c) for c in cells]
  tab, judged, rates = proxies.table(rows), rules.judge(rows), rules.predictions(rows)
  # The table's "learns" column is this ladder's learning test (every seed below the plateau).
  for t in tab:
    t["learns"] = curves.learns_every_seed([r.run for r in rows if (r.arm, r.width) == (t["arm"], t["width"])])
  plots = [proxies.plot_lr_curves(rows, out), proxies.plot_sensitivity(tab, out),
           proxies.plot_attn_logits(rows, out)]
  method = ("Each claim is judged by a rule in `experiments/studies/mutransfer/rules.py`, committed "
            "before the run (tested on synthetic ladders in `tests/test_mutransfer.py`): per seed and "
            "width an optimum is the vertex of a parabola in log(rate); an arm learns at a width "
            "when every seed's best loss is 0.1 nats below the unigram plateau; arms are compared "
            "by per-seed differences; intervals are 95 % t intervals; one multiplicity rule, Holm "
            f"over the family of the claims (family-wise error {stats.ALPHA}), for and, apart, "
            "against them. A diverged model counts at the loss at initialisation.")
  planned = plan_lib.compute()
  sections = ["## Pre-registered plan", "", *plan_lib.lines(planned), *rate_lines(rates, cells),
              "## Per arm and width", "", *proxies.table_lines(tab), ""]
  return reporting.Page(verdicts=judged, method=method, sections=sections, plots=plots,
                        results={"table": tab, "verdicts": judged, "rates": rates,
                                 "plan": {"seeds": planned.seeds, "not_powered": list(planned.not_powered),
                                          "minutes": planned.total_minutes,
                                          "budget_minutes": planned.budget_minutes}})
