"""Post-hoc readings of a committed study: exploratory figures from its committed cells, shown beside the frozen verdicts they qualify (issue 45).

A verdict is fixed by the rules committed before the run; a referee may still find that its
label says more than its own figures do (a "reproduced" whose effect is decisively of the
wrong sign, an optimum's interval that is parabola geometry, a "not reproduced" outside the
claim's domain). A post-hoc reading puts the correction next to the label without touching
the rules: a study file lists its readings in ``POSTHOC``, apart from ``STUDY``, so the rules'
identity (``research/identity.py``: ``STUDY``, ``judge``, ``decide`` and what they reach) and
the verdicts stay those fixed before the run. The report (``research/report.py``) renders
them under ``TITLE`` right after the verdicts, and under each verdict or section a reading
names, one pointer line (``Reading.pointers``, keyed by the claim's text or the section's
title). Their figures go to results.json under ``posthoc``.

A reading is a frozen record with ``read(study, data) -> Reading``; the kinds here and, for
where the rate's optimum lies, in ``research/posthoc_rates.py``:

- ``Gaps``: ``arm - reference`` of the best loss per value of an axis, paired by seed, with
  its sign and two-sided significance;
- ``AtMargin``: one claim re-decided at another margin, the rest of its family as frozen
  (what a margin set for the seed budget changed);
- ``Basins``: the optimum of every arm at every point by ``research.optimum`` (the
  flat-basin fit, the rates indistinguishable from the best, the grid's resolution), and the
  rates whose mean loss lies within ``flat`` nats of the best;
- ``Extrapolated``: the rate at another value of the axis from the flat-basin optimum at the
  widest value and the slope's interval, both errors carried, not the seeds' spread alone;
- ``LineCheck``: a ``kinds.RateAt`` line's held-out check as numbers: whether it excludes 1;
- ``NearDuplicates``: rates of one arm closer than ``optimum.MIN_RATIO``, and the round that
  added them;
- ``SensitivityFrom``: a sensitivity gap over the rates from each lower end of the grid;
- ``Divergence``: per arm and rate, the models that diverged (``cells.diverged``: final
  loss above the initial), rose above their initial loss early, and their attention logits
  and log Z over training; verdicts at a rate where no model trains lie outside their claim's domain;
- ``Recipes``: the rate recipes with each seed's optimum bracketed (the recipe study's headline);
- ``Note``: a correction in words; ``MlpGradientNote``, the init-gradient claims' citation
  and what the probe measures.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

import numpy as np

from research import cells as cells_lib
from research import curves
from research import kinds
from research import registry
from research import stats

TITLE = "Post-hoc reading (exploratory; not part of the frozen rules)"
ANCHOR = "post-hoc-reading-exploratory-not-part-of-the-frozen-rules"  # TITLE's markdown anchor
INTRO = ("Computed after the run from the committed cells (`research/posthoc.py`, "
         "`research/optimum.py`; the study file's `POSTHOC`, kept apart from `STUDY`, so the rules' "
         "hash and the verdicts above are those fixed before the run). Exploratory: nothing here "
         "is a verdict. Each reading qualifies a verdict or section whose label says more than its "
         "figures do (a referee's report, issue 45); a pointer under that verdict leads here.")


@dataclasses.dataclass
class Reading:
  """What a reading adds: its title, markdown lines, one pointer line per verdict (by claim)
  or section (by title) it qualifies, and its figures for results.json."""
  title: str
  lines: list[str]
  pointers: dict[str, str] = dataclasses.field(default_factory=dict)
  results: dict[str, Any] = dataclasses.field(default_factory=dict)
  plots: list[str] = dataclasses.field(default_factory=list)  # PNGs in the report's folder
  headline: list[str] = dataclasses.field(default_factory=list)  # lines the report opens with


def headlines(readings: list[Reading]) -> list[str]:
  """The lines the readings put at the top of the report (the answer a reader takes away)."""
  return [line for r in readings for line in (*r.headline, "") if r.headline]


def read(name: str, cells: list[dict], out: str | None = None) -> list[Reading]:
  """Every post-hoc reading of study ``name`` (its ``POSTHOC``) on its cells; none for a
  study without. With ``out``, a reading that draws (a ``plot(study, data, out)`` method)
  writes its figure there."""
  readings = registry.posthoc(name)
  if not readings:
    return []
  study = registry.study(name)
  data = study.data(cells)
  out_readings = []
  for r in readings:
    reading = r.read(study, data)
    drawn = r.plot(study, data, out) if out and hasattr(r, "plot") else None
    out_readings.append(dataclasses.replace(reading, plots=[drawn]) if drawn else reading)
  return out_readings


def section_lines(readings: list[Reading]) -> list[str]:
  if not readings:
    return []
  out = [f"## {TITLE}", "", INTRO, ""]
  for r in readings:
    out += [f"### {r.title}", "", *r.lines, "", *[x for p in r.plots for x in (f"![{p}]({p})", "")]]
  return out


def pointers(readings: list[Reading]) -> dict[str, list[str]]:
  """Per claim or section title, the pointer lines that go under it."""
  out: dict[str, list[str]] = {}
  for r in readings:
    for key, text in r.pointers.items():
      out.setdefault(key, []).append(f"> *Post-hoc (exploratory, not a verdict):* {text} "
                                     f"([{r.title}](#{ANCHOR}))")
  return out


def results(readings: list[Reading]) -> dict[str, Any]:
  return {r.title: r.results for r in readings}


def effect_text(e: stats.Effect, unit: str = "nats") -> str:
  """``+0.016 [+0.007, +0.026] nats, p 0.004``: the estimate, its 95 % t interval and the
  two-sided p that it is zero."""
  if not e.defined:
    return f"{e.diff:+.3f} {unit} (no interval)"
  return f"{e.diff:+.3f} [{e.lo:+.3f}, {e.hi:+.3f}] {unit}, p {e.p:.2g}"


def sign_text(e: stats.Effect, lower: str = "lower", higher: str = "higher") -> str:
  """Which way the interval lies: decisively ``lower`` or ``higher``, or undecided."""
  if not e.defined or e.lo <= 0 <= e.hi:
    return "not decisively either way"
  return f"decisively {higher if e.lo > 0 else lower}"


# ----------------------------------------------------------------------------- the readings


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
      rows.append(f"| {v} | {effect_text(e)} | {sign} |")
    worse = [v for v, e in effects.items() if e.defined and e.lo > 0]
    better = [v for v, e in effects.items() if e.defined and e.hi < 0]
    name = self.axis.split(".")[-1]
    summary = (f"{self.arm} is decisively worse than {self.reference} at {name} "
               + ", ".join(f"{v} ({effect_text(effects[v])})" for v in worse) if worse else
               f"{self.arm} is nowhere decisively worse than {self.reference}")
    summary += ("; decisively better at " + ", ".join(f"{v} ({effect_text(effects[v])})" for v in better)
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


def _first_rise(c: dict) -> int | None:
  """The first logged step at which the training loss lies above the loss at initialisation."""
  init = cells_lib.initial_loss(c)
  return next((s for s, l in c.get("train_curve", []) if l is not None and l > init), None)


def _peak(curve: list) -> tuple[int | None, float]:
  """``(step, value)`` of a curve's largest value after step 0."""
  pts = [(s, v) for s, v in curve if s > 0 and v is not None and math.isfinite(v)]
  return max(pts, key=lambda p: p[1]) if pts else (None, math.nan)


