"""The muP base stage's rule: which base multipliers, and which base learning rate, the width ladder carries. Fixed before the stage ran.

Yang et al. 2022 (Tensor Programs V, section 3 and appendix F) tune the base model's
multipliers at the base width and transfer them unchanged; what is tuned here is the
readout multiplier and the attention multiplier (``andrea_jax/mup.py``) with the learning
rate. The rule sees only ``curves.Run`` records whose arm names a multiplier pair
(``arm_name``), so it is tested on synthetic numbers (tests/test_mup_base.py).

**The choice** (``choose``). A pair is *eligible* when it learns
(``curves.learns_every_seed``: every seed's best loss 0.1 nats below the unigram baseline,
a test that seeds leaving the plateau at different steps pass) and every seed's optimum
is bracketed by the rates tried (the sweep adds rates beyond an edge first). Its *score* is
the mean over seeds of each seed's best loss (the vertex of its parabola in log(rate),
``curves.optima``). The chosen pair has the lowest score; a pair within
``TIE_NATS`` of it that is nearer the default (1, 1) (in log2 steps) is chosen instead, so
that a difference no larger than the seeds' noise does not move the model off its default.
The base rate is the chosen pair's optimum: the exponential of the mean over seeds of the
log optimum, with its 95 % t interval. A choice at the edge of the multiplier grid is
flagged: the best pair may lie beyond it. The chosen pair's difference from the default,
paired by seed, is reported with its interval and labelled optimistic (it was chosen on
these seeds).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Iterable

from research import claims
from research import curves
from research import stats
from research.claims import Verdict

READOUTS = (1.0, 2.0, 4.0, 8.0, 16.0)
ATTENTIONS = (0.5, 1.0, 2.0)
DEFAULT = (1.0, 1.0)
# Two scores closer than this are a tie, decided towards the default: 0.02 nats, under the
# per-seed SD of a best loss in the proxies study (0.03-0.1 nats at its narrow widths).
TIE_NATS = 0.02


def arm_name(readout: float, attention: float) -> str:
  return f"readout={float(readout):g},attention={float(attention):g}"


def parse(arm: str) -> tuple[float, float]:
  """``"readout=4,attention=1"`` -> ``(4.0, 1.0)``."""
  fields = dict(part.split("=") for part in arm.split(","))
  return float(fields["readout"]), float(fields["attention"])


def distance(pair: tuple[float, float]) -> float:
  """Steps of a factor 2 from the default (1, 1)."""
  return sum(abs(math.log2(m / d)) for m, d in zip(pair, DEFAULT))


@dataclasses.dataclass
class Setting:
  """One multiplier pair over its rates and seeds."""
  arm: str
  readout: float
  attention: float
  score: float  # mean over seeds of the best loss (nan when no seed has an optimum)
  lr: float  # exp(mean over seeds of log optimum)
  seeds: int
  eligible: bool
  reason: str  # why not eligible ("" when eligible)


@dataclasses.dataclass
class Choice:
  """The rule's output: what the ladder carries, and how it came out."""
  arm: str | None  # None: no pair eligible
  readout: float
  attention: float
  lr: float
  lr_interval: tuple[float, float] | None
  settings: list[Setting]
  lines: list[str]
  against_default: stats.Effect | None  # chosen minus default best loss, paired by seed


def settings(runs: Iterable[curves.Run]) -> list[Setting]:
  out = []
  for arm, rs in sorted(curves.by_arm(runs).items(), key=lambda kv: parse(kv[0])):
    readout, attention = parse(arm)
    best, logs = curves.best_losses(rs), curves.log_optima(rs)
    score = sum(best.values()) / len(best) if best else float("nan")
    lr = math.exp(sum(logs.values()) / len(logs)) if logs else float("nan")
    reason = ("a seed does not learn" if not curves.learns_every_seed(rs) else
              "a seed's optimum is at the rate grid's edge" if not curves.bracketed(rs) else "")
    out.append(Setting(arm, readout, attention, score, lr, len(best), not reason, reason))
  return out


CHOICE_RULE = (
    "among the multiplier pairs that learn with every seed's optimum bracketed, the lowest "
    "mean over seeds of the fitted best loss; a pair within {tie} nats of it nearer the "
    "default (1, 1) is preferred; the base rate is the chosen pair's mean log optimum with "
    "its 95 % t interval.").format(tie=TIE_NATS)


def choose(runs: list[curves.Run]) -> Choice:
  table = settings(runs)
  eligible = [s for s in table if s.eligible]
  if not eligible:
    return Choice(None, *DEFAULT, float("nan"), None, table,
                  ["No multiplier pair is eligible: " + "; ".join(
                      f"{s.arm}: {s.reason}" for s in table) + "."], None)
  lowest = min(s.score for s in eligible)
  near = [s for s in eligible if s.score <= lowest + TIE_NATS]
  chosen = min(near, key=lambda s: (distance((s.readout, s.attention)), s.score))
  chosen_runs = [r for r in runs if chosen.arm in r.arms]
  logs = list(curves.log_optima(chosen_runs).values())
  interval = None
  if len(logs) > 1:
    e = stats.one_sample(logs)
    interval = (math.exp(e.lo), math.exp(e.hi)) if e.defined else None
  lines = [f"Chosen: readout multiplier {chosen.readout:g}, attention multiplier "
           f"{chosen.attention:g} (mean best loss {chosen.score:.3f} over {chosen.seeds} seeds), "
           f"base rate {chosen.lr:.3g}" + (f" [{interval[0]:.3g}, {interval[1]:.3g}]" if interval else "")
           + "."]
  if chosen is not min(eligible, key=lambda s: s.score):
    best = min(eligible, key=lambda s: s.score)
    lines.append(f"The lowest score was {best.arm}'s ({best.score:.3f}), within {TIE_NATS} nats: "
                 f"the pair nearer the default is kept.")
  readouts = sorted({s.readout for s in table})
  attentions = sorted({s.attention for s in table})
  at_edge = lambda m, grid: len(grid) > 1 and m in (grid[0], grid[-1])
  if at_edge(chosen.readout, readouts) or at_edge(chosen.attention, attentions):
    lines.append("The choice is at the edge of the multiplier grid: the best pair may lie beyond it.")
  default = arm_name(*DEFAULT)
  against = None
  default_runs = [r for r in runs if default in r.arms]
  if chosen.arm != default and default_runs:
    against = stats.paired(curves.best_losses(chosen_runs), curves.best_losses(default_runs))
    lines.append(f"Against the default (1, 1), paired by seed: {against.text()} "
                 f"(optimistic: chosen on these seeds).")
  return Choice(chosen.arm, chosen.readout, chosen.attention, chosen.lr, interval, table, lines, against)


def judge(runs: list[curves.Run], robust: bool = True) -> list[Verdict]:
  """The stage's one entry for the report: the choice, as a verdict line (not a claim on the
  literature: "Chosen" or "Inconclusive" when no pair is eligible)."""
  del robust  # a choice is not re-judged without a seed
  c = choose(runs)
  return [Verdict("The base multipliers the ladder carries", "Chosen" if c.arm else claims.INCONCLUSIVE,
                  c.lines, CHOICE_RULE, c.against_default, "chosen minus default best loss")]


RULE_ROOTS = ("judge", "choose")
