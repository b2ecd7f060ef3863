"""The z-loss drift studies' kinds: log Z's track over training, its drift over the second half and its late window.

``Finding`` and ``late_models`` (read by ``Runaway`` with a ``window``); the report items are in
``experiments/readings/zloss.py``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

import numpy as np

from research import claims
from research import curves
from research.kind_base import at_text, Claim, Data, named, NAN, words
from research.kind_zloss import FOUND, median_of, Model, models, NOT_FOUND, state


def model_learns(rec: Mapping[str, Any]) -> bool:
  """Completed, not diverged (``cells.diverged``), final loss ``curves.LEARNS_BY`` below the unigram."""
  from research import cells as cells_lib  # pylint: disable=import-outside-toplevel
  return (rec["status"] == "completed" and not cells_lib.diverged(rec)
          and rec.get("unigram_val_loss") is not None
          and float(rec["final_val_loss"]) < float(rec["unigram_val_loss"]) - curves.LEARNS_BY)


@dataclasses.dataclass(frozen=True)
class Track:
  """One model's log Z over training. Wortsman et al. 2023 (sec. 3.2): output-logit divergence is a late
  drift of log Z in a model that still trains; here log Z at the end minus half-way."""
  seed: int
  lr: float
  curve: tuple[tuple[int, float], ...]  # (step, log Z) at every probe
  steps: int  # the run's length
  completed: bool
  learns: bool  # ``model_learns``
  final: float  # the final validation loss (nan: the model did not complete)
  attn_end: float  # the largest attention logit at the last probe (nan: none)

  def at(self, step: float) -> float:
    """Log Z nearest ``step`` (nan: none)."""
    return min(self.curve, key=lambda sv: abs(sv[0] - step))[1] if self.curve else NAN

  @property
  def mid(self) -> float:
    return self.at(self.steps / 2)

  @property
  def end(self) -> float:
    return self.curve[-1][1] if self.curve else NAN

  @property
  def drift(self) -> float:
    """The end minus half-way (nan: not completed, or fewer than 3 probes)."""
    return self.end - self.mid if self.completed and len(self.curve) >= 3 else NAN

  @property
  def read(self) -> bool:
    return math.isfinite(self.drift)


def tracks(data: Data, arm: str, at: Mapping[str, Any] | tuple = ()) -> list[Track]:
  """``arm``'s models at ``at`` with their log Z trajectories, by rate and seed."""
  out = []
  for rec in data.records(arm, at):
    curve = tuple((int(s), float(v)) for s, v in rec.get("log_z_curve") or () if v is not None)
    attn = rec.get("attn_logit_curve") or []
    done = rec["status"] == "completed"
    out.append(Track(int(rec["seed"]), float(rec["learning_rate"]), curve,
                     int(rec["overrides"].get("train.steps") or rec["steps"]), done, model_learns(rec),
                     float(rec["final_val_loss"]) if done else NAN,
                     float(attn[-1][1]) if attn and attn[-1][1] is not None else NAN))
  return sorted(out, key=lambda t: (t.lr, t.seed))


def drift_state(ts: list[Track], bound: float) -> str:
  """``drifts`` (every seed learns and drifts ``bound`` nats or more either way), ``stays`` (every seed
  completed, drifting less) or ``mixed``."""
  if not ts or not all(t.read for t in ts):
    return "mixed"
  big = [abs(t.drift) >= bound for t in ts]
  if all(big) and all(t.learns for t in ts):
    return "drifts"
  return "stays" if not any(big) else "mixed"


