"""The z-loss study's report page: the verdicts, the pre-registered plan, each seed's pair (plain, z-loss 1e-4 and 1e-3), the 1e-3 arm reported beside the claim, and the probe's table and figure of log Z.

``python -m experiments.report --sweep_dir=results/zloss-cpu --out=docs/studies/zloss-cpu`` sends a sweep named
``zloss`` here. A cell is read as the probe reads it (``zloss_probe.report.to_row``), and the
per-setting table and figure are the probe's.
"""

from __future__ import annotations

from research import report as reporting
from research import stats
from experiments.studies.zloss import plan as plan_lib
from experiments.studies.zloss import rules
from experiments.studies.zloss_probe import report as probe


def seed_rows(rows: list[rules.Row]) -> list[dict]:
  """Per rate and seed: each arm's log Z over log V and final loss, and the plain model's side."""
  out = []
  for rate in rules.rates(rows):
    judged, reported = rules.pairs(rows, rate), rules.pairs(rows, rate, rules.REPORTED_Z)
    for seed, plain in judged.plain.items():
      arms = {"plain": plain, "z": judged.other.get(seed), "z_reported": reported.other.get(seed)}
      row = {"learning_rate": rate, "seed": seed, "runaway": rules.runaway(plain)}
      for name, r in arms.items():
        done = rules.read(r)
        row[f"{name}_excess"] = rules.excess(r) if done else None
        row[f"{name}_final"] = r.final if done else None
      out.append(row)
  return out


def seed_lines(table: list[dict]) -> list[str]:
  fmt = lambda x, f: "—" if x is None else format(x, f)
  side = {1: "above", -1: "below", 0: "no"}
  out = ["## Per seed", "",
         f"Each seed's three models at one rate: log Z at the end minus log V (a uniform "
         f"softmax's), whether the plain model ran away (past the band [0, log V] by "
         f"{rules.RUNAWAY_NATS:g} nats, and on which side), and the final validation loss (— "
         f"where a model did not complete).", "",
         f"| rate | seed | plain: log Z - log V | ran away | z-loss {rules.JUDGED_Z:g} | z-loss "
         f"{rules.REPORTED_Z:g} | plain loss | z-loss {rules.JUDGED_Z:g} loss | z-loss "
         f"{rules.REPORTED_Z:g} loss |", "|---" * 9 + "|"]
  for t in table:
    out.append(f"| {t['learning_rate']:g} | {t['seed']} | {fmt(t['plain_excess'], '+.2f')} | "
               f"{side[t['runaway']]} | {fmt(t['z_excess'], '+.2f')} | "
               f"{fmt(t['z_reported_excess'], '+.2f')} | {fmt(t['plain_final'], '.3f')} | "
               f"{fmt(t['z_final'], '.3f')} | {fmt(t['z_reported_final'], '.3f')} |")
  return out + [""]


def reported_arm(rows: list[rules.Row]) -> tuple[list[str], list[dict]]:
  """The z-loss 1e-3 arm against the plain model, on the seeds where the plain model ran away:
  its overshoot and its loss difference with their intervals, reported, not judged."""
  lines = [f"## z-loss {rules.REPORTED_Z:g} (reported, not judged)", "",
           f"Not part of the pre-registered claim: the same quantities as the claim's for the "
           f"z-loss {rules.REPORTED_Z:g} arm, on the seeds where the plain model ran away.", ""]
  results = []
  for rate in rules.rates(rows):
    p = rules.pairs(rows, rate, rules.REPORTED_Z)
    _, over = p.overshoots()
    plain, other = p.losses()
    o = stats.one_sample(list(over.values()))
    d = stats.paired(other, plain)
    lines.append(f"- {p.summary()}: overshoot {o.text()}; final loss z-loss - plain {d.text()}"
                 + (f"; did not complete at seeds {', '.join(map(str, p.lost()))}" if p.lost() else "")
                 + ".")
    results.append({"learning_rate": rate, "runaway_seeds": list(p.sides), "overshoot": o,
                    "loss_difference": d, "not_completed": p.lost()})
  return lines + [""], results


def page(index: dict, cells: list[dict], out: str) -> reporting.Page:
  del index
  rows = [probe.to_row(c) for c in cells]
  judged = rules.judge(rows)
  table = seed_rows(rows)
  arm_lines, arm_results = reported_arm(rows)
  planned = plan_lib.compute()
  method = ("Each claim is judged at each rate by a rule in `experiments/studies/zloss/rules.py`, "
            "committed before the run (tested on synthetic rows in `tests/test_zloss.py`): on the "
            "seeds where the plain model's log Z ran away, each against the z-loss model of the "
            "same seed and rate; 95 % t intervals over seeds; one multiplicity rule, Holm over "
            f"the family of the tests judged (family-wise error {stats.ALPHA}), for and, apart, "
            "against them. Where the plain model's log Z did not run away in enough seeds, the "
            "claim cannot be judged at that rate, which is not a failure to reproduce it.")
  settings = probe.table_lines(rows)
  settings[2:2] = ["The z-loss probe's table, over this study's models: its state column is the "
                   "probe's finding rule (grows, stays or mixed over the seeds), not this "
                   "study's.", ""]
  sections = ["## Pre-registered plan", "", *plan_lib.lines(planned), *seed_lines(table),
              *arm_lines, *settings]
  return reporting.Page(verdicts=judged, method=method, sections=sections,
                        plots=[probe.plot_excess(rows, out)],
                        results={"verdicts": judged, "seeds": table, "reported_arm": arm_results,
                                 "plan": {"seeds": planned.seeds, "needed": planned.needed,
                                          "not_powered": list(planned.not_powered),
                                          "minutes": planned.total_minutes,
                                          "budget_minutes": planned.budget_minutes}})
