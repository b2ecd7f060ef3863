"""The post-hoc reading of which models diverged, rose above their initial loss or learn, per arm, point and rate (`Divergence`), with their attention logits and log Z over training."""

from __future__ import annotations

import dataclasses
import math
from typing import Mapping

import numpy as np

from research import cells as cells_lib
from research import curves
from research import kinds
from research.posthoc import Reading


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
