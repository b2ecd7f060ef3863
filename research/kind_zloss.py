"""The z-loss studies' kinds: where the output's log Z sits against ``log V``, and how it moves over training.

``Model``, ``models`` and ``state`` (log Z at the end, or its drift over the second half),
``late_models`` (its late window); ``Finding`` over either; ``Runaway`` on
the seeds where a reference arm's log Z ran past [0, log V]. The report items (tables, per-seed
listings) are in ``experiments/readings/zloss.py``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

import numpy as np

from research import claims
from research import curves
from research import stats
from research.kind_base import at_text, Claim, Data, LOSS, named, NAN, words


CANNOT_JUDGE = "Cannot be judged"  # the claim's premise did not hold: not a failure to reproduce
FOUND, NOT_FOUND, CHOSEN = "Found", "Not found", "Chosen"


@dataclasses.dataclass(frozen=True)
class Model:
  """One model's log Z as the z-loss kinds see it: at every probe, at the end against ``log V``, and its drift.
  Wortsman et al. 2023 (sec. 3.2): output-logit divergence is a late drift of log Z in a model that still
  trains; here log Z at the end minus half-way."""
  seed: int
  lr: float
  curve: tuple[tuple[int, float], ...]  # (step, log Z) at every probe
  steps: int  # the run's length
  completed: bool
  learns: bool  # ``model_learns``
  end: float  # log Z at the last probe, or the late window's mean (``late_models``); nan: not completed
  vocab: int
  final: float  # the final validation loss (nan: the model did not complete)
  attn_end: float  # the largest attention logit at the last probe (nan: none)

  def at(self, step: float) -> float:
    """Log Z nearest ``step`` (nan: none)."""
    return min(self.curve, key=lambda sv: abs(sv[0] - step))[1] if self.curve else NAN

  @property
  def mid(self) -> float:
    return self.at(self.steps / 2)

  @property
  def excess(self) -> float:
    """Log Z at the end minus ``log V``, a uniform softmax's log Z."""
    return self.end - math.log(self.vocab)

  @property
  def drift(self) -> float:
    """The end minus half-way (nan: not completed, or fewer than 3 probes)."""
    return self.end - self.mid if len(self.curve) >= 3 else NAN

  @property
  def read(self) -> bool:
    return math.isfinite(self.end)


def models(data: Data, arm: str, at: Mapping[str, Any] | tuple = ()) -> list[Model]:
  """``arm``'s models at ``at`` with their log Z over training, by rate and seed."""
  out = []
  for rec in data.records(arm, at):
    curve = tuple((int(s), float(v)) for s, v in rec.get("log_z_curve") or () if v is not None)
    attn = rec.get("attn_logit_curve") or []
    done = rec["status"] == "completed"
    out.append(Model(int(rec["seed"]), float(rec["learning_rate"]), curve,
                     int(rec["overrides"].get("train.steps") or rec["steps"]), done, model_learns(rec),
                     curve[-1][1] if done and curve else NAN, int(rec["overrides"]["model.vocab_size"]),
                     float(rec["final_val_loss"]) if done else NAN,
                     float(attn[-1][1]) if attn and attn[-1][1] is not None else NAN))
  return sorted(out, key=lambda m: (m.lr, m.seed))


def state(ms: list[Model], bound: float, drift: bool = False) -> str:
  """``grows`` (every seed completed |excess| >= ``bound``), ``stays`` (every seed completed
  below it) or ``mixed`` (seeds disagree, or a model did not complete). ``drift``: ``drifts``
  when every seed learns and drifts ``bound`` nats or more either way."""
  value = lambda m: m.drift if drift else m.excess
  if not ms or not all(math.isfinite(value(m)) for m in ms):
    return "mixed"
  big = [abs(value(m)) >= bound for m in ms]
  if all(big) and (not drift or all(m.learns for m in ms)):
    return "drifts" if drift else "grows"
  return "stays" if not any(big) else "mixed"


def median_of(xs) -> float:
  finite = [x for x in xs if math.isfinite(x)]
  return float(np.median(finite)) if finite else NAN


def model_learns(rec: Mapping[str, Any]) -> bool:
  """Completed, not diverged (``cells.diverged``), final loss ``curves.LEARNS_BY`` below the unigram."""
  from research import cells as cells_lib  # pylint: disable=import-outside-toplevel
  return (rec["status"] == "completed" and not cells_lib.diverged(rec)
          and rec.get("unigram_val_loss") is not None
          and float(rec["final_val_loss"]) < float(rec["unigram_val_loss"]) - curves.LEARNS_BY)