def _span(xs: list[float]) -> list[float]:
  return [float(min(xs)), float(max(xs))] if xs else [math.nan, math.nan]


def trajectory(recs: list[dict]) -> dict:
  """What a group of models did: how many diverged (``cells.diverged``), rose above their
  initial loss at a logged step (and the latest step any first did), learn (a final loss
  ``curves.LEARNS_BY`` below the unigram); the range of their peak training loss, of the
  largest attention logit at the first probe after init (its median at init), of log Z's
  peak (the median step of it) and of log Z at the end."""
  rises = [r for r in map(_first_rise, recs) if r is not None]
  attn = [c["attn_logit_curve"] for c in recs if len(c.get("attn_logit_curve") or []) > 1]
  logz = [_peak(c.get("log_z_curve") or []) for c in recs]
  return {"models": len(recs), "diverged": sum(map(cells_lib.diverged, recs)), "rose": len(rises),
          "rose_by": max(rises, default=None), "learn": sum(map(kinds.model_learns, recs)),
          "peak_loss": _span([_peak(c.get("train_curve", []))[1] for c in recs]),
          "attn_init": float(np.median([a[0][1] for a in attn])) if attn else math.nan,
          "attn_first": _span([a[1][1] for a in attn]), "attn_step": attn[0][1][0] if attn else None,
          "log_z_peak": _span([v for _, v in logz if math.isfinite(v)]),
          "log_z_peak_step": int(np.median(steps)) if (steps := [s for s, _ in logz if s is not None]) else None,
          "log_z_end": _span([c["log_z_curve"][-1][1] for c in recs if c.get("log_z_curve")])}


