"""Post-hoc readings of a contrast: its sign at each value of an axis (`Gaps`), one claim re-decided at another margin (`AtMargin`), and what the init-gradient claims cite and measure (`MlpGradientNote`).

``effect_text`` and ``sign_text`` word an effect for these readings and rates.py's.
"""

from __future__ import annotations

import dataclasses


from research import curves
from research import kinds
from research import stats
from research.posthoc import Note, Reading


def effect_text(e: stats.Effect, unit: str) -> str:
  """``+0.016 [+0.007, +0.026] nats, p 0.004``: estimate, 95 % t interval, ``unit``, two-sided p."""
  if not e.defined:
    return f"{e.diff:+.3f} {unit} (no interval)"
  return f"{e.diff:+.3f} [{e.lo:+.3f}, {e.hi:+.3f}] {unit}, p {e.p:.2g}"


def sign_text(e: stats.Effect, lower: str = "lower", higher: str = "higher") -> str:
  """Which way the interval lies: decisively ``lower`` or ``higher``, or undecided."""
  if not e.defined or e.lo <= 0 <= e.hi:
    return "not decisively either way"
  return f"decisively {higher if e.lo > 0 else lower}"


@dataclasses.dataclass(frozen=True)
class Gaps:
  """``arm - reference`` of the best loss at the fitted optimum (the frozen rules' per-seed
  quantity) at each value of ``axis``, paired by seed, with its sign."""
  arm: str
  reference: str
  axis: str
  claims: tuple[str, ...] = ()  # the verdicts it qualifies
  title: str = ""

  def read(self, study, data: kinds.Data) -> Reading:
    del study
    rows, effects = [], {}
    for v in sorted(set(data.values(self.arm, self.axis)) & set(data.values(self.reference, self.axis))):
      a, b = (curves.best_losses(data.runs(n, {self.axis: v})) for n in (self.arm, self.reference))
      e = stats.paired(a, b)
      effects[v] = e
      sign = sign_text(e, f"better ({self.arm} lower)", f"worse ({self.arm} higher)")
      rows.append(f"| {v} | {effect_text(e, kinds.LOSS)} | {sign} |")
    worse = [v for v, e in effects.items() if e.defined and e.lo > 0]
    better = [v for v, e in effects.items() if e.defined and e.hi < 0]
    name = self.axis.split(".")[-1]
    summary = (f"{self.arm} is decisively worse than {self.reference} at {name} "
               + ", ".join(f"{v} ({effect_text(effects[v], kinds.LOSS)})" for v in worse) if worse else
               f"{self.arm} is nowhere decisively worse than {self.reference}")
    summary += ("; decisively better at " + ", ".join(f"{v} ({effect_text(effects[v], kinds.LOSS)})" for v in better)
                if better else "") + "."
    lines = [f"{self.arm} - {self.reference}, the best loss at the fitted optimum, paired by seed "
             f"(95 % t interval, two-sided p that it is zero):", "",
             f"| {name} | {self.arm} - {self.reference} | sign |", "|---|---|---|", *rows, "", summary]
    return Reading(self.title or f"The sign of {self.arm} - {self.reference} at each {name}", lines,
                   {c: summary for c in self.claims},
                   {str(v): dataclasses.asdict(e) for v, e in effects.items()})


@dataclasses.dataclass(frozen=True)
class AtMargin:
  """``claim`` re-decided at ``margin`` with the rest of its family as frozen (Holm as the
  rules do it; no leave-one-seed-out): what the margin decides. ``history`` says where the
  frozen margin came from."""
  claim: str
  margin: float
  history: str
  title: str = "What the margin decides"

  def read(self, study, data: kinds.Data) -> Reading:
    from research import study as study_lib  # pylint: disable=import-outside-toplevel
    frozen = next(c for c in study.claims if c.claim == self.claim)
    verdicts = {}
    for m in (frozen.margin, self.margin):
      changed = dataclasses.replace(study, claims=tuple(
          dataclasses.replace(c, margin=m) if c.claim == self.claim else c for c in study.claims))
      verdicts[m] = next(v for v in study_lib.judge(changed, data, robust=False) if v.claim == self.claim)
    was, would = (verdicts[m].verdict.lower() for m in (frozen.margin, self.margin))
    text = (f"At margin {frozen.margin:g} (the frozen rule) the verdict is {was}; at {self.margin:g} "
            f"it would be {would}. {self.history}")
    return Reading(self.title, [text], {self.claim: text},
                   {str(m): v.verdict for m, v in verdicts.items()})


@dataclasses.dataclass(frozen=True)
class MlpGradientNote:
  """Xiong et al.'s Theorem 1 and Figure 3, against what the probe's ``grad_mlp`` measures
  (``andrea_jax/diagnostics.py``'s ``MLP_WEIGHTS``, read when the report is written: that
  module imports JAX, which nothing else in a report needs)."""
  claims: tuple[str, ...] = ()
  title: str = "What the init-gradient claims cite and measure"

  def read(self, study, data: kinds.Data) -> Reading:
    from andrea_jax import diagnostics  # pylint: disable=import-outside-toplevel
    weights = " and ".join(f"`{w}`" for w in diagnostics.MLP_WEIGHTS)
    text = (f"Xiong et al. 2020's Theorem 1 bounds the gradient of the last layer's second FFN "
            f"matrix (W2 of layer L) and how it scales with the depth L (for pre-LN it shrinks as "
            f"1/sqrt(L)); the flat per-layer profile of pre-LN at init is their Figure 3, an "
            f"empirical plot, not the theorem. The probe's `grad_mlp` is the Frobenius norm over "
            f"{weights} of each layer together (`andrea_jax/diagnostics.py`, `MLP_WEIGHTS`): W1 and "
            f"W2 mixed, where the paper measures W2. The committed cells hold only that combined "
            f"norm per layer, so W2 alone cannot be read from them; a rerun of the step-0 probe "
            f"with per-matrix norms would.")
    return Note(self.title, text, self.claims).read(study, data)