@dataclasses.dataclass(frozen=True)
class Finding(Claim):
  """Per (arm, rate) over seeds, whether log Z lies ``bound`` nats away: ``reads="excess"``, from
  ``log V`` at the end, at the largest ``axis`` (``state``); ``reads="drift"``, its late drift over every
  point (``state`` with ``drift``). Found when one (arm, rate) moves in every seed, Not found when all stay;
  ``beside``: partners shown, not judged; ``names``: the overrides that name an arm."""
  family: str | None = None
  arms: tuple[str, ...] = ()
  beside: tuple[tuple[str, str], ...] = ()  # (arm, the arm shown beside it)
  reads: str = "excess"
  axis: str = "model.d_model"
  bound: float = 2.0
  names: tuple[str, ...] = ()  # the overrides that name an arm in the finding
  test_kind = "finding"
  CHOICES = {"reads": ("excess", "drift")}

  def needs(self) -> tuple[str, ...]:
    return tuple(dict.fromkeys(self.arms + tuple(b for _, b in self.beside)))

  def what(self) -> str:
    return ("late drift of log_z (the end minus half-way)" if self.reads == "drift"
            else "log_z at the end minus log V")

  def unit(self) -> str:
    return LOSS  # log Z, in the loss's nats (kind_base.LOSS)

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

  def state(self, items: list) -> str:
    return state(items, self.bound, self.reads == "drift")

  def median(self, items: list) -> float:
    return median_of(m.drift if self.reads == "drift" else m.excess for m in items)

  def find(self, data: Data) -> tuple[str, dict, list[tuple[str, float]], list[str]]:
    """``(verdict, the point judged, the (arm, rate) that move, lines)``."""
    values = sorted({v for a in self.arms for v in data.values(a, self.axis)})
    point = {} if self.reads == "drift" else ({self.axis: values[-1]} if values else None)
    plain = {(a, lr): ms for a in self.arms for lr, ms in curves.by_rate(models(data, a, point or {})).items()}
    if point is None or not plain:
      return claims.INCONCLUSIVE, {}, [], ["No models."]
    states = {k: self.state(ms) for k, ms in plain.items()}
    moved = [k for k, s in states.items() if s in ("grows", "drifts")]
    where, lines = at_text(point)[2:], []
    label = lambda a: words(named(data, a, self.names)) or a
    for arm, lr in moved:
      text = f"{where + ', ' if where else ''}{label(arm)}, rate {lr:g}: {self.what()}, median {self.median(plain[(arm, lr)]):+.2f} nats"
      for partner in [b for a, b in self.beside if a == arm]:
        ms = curves.by_rate(models(data, partner, point)).get(lr, [])
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


def late_models(data: Data, arm: str, at: Mapping[str, Any] | tuple = (), window: float = 0.2) -> list[Model]:
  """``arm``'s ``models`` with ``end`` the mean of log Z over the last ``window`` fraction of the run; nan
  where a model does not learn or has no reading there."""
  late = lambda m: [v for s, v in m.curve if s >= (1 - window) * m.steps]
  return [dataclasses.replace(m, end=float(np.mean(late(m))) if m.learns and late(m) else NAN)
          for m in models(data, arm, at)]


def overshoot(m: Model, side: int) -> float:
  """How far log Z ended past the band [0, log V] on ``side`` (+1: above log V)."""
  return m.excess if side > 0 else -m.end


def runaway(m: Model, bound: float) -> int:
  """The side (+1 above log V, -1 below 0) where the model's log Z ended ``bound`` past the band, else 0."""
  return next((side for side in (1, -1) if overshoot(m, side) >= bound), 0) if m.read else 0


@dataclasses.dataclass(frozen=True)
class Pairs:
  """At ``claim``'s rate, both arms' models by seed, and the side the reference ran to on each paired seed."""
  claim: Runaway
  text: str  # "d_model 128, rate 0.3"
  plain: dict[int, Model]
  other: dict[int, Model]
  sides: dict[int, int]

  def lost(self) -> list[int]:
    return [s for s in self.sides if not self.other[s].read]

  def per_seed(self, loss: bool) -> tuple[dict[int, float], dict[int, float]]:
    """The reference's and the arm's final loss (``loss``) or overshoot on the side it ran to, per judged seed."""
    seeds = [s for s in self.sides if self.other[s].read]
    read = lambda m, s: m.final if loss else overshoot(m, self.sides[s])
    return {s: read(self.plain[s], s) for s in seeds}, {s: read(self.other[s], s) for s in seeds}

  def summary(self) -> str:
    c = self.claim
    ran = {s: runaway(m, c.bound) for s, m in self.plain.items() if runaway(m, c.bound)}
    up = sum(v > 0 for v in ran.values())
    gone = sorted(s for s, m in self.plain.items() if not m.read)
    unpaired = sorted(s for s in ran if s not in self.other)
    notes = [f"{c.reference} did not complete at {', '.join(map(str, gone))}"] if gone else []
    if unpaired:
      notes.append(f"no {c.arm} model to pair with: {', '.join(map(str, unpaired))}")
    return (f"{self.text}: {c.reference}'s log Z ran away in {len(ran)} of {len(self.plain)} "
            f"seeds ({up} above log V, {len(ran) - up} below" + "".join(f"; {n}" for n in notes) + ")")