@dataclasses.dataclass(frozen=True)
class Divergence:
  """Per arm, point and rate, the models' ``trajectory``: the models that diverged (the
  guard stopped them, or their final loss ended above the initial: ``cells.diverged``), rose
  above their initial loss early, the attention logits and log Z over training, and those
  that learn. ``verdicts``: the claims judged at each rate; where no model at a rate learns,
  they lie outside the claim's domain (``domain``: why, a sentence)."""
  verdicts: Mapping[float, tuple[str, ...]] = dataclasses.field(default_factory=dict)
  domain: str = ""
  title: str = "Divergence, recounted"

  def read(self, study, data: kinds.Data) -> Reading:
    del study
    groups: dict[tuple, list[dict]] = {}
    for arm, point, run, rec in data.rows:
      groups.setdefault((run.lr, point, arm), []).append(rec)
    found = {key: trajectory(recs) for key, recs in sorted(groups.items(), key=repr)}
    everyone = list({id(rec): rec for *_, rec in data.rows}.values())  # a cell of two arms once
    models, diverged = len(everyone), sum(map(cells_lib.diverged, everyone))
    lines = [f"A model diverged when the guard stopped it or its final validation loss ended above "
             f"its loss at initialisation (`research/cells.py`'s `diverged`; the frozen page counted "
             f"only the guard's): {diverged} of {models}. Per arm, point and rate: diverged; the "
             f"training loss above the initial loss at a logged step (by the step shown); the peak "
             f"training loss (nats); the largest attention logit at init (median) and at the first "
             f"probe after it; log Z's peak (at the median step) and at the end; the models whose "
             f"final loss lies {curves.LEARNS_BY:g} nats below the unigram (learn).", "",
             "| arm | point | rate | diverged | rose above init | peak training loss | largest attention "
             "logit | log Z: peak → end | learn |", "|---|---|---|---|---|---|---|---|---|",
             *[self.row(*key, f) for key, f in found.items()], ""]
    pointers = {}
    for lr, claims in self.verdicts.items():
      text = self.at_rate(lr, [f for (r, _, _), f in found.items() if r == lr])
      lines.append(f"- {text}")
      pointers.update(dict.fromkeys(claims, text))
    return Reading(self.title, lines + (["", self.domain] if self.domain else []), pointers,
                   {f"{arm}{kinds.at_text(point)}, rate {lr:g}": f for (lr, point, arm), f in found.items()})

  @staticmethod
  def row(lr: float, point: tuple, arm: str, f: dict) -> str:
    g = lambda x: "{:.3g}..{:.3g}".format(*x)
    return (f"| {arm} | {kinds.at_text(point)[2:] or '—'} | {lr:g} | {f['diverged']}/{f['models']} | "
            f"{f['rose']}/{f['models']}" + (f" (by step {f['rose_by']})" if f["rose"] else "") + " | "
            f"{g(f['peak_loss'])} | {f['attn_init']:.2g} → {f['attn_first'][0]:.2g}..{f['attn_first'][1]:.2g} "
            f"(step {f['attn_step']}) | {g(f['log_z_peak'])} (step {f['log_z_peak_step']}) → "
            f"{g(f['log_z_end'])} | {f['learn']}/{f['models']} |")

  @staticmethod
  def at_rate(lr: float, at: list[dict]) -> str:
    n, rose, div, learn = (sum(f[k] for f in at) for k in ("models", "rose", "diverged", "learn"))
    by = max((f["rose_by"] for f in at if f["rose_by"] is not None), default=None)
    return (f"At rate {lr:g}, {rose} of {n} models' training loss rose above its initial loss"
            + (f" by step {by}" if by is not None else "") + f"; {div} of {n} ended above it (diverged); "
            f"{learn} of {n} learn" + (": no model trains here, so the verdicts at this rate lie outside "
                                       "the claim's domain." if learn == 0 else "."))


@dataclasses.dataclass(frozen=True)
class Note:
  """A correction in words: ``text`` under ``title``, pointed to from ``claims`` by ``pointer``
  (the text itself when no shorter pointer is given)."""
  title: str
  text: str
  claims: tuple[str, ...] = ()
  pointer: str = ""

  def read(self, study, data: kinds.Data) -> Reading:
    del study, data
    return Reading(self.title, [self.text], {c: self.pointer or self.text for c in self.claims})


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