@dataclasses.dataclass(frozen=True)
class Finding(Claim):
  """Per (arm, rate) over seeds, whether log Z lies ``bound`` nats away: ``reads="excess"``, from
  ``log V`` at the end, at the largest ``axis`` (``state``); ``reads="drift"``, its late drift over every
  point (``drift_state``). Found when one (arm, rate) moves in every seed, Not found when all stay;
  ``beside``: partners shown, not judged; ``names``: the overrides that name an arm."""
  family: str | None = None
  arms: tuple[str, ...] = ()
  beside: tuple[tuple[str, str], ...] = ()  # (arm, the arm shown beside it)
  reads: str = "excess"
  axis: str = "model.d_model"
  bound: float = 2.0
  names: tuple[str, ...] = ()  # the overrides that name an arm in the finding
  test_kind = "finding"

  def needs(self) -> tuple[str, ...]:
    return tuple(dict.fromkeys(self.arms + tuple(b for _, b in self.beside)))

  def what(self) -> str:
    return ("late drift of log_z (the end minus half-way)" if self.reads == "drift"
            else "log_z at the end minus log V")

  def quantity_text(self) -> str:
    return f"{self.what()} per arm and rate" + (", in models that learn" if self.reads == "drift"
                                                 else f" at the largest {self.axis}")

  def rule(self) -> str:
    moves = (f"'drifts' when every seed completed, learns (not diverged, final loss "
             f"{curves.LEARNS_BY:g} nats below the unigram) and its log_z at the end lies at "
             f"least {self.bound:g} nats from its log_z half-way through"
             if self.reads == "drift" else
             f"'grows' when every seed completed with |log_z at the end - log V| >= "
             f"{self.bound:g} nats (V the vocabulary)")
    where = "" if self.reads == "drift" else f" at the largest {self.axis.split('.')[-1]}"
    return (f"per (arm, rate) of {', '.join(self.arms)}{where}: {moves}, 'stays' when every seed "
            f"completed {self.bound:g} nats short of it, 'mixed' otherwise; Found when one (arm, "
            f"rate) moves so, Not found when all stay, Inconclusive otherwise")

  def groups(self, data: Data, arm: str, point) -> dict[float, list]:
    read = tracks if self.reads == "drift" else models
    return curves.by_rate(read(data, arm, point))

  def state(self, items: list) -> str:
    return drift_state(items, self.bound) if self.reads == "drift" else state(items, self.bound)

  def median(self, items: list) -> float:
    return median_of(t.drift for t in items) if self.reads == "drift" else median_of(m.excess for m in items)

  def find(self, data: Data) -> tuple[str, dict, list[tuple[str, float]], list[str]]:
    """``(verdict, the point judged, the (arm, rate) that move, lines)``."""
    values = sorted({v for a in self.arms for v in data.values(a, self.axis)})
    point = {} if self.reads == "drift" else ({self.axis: values[-1]} if values else None)
    plain = {(a, lr): ms for a in self.arms for lr, ms in self.groups(data, a, point or {}).items()}
    if point is None or not plain:
      return claims.INCONCLUSIVE, {}, [], ["No models."]
    states = {k: self.state(ms) for k, ms in plain.items()}
    moved = [k for k, s in states.items() if s in ("grows", "drifts")]
    where, lines = at_text(point)[2:], []
    label = lambda a: words(named(data, a, self.names)) or a
    for arm, lr in moved:
      text = f"{where + ', ' if where else ''}{label(arm)}, rate {lr:g}: {self.what()}, median {self.median(plain[(arm, lr)]):+.2f} nats"
      for partner in [b for a, b in self.beside if a == arm]:
        ms = self.groups(data, partner, point).get(lr, [])
        text += f"; {partner}: median {self.median(ms):+.2f} ({self.state(ms)})"
      lines.append(text + ".")
    if moved:
      low = {a: min(lr for b, lr in moved if b == a) for a, _ in moved}
      return FOUND, point, moved, lines + [f"Found{' at ' + where if where else ''}: " + ", ".join(
          f"{label(a)} from rate {lr:g}" for a, lr in low.items()) + "."]
    if all(s == "stays" for s in states.values()):
      return NOT_FOUND, point, [], lines + [
          f"{self.what()} stays within {self.bound:g} nats in every arm and rate (largest |median| "
          f"{max(abs(self.median(ms)) for ms in plain.values()):.2f})."]
    mixed = sum(s == "mixed" for s in states.values())
    return claims.INCONCLUSIVE, point, [], lines + [
        f"No setting moves so in every seed; {mixed} of {len(states)} are mixed (seeds disagree, a "
        f"model did not complete" + (", or one drifted without learning)." if self.reads == "drift" else ").")]

  def test(self, data: Data) -> claims.Test:
    verdict, _, _, lines = self.find(data)
    return claims.Test(self.key, self.claim, self.rule(), [],
                       missing=claims.Verdict(self.claim, verdict, lines, self.rule()))


# The last reading is noisy (log Z moved 1-3 nats between readings 2,500 steps apart in
# results/zloss_drift-cpu), so the late kinds average the late window of a model that still trains.


def late_mean(t: Track, window: float) -> float:
  """The mean of ``t``'s log Z over the last ``window`` fraction of the run; nan where it does not learn
  or has no reading there."""
  late = [v for s, v in t.curve if s >= (1 - window) * t.steps]
  return float(np.mean(late)) if t.learns and late else NAN


def late_models(data: Data, arm: str, at: Mapping[str, Any] | tuple = (), window: float = 0.2) -> list[Model]:
  """``arm``'s ``models`` with ``end`` log Z's ``late_mean`` over ``window``."""
  late = {(t.lr, t.seed): late_mean(t, window) for t in tracks(data, arm, at)}
  return [dataclasses.replace(m, end=late[(m.lr, m.seed)]) for m in models(data, arm, at)]