@dataclasses.dataclass(frozen=True)
class Runaway(Claim):
  """At ``rate``, on the seeds where ``reference``'s log Z ended ``bound`` or more past [0, log V]
  (at the last reading, or a finite ``window``'s ``late_models`` mean), paired with ``arm``'s model.
  ``reads="overshoot"``: ``arm``'s overshoot on that side decisively below ``bound`` (one-sided t);
  ``reads="loss"``: ``arm - reference`` final loss decisively negative (against: positive or TOST
  within ``margin``). Under ``min_seeds`` such seeds: ``CANNOT_JUDGE``. An ``arm`` model that did not
  complete sets p for to 1."""
  arm: str = ""
  reference: str = ""
  rate: float = NAN
  bound: float = 2.0
  min_seeds: int = 3
  reads: str = "overshoot"
  margin: float = NAN
  window: float = NAN
  CHOICES = {"reads": ("overshoot", "loss")}

  def needs(self) -> tuple[str, ...]:
    return (self.arm, self.reference)

  def pairs(self, data: Data) -> Pairs:
    read = lambda a: late_models(data, a, (), self.window) if math.isfinite(self.window) else models(data, a)
    at_rate = lambda a: {m.seed: m for m in read(a) if m.lr == self.rate}
    plain, other = at_rate(self.reference), at_rate(self.arm)
    sides = {s: runaway(m, self.bound) for s, m in sorted(plain.items())
             if s in other and runaway(m, self.bound)}
    where = "; ".join(at_text(p)[2:] for p in data.points(self.reference) if p)
    return Pairs(self, f"{where + ', ' if where else ''}rate {self.rate:g}", plain, other, sides)

  def quantity_text(self) -> str:
    if self.reads == "loss":
      return f"final loss, {self.arm} - {self.reference}"
    return f"{self.arm}'s overshoot past [0, log V] on {self.reference}'s side (held below +{self.bound:g})"

  def unit(self) -> str:
    return LOSS  # the final loss, or log Z's overshoot (both in nats)

  def rule(self) -> str:
    late = (f" averaged over the readings in the last {self.window:.0%} of training" if math.isfinite(self.window)
            else "")
    learned = "learned (completed, not diverged, below the unigram)" if late else "completed"
    premise = (f"at rate {self.rate:g}, on the seeds where {self.reference} {learned} with its "
               f"log_z{late} at least {self.bound:g} nats past the band [0, log V] (above: "
               f"log_z - log V; below: -log_z; at least {self.min_seeds} such seeds, "
               f"else it cannot be judged there), {self.arm} of the same seed and rate"
               + (" over the same readings (a model that does not learn is not read)" if late else ""))
    if self.reads == "loss":
      want = (f"the final validation loss minus {self.reference}'s, paired by seed; reproduced when "
              f"decisively negative (t test), not reproduced when decisively positive or equivalent to "
              f"none within {self.margin:g} nats (TOST)")
    else:
      want = (f"its overshoot past the band on that side; reproduced when the mean overshoot lies "
              f"decisively below {self.bound:g} nats (one-sided t test), not reproduced when decisively above")
    return (f"{premise}: {want}, inconclusive otherwise; a model of {self.arm} that did not "
            f"complete cannot support it")

  def test(self, data: Data) -> claims.Test:
    p = self.pairs(data)
    if len(p.sides) < self.min_seeds:
      return claims.Test(self.key, self.claim, self.rule(), [], missing=claims.Verdict(
          self.claim, CANNOT_JUDGE, [p.summary() + ".", f"It cannot be judged at this rate: the "
          f"claim is about models whose log Z runs away, and at least {self.min_seeds} seeds are "
          f"needed. This is not a failure to reproduce it."], self.rule()))
    if self.reads == "loss":
      plain, other = p.per_seed(loss=True)
      values = {s: other[s] - plain[s] for s in plain}
      e, p_for, p_against = stats.directed(list(values.values()), "lower", self.margin)
      e = dataclasses.replace(e, kind="paired")
      lines = [f"Final validation loss: {self.reference} {stats.one_sample(list(plain.values())).text(LOSS)}, "
               f"{self.arm} {stats.one_sample(list(other.values())).text(LOSS)}."]
    else:
      plain, values = p.per_seed(loss=False)
      e, p_for, p_against = stats.below(list(values.values()), self.bound)
      e = dataclasses.replace(e, kind="paired seeds")
      lines = [f"Overshoot past the band [0, log V] on {self.reference}'s side: {self.reference} "
               f"{stats.one_sample(list(plain.values())).text(LOSS)}; {self.arm} {e.text(LOSS)} (bound "
               f"+{self.bound:g}); {self.reference} - {self.arm} {stats.paired(plain, values).text(LOSS)}."]
    t = claims.Test(self.key, self.claim, self.rule(), [p.summary() + ".", *lines], e, self.quantity_text(),
                    p_for, p_against, [], tuple(values))
    if p.lost():
      t = dataclasses.replace(t, p_for=1.0, lines=t.lines + [
          f"{self.arm} did not complete at seed{'s' * (len(p.lost()) > 1)} "
          f"{', '.join(map(str, p.lost()))}, where {self.reference} ran away: the claim cannot "
          f"come out reproduced; the other seeds can decide against it."])
    return t
