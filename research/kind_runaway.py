"""``Runaway``: on the seeds where a reference arm's log Z ran away past [0, log V], whether an arm holds it or lowers the final loss (per-seed tables: ``experiments/readings/zloss.py``)."""

from __future__ import annotations

import dataclasses
import math

from research import claims
from research import stats
from research.kind_base import at_text, Claim, Data, NAN
from research.kind_zloss import CANNOT_JUDGE, Model, models
from research.kind_drift import late_models


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

  def judged(self) -> list[int]:
    return [s for s in self.sides if self.other[s].read]

  def lost(self) -> list[int]:
    return [s for s in self.sides if not self.other[s].read]

  def per_seed(self, loss: bool) -> tuple[dict[int, float], dict[int, float]]:
    """The reference's and the arm's final loss (``loss``) or overshoot on the side it ran to, per judged seed."""
    seeds, read = self.judged(), lambda m, s: m.final if loss else overshoot(m, self.sides[s])
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

  def premise(self) -> str:
    late = (f" averaged over the readings in the last {self.window:.0%} of training" if math.isfinite(self.window)
            else "")
    learned = "learned (completed, not diverged, below the unigram)" if late else "completed"
    return (f"at rate {self.rate:g}, on the seeds where {self.reference} {learned} with its "
            f"log_z{late} at least {self.bound:g} nats past the band [0, log V] (above: "
            f"log_z - log V; below: -log_z; at least {self.min_seeds} such seeds, "
            f"else it cannot be judged there), {self.arm} of the same seed and rate"
            + (" over the same readings (a model that does not learn is not read)" if late else ""))

  def rule(self) -> str:
    if self.reads == "loss":
      want = (f"the final validation loss minus {self.reference}'s, paired by seed; reproduced when "
              f"decisively negative (t test), not reproduced when decisively positive or equivalent to "
              f"none within {self.margin:g} nats (TOST)")
    else:
      want = (f"its overshoot past the band on that side; reproduced when the mean overshoot lies "
              f"decisively below {self.bound:g} nats (one-sided t test), not reproduced when decisively above")
    return (f"{self.premise()}: {want}, inconclusive otherwise; a model of {self.arm} that did not "
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
      lines = [f"Final validation loss: {self.reference} {stats.one_sample(list(plain.values())).text()}, "
               f"{self.arm} {stats.one_sample(list(other.values())).text()}."]
    else:
      plain, values = p.per_seed(loss=False)
      e, p_for, p_against = stats.below(list(values.values()), self.bound)
      e = dataclasses.replace(e, kind="paired seeds")
      lines = [f"Overshoot past the band [0, log V] on {self.reference}'s side: {self.reference} "
               f"{stats.one_sample(list(plain.values())).text()}; {self.arm} {e.text()} (bound "
               f"+{self.bound:g}); {self.reference} - {self.arm} {stats.paired(plain, values).text()}."]
    t = claims.Test(self.key, self.claim, self.rule(), [p.summary() + ".", *lines], e, self.quantity_text(),
                    p_for, p_against, [], tuple(values))
    if p.lost():
      t = dataclasses.replace(t, p_for=1.0, lines=t.lines + [
          f"{self.arm} did not complete at seed{'s' * (len(p.lost()) > 1)} "
          f"{', '.join(map(str, p.lost()))}, where {self.reference} ran away: the claim cannot "
          f"come out reproduced; the other seeds can decide against it."])
    return t
