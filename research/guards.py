"""Guards on what a report may say, applied to every study's verdicts after its frozen rules judged them.

Not part of the rules' identity: a changed verdict is shown beside the frozen one, marked
exploratory. ``learning`` (no model learns: cannot be judged), ``title`` (states the
threshold) and ``header`` (exploratory when ``SAW_DATA``).
"""

from __future__ import annotations

import dataclasses
import math
import re

from research import claims
from research import curves
from research import kinds

# Claim fields holding the rule's threshold, and how a title states each.
THRESHOLDS = {"margin": "margin {:g}", "bound": "bound {:g}", "against": "margin {:g}"}


def judged_records(claim, data: kinds.Data) -> list:
  """The records ``claim`` is judged on: its arms' at its ``at`` point and ``rate`` if named; a
  finding's at the point and rates it found."""
  at = dict(claim.at) if isinstance(claim.at, tuple) else {}  # "largest": no single point
  rates = None if claim.rate is None else {claim.rate}
  found = claim.find(data)  # (verdict, point, [(arm, rate)], lines) of a finding
  if found is not None:
    _, point, settings, _ = found
    at, rates = {**at, **point}, ({lr for _, lr in settings} or None)
  arms = set(claim.needs())
  return list({id(rec): rec for arm, point, run, rec in data.rows
               if arm in arms and all(dict(point).get(k) == v for k, v in at.items())
               and (rates is None or run.lr in rates)}.values())


def learning(claim, data: kinds.Data, verdict: claims.Verdict) -> claims.Verdict:
  """``verdict``, or cannot be judged where none of its models learns (``kinds.model_learns``)."""
  if verdict.verdict in ("Not powered", kinds.CANNOT_JUDGE) or "at initialisation" in claim.quantity_text():
    return verdict  # left as it is, or no training to guard
  recs = judged_records(claim, data)
  if not recs or any(map(kinds.model_learns, recs)):
    return verdict
  rates = sorted({float(r["learning_rate"]) for r in recs if r.get("learning_rate") is not None})
  where = f" at rate {', '.join(f'{lr:g}' for lr in rates)}" if len(rates) <= 2 else ""
  line = (f"Under the frozen rules: {verdict.verdict}. Cannot be judged by a guard added after the data "
          f"(issue 58), so this verdict is exploratory: 0 of {len(recs)} models of {', '.join(claim.needs())}"
          f"{where} learn (each diverged or ended within {curves.LEARNS_BY:g} nats of the unigram).")
  return dataclasses.replace(verdict, verdict=kinds.CANNOT_JUDGE, lines=[line, *verdict.lines],
                             robustness="")


def _states(title: str, value: float) -> bool:
  return re.search(rf"(?<![\d.]){re.escape(format(abs(value), 'g'))}(?![\d])", title) is not None


def title(claim) -> str:
  """The claim's text, plus the ``THRESHOLDS`` its rule's text names where the claim omits them."""
  rule = claim.rule()
  found = []
  for name, form in THRESHOLDS.items():
    v = getattr(claim, name, None)
    v = abs(v) if isinstance(v, (int, float)) and math.isfinite(v) else 0.0  # not a method (Ladder's bound)
    in_rule = not rule or f"log {round(math.exp(v), 2):g}" in rule or any(  # the rule states v, to the usual digits
        _states(rule, float(x)) for x in (f"{v:g}", f"{v:.3f}", f"{v:.3g}", f"{v:.2f}"))
    if v and in_rule and all(abs(v - w) > 1e-12 for _, w in found):
      found.append((form, v))
  if any(_states(claim.claim, v) or _states(claim.claim, math.exp(v)) for _, v in found):
    return claim.claim
  stated = [form.format(v) if len(format(v, "g")) <= 6 else  # a log-scale margin also as its factor
            f"{form.format(float(format(v, '.3g')))} = log {math.exp(v):.3g}" for form, v in found]
  return claim.claim + (f" ({', '.join(stated)})" if stated else "")


def apply(study, data: kinds.Data, verdicts: list) -> tuple[list, list[tuple[str, str, str]]]:
  """``(verdicts under the guards, [(claim, frozen verdict, guarded verdict)] where they differ)``."""
  by_text = {c.claim: c for c in study.claims}
  out = [learning(by_text[v.claim], data, v) if v.claim in by_text else v for v in verdicts]
  return out, [(v.claim, v.verdict, g.verdict) for v, g in zip(verdicts, out) if g.verdict != v.verdict]


def header(design: str, saw_data: tuple[str, ...], changed: list) -> str:
  """The report's design line: confirmatory becomes exploratory with ``saw_data``; guard changes noted."""
  if saw_data and design.strip("*").lower().startswith("confirmatory"):
    design = (f"**Exploratory.** Declared confirmatory, but inputs to its headline saw the data: "
              f"{'; '.join(saw_data)}.")
  if changed:
    design += (f" **{len(changed)} verdict{'s' * (len(changed) != 1)} changed under guards added "
               f"after the data (issue 58): those are exploratory.**")
  return design

