"""The z-loss studies' kinds: where a probe (the output's log Z) sits against ``log V`` at the end of training.

``Departs`` (a finding: where a probe ends away from ``log V``), ``Holds`` and ``LowersLoss``
(both ``Runaway``: on the seeds where a reference arm's log Z ran away, whether an arm holds it
and lowers the final loss; *cannot be judged* where too few ran away), and the report items
``ExcessTable`` and ``RunawaySeeds``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

import numpy as np

from research import claims
from research import stats
from research.kind_base import at_text, Claim, Data, in_order, named, NAN, Section, words


# ----------------------------------------------------------------------------- zloss_probe, zloss, mup_base
#
# Kinds on a probe at the end of training (a cell record's ``end``: the output softmax's mean
# ``log_z``) against a uniform softmax's, ``log V`` (V the vocabulary), with the report items
# that show it; and a choice among arms. A finding or a choice is not a test of the
# literature (``test_kind = "finding"``): no power plan, no leave-one-seed-out; its verdict
# is the test's ``missing`` verdict, out of any family.

CANNOT_JUDGE = "Cannot be judged"  # the claim's premise did not hold: not a failure to reproduce
FOUND, NOT_FOUND, CHOSEN = "Found", "Not found", "Chosen"


@dataclasses.dataclass(frozen=True)
class Model:
  """One model as the probe kinds see it."""
  seed: int
  lr: float
  completed: bool
  start: float  # the probe at step 0
  end: float  # the probe at the last probe (nan: the model did not complete)
  vocab: int
  final: float  # the final validation loss (nan: the model did not complete)

  @property
  def excess(self) -> float:
    """The probe at the end minus ``log V``, a uniform softmax's log Z."""
    return self.end - math.log(self.vocab)

  @property
  def read(self) -> bool:
    return self.completed and math.isfinite(self.end)


def models(data: Data, arm: str, at: Mapping[str, Any] | tuple = (), probe: str = "log_z") -> list[Model]:
  """``arm``'s models at ``at``, by rate and seed."""
  value = lambda d: NAN if (d or {}).get(probe) is None else float(d[probe])
  out = []
  for rec in data.records(arm, at):
    done = rec["status"] == "completed"
    out.append(Model(int(rec["seed"]), float(rec["learning_rate"]), done, value(rec.get("init")),
                     value(rec.get("end")) if done else NAN, int(rec["overrides"]["model.vocab_size"]),
                     float(rec["final_val_loss"]) if done else NAN))
  return sorted(out, key=lambda m: (m.lr, m.seed))


def by_rate(ms: list[Model]) -> dict[float, list[Model]]:
  out: dict[float, list[Model]] = {}
  for m in ms:
    out.setdefault(m.lr, []).append(m)
  return out


def state(ms: list[Model], bound: float) -> str:
  """``grows`` (every seed completed |excess| >= ``bound``), ``stays`` (every seed completed
  below it) or ``mixed`` (seeds disagree, or a model did not complete)."""
  if not ms or not all(m.completed and math.isfinite(m.excess) for m in ms):
    return "mixed"
  big = [abs(m.excess) >= bound for m in ms]
  return "grows" if all(big) else "stays" if not any(big) else "mixed"


def median_excess(ms: list[Model]) -> float:
  finite = [m.excess for m in ms if math.isfinite(m.excess)]
  return float(np.median(finite)) if finite else NAN


@dataclasses.dataclass(frozen=True)
class ExcessTable:
  """A report item: per arm, grid point and rate, over seeds, the probe at step 0 and at the
  end (medians), its excess over ``log V`` (median, and each seed's), its ``state`` at
  ``bound`` and the final loss (median; — where a model diverged), and a figure of the
  median excess against the rate, a panel per grid point."""
  bound: float = 2.0
  probe: str = "log_z"
  note: str = ""  # a line under the heading

  def section(self, data: Data, out: str) -> Section:
    med = lambda xs: float(np.median(xs)) if xs else NAN
    lines = [f"## {self.probe} per arm and rate", "", *([self.note, ""] if self.note else []),
             f"Per arm, grid point and rate, over the seeds: {self.probe} at step 0 and at the end "
             f"(medians), the excess (at the end minus log V, a uniform softmax's: median, and each "
             f"seed's), its state at {self.bound:g} nats (grows, stays or mixed) and the final "
             f"validation loss (median; — where a model diverged).", "",
             "| arm | point | rate | start | end | excess over log V (per seed) | state | final loss |",
             "|---" * 8 + "|"]
    curves_: dict[tuple, list[tuple[float, float]]] = {}
    for point in in_order({p for arm in data.arms() for p in data.points(arm)}):
      for arm in [a for a in data.arms() if point in data.points(a)]:
        for lr, ms in by_rate(models(data, arm, point, self.probe)).items():
          fin = lambda f: [f(m) for m in ms if math.isfinite(f(m))]
          seeds = ", ".join("—" if not math.isfinite(m.excess) else f"{m.excess:+.2f}" for m in ms)
          loss = med(fin(lambda m: m.final))
          lines.append(f"| {arm} | {at_text(point)[2:] or '—'} | {lr:g} | {med(fin(lambda m: m.start)):.2f} | "
                       f"{med(fin(lambda m: m.end)):.2f} | {median_excess(ms):+.2f} ({seeds}) | "
                       f"{state(ms, self.bound)} | {'—' if math.isnan(loss) else format(loss, '.3f')} |")
          curves_.setdefault(point, []).append((arm, lr, median_excess(ms)))
    return Section(lines + [""], [self.plot(curves_, out)])

  def plot(self, by_point: dict, out: str) -> str | None:
    if not by_point:
      return None
    from research import page as reporting  # pylint: disable=import-outside-toplevel
    fig = reporting.figure(figsize=(5 * len(by_point), 3.8))
    for i, point in enumerate(in_order(by_point)):
      ax = fig.add_subplot(1, len(by_point), i + 1)
      for j, arm in enumerate(dict.fromkeys(a for a, _, _ in by_point[point])):
        pts = [(lr, x) for a, lr, x in by_point[point] if a == arm]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "os^v"[j % 4] + "-", color=f"C{j}", label=arm)
      for bound in (-self.bound, self.bound):
        ax.axhline(bound, color="grey", lw=0.8, ls=":")
      ax.set(xscale="log", xlabel="peak learning rate", ylabel=f"{self.probe} at the end - log V (nats)",
             title=at_text(point)[2:])
      ax.legend(fontsize=7)
    return reporting.save(fig, out, f"{self.probe}_excess.png")


@dataclasses.dataclass(frozen=True)
class Departs(Claim):
  """A finding: where the probe at the end ends at least ``bound`` from ``log V``. At the
  largest value of ``axis``, per arm of ``arms`` and rate: ``state`` over its seeds. Found when
  one grows, Not found when all stay, Inconclusive otherwise; beside each found setting, its
  arm's partner in ``beside`` (shown, not judged). Its section: ``ExcessTable`` and
  results.json's ``finding`` (the arms found named by their overrides ``names``)."""
  family: str | None = None
  arms: tuple[str, ...] = ()
  beside: tuple[tuple[str, str], ...] = ()  # (arm, the arm shown beside it)
  axis: str = "model.d_model"
  bound: float = 2.0
  probe: str = "log_z"
  names: tuple[str, ...] = ()  # the overrides that name an arm in the finding
  test_kind = "finding"

  def needs(self) -> tuple[str, ...]:
    return tuple(dict.fromkeys(self.arms + tuple(b for _, b in self.beside)))

  def quantity_text(self) -> str:
    return f"|{self.probe} at the end - log V| per arm and rate at the largest {self.axis}"

  def rule(self) -> str:
    return (f"per (arm, {self.axis.split('.')[-1]}, rate), 'grows' when every seed completed with "
            f"|{self.probe} at the end - log V| >= {self.bound:g} nats (V the vocabulary), 'stays' "
            f"when every seed completed below it, 'mixed' otherwise; at the largest "
            f"{self.axis.split('.')[-1]} in {', '.join(self.arms)}: Found when one (arm, rate) "
            f"grows, Not found when all stay, Inconclusive otherwise")

  def find(self, data: Data) -> tuple[str, dict, list[tuple[str, float]], list[str]]:
    """``(verdict, the point judged, the (arm, rate) that grow, lines)``."""
    values = sorted({v for a in self.arms for v in data.values(a, self.axis)})
    if not values:
      return claims.INCONCLUSIVE, {}, [], ["No models."]
    top = {self.axis: values[-1]}
    plain = {(a, lr): ms for a in self.arms for lr, ms in by_rate(models(data, a, top, self.probe)).items()}
    states = {k: state(ms, self.bound) for k, ms in plain.items()}
    grows = [k for k, s in states.items() if s == "grows"]
    where, lines = at_text(top)[2:], []
    for arm, lr in grows:
      text = (f"{where}, {words(named(data, arm, self.names)) or arm}, rate {lr:g}: {self.probe} minus "
              f"log V, median {median_excess(plain[(arm, lr)]):+.2f} nats")
      for partner in [b for a, b in self.beside if a == arm]:
        ms = by_rate(models(data, partner, top, self.probe)).get(lr, [])
        text += f"; {partner}: median excess {median_excess(ms):+.2f} ({state(ms, self.bound)})"
      lines.append(text + ".")
    if grows:
      low = {a: min(lr for b, lr in grows if b == a) for a, _ in grows}
      lines.append(f"Found at {where}: " + ", ".join(
          f"{words(named(data, a, self.names)) or a} from rate {lr:g}" for a, lr in low.items()) + ".")
      return FOUND, top, grows, lines
    if states and all(s == "stays" for s in states.values()):
      return NOT_FOUND, top, [], lines + [
          f"At {where} {self.probe} ends within {self.bound:g} nats of log V in every arm and rate "
          f"(largest |median excess| {max(abs(median_excess(ms)) for ms in plain.values()):.2f})."]
    mixed = sum(s == "mixed" for s in states.values())
    return claims.INCONCLUSIVE, top, [], lines + [
        f"At {where} no setting grows in every seed; {mixed} of {len(states)} are mixed (seeds "
        f"disagree or a model diverged)."]

  def test(self, data: Data) -> claims.Test:
    verdict, _, _, lines = self.find(data)
    return claims.Test(self.key, self.claim, self.rule(), [],
                       missing=claims.Verdict(self.claim, verdict, lines, self.rule()))

  def section(self, data: Data, out: str) -> Section:
    verdict, top, grows, _ = self.find(data)
    s = ExcessTable(self.bound, self.probe).section(data, out)
    s.results["finding"] = {"verdict": verdict, **{k.split(".")[-1]: v for k, v in top.items()},
                            "grows": [{**named(data, a, self.names), "learning_rate": lr} for a, lr in grows]}
    return s


def overshoot(m: Model, side: int) -> float:
  """How far the probe ended past the band [0, log V] on ``side`` (+1: above log V)."""
  return m.excess if side > 0 else -m.end


def runaway(m: Model | None, bound: float) -> int:
  """The side (+1 above log V, -1 below 0) where the model's probe ended ``bound`` past the band, else 0."""
  if m is None or not m.read:
    return 0
  return next((side for side in (1, -1) if overshoot(m, side) >= bound), 0)


@dataclasses.dataclass(frozen=True)
class Pairs:
  """At one rate: the reference's and the arm's models by seed, and the seeds where the
  reference ran away (with an arm model to pair) with the side it ran to."""
  text: str  # "d_model 128, rate 0.3"
  reference: str
  arm: str
  plain: dict[int, Model]
  other: dict[int, Model]
  sides: dict[int, int]
  bound: float

  def judged(self) -> list[int]:
    return [s for s in self.sides if self.other[s].read]

  def lost(self) -> list[int]:
    return [s for s in self.sides if not self.other[s].read]

  def overshoots(self) -> tuple[dict[int, float], dict[int, float]]:
    seeds = self.judged()
    return ({s: overshoot(self.plain[s], self.sides[s]) for s in seeds},
            {s: overshoot(self.other[s], self.sides[s]) for s in seeds})

  def losses(self) -> tuple[dict[int, float], dict[int, float]]:
    seeds = self.judged()
    return {s: self.plain[s].final for s in seeds}, {s: self.other[s].final for s in seeds}

  def summary(self) -> str:
    ran = {s: runaway(m, self.bound) for s, m in self.plain.items() if runaway(m, self.bound)}
    up = sum(v > 0 for v in ran.values())
    gone = sorted(s for s, m in self.plain.items() if not m.read)
    unpaired = sorted(s for s in ran if s not in self.other)
    notes = [f"{self.reference} did not complete at {', '.join(map(str, gone))}"] if gone else []
    if unpaired:
      notes.append(f"no {self.arm} model to pair with: {', '.join(map(str, unpaired))}")
    return (f"{self.text}: {self.reference}'s log Z ran away in {len(ran)} of {len(self.plain)} "
            f"seeds ({up} above log V, {len(ran) - up} below" + "".join(f"; {n}" for n in notes) + ")")


@dataclasses.dataclass(frozen=True)
class Runaway(Claim):
  """What ``Holds`` and ``LowersLoss`` share: at ``rate`` (and ``at``), the seeds where the
  ``reference`` arm's model completed with its probe at least ``bound`` past the band
  [0, log V] (above: its excess over log V; below: minus the probe), each paired with
  ``arm``'s model of that seed and rate, on that side. With fewer than ``min_seeds`` such
  seeds the claim cannot be judged there (``CANNOT_JUDGE``: where nothing runs away nothing
  is held). An ``arm`` model that did not complete at a judged seed cannot support the claim
  (its p for is 1), while the seeds that completed can still decide against it."""
  arm: str = ""
  reference: str = ""
  rate: float = NAN
  at: tuple = ()
  bound: float = 2.0
  min_seeds: int = 3
  probe: str = "log_z"

  def needs(self) -> tuple[str, ...]:
    return (self.arm, self.reference)

  def pairs(self, data: Data, arm: str | None = None) -> Pairs:
    arm = arm or self.arm
    at_rate = lambda a: {m.seed: m for m in models(data, a, self.at, self.probe) if m.lr == self.rate}
    plain, other = at_rate(self.reference), at_rate(arm)
    sides = {s: runaway(m, self.bound) for s, m in sorted(plain.items())
             if s in other and runaway(m, self.bound)}
    points = {p for p in data.points(self.reference)} if not self.at else {tuple(self.at)}
    where = "; ".join(at_text(p)[2:] for p in sorted(points, key=repr) if p)
    return Pairs(f"{where + ', ' if where else ''}rate {self.rate:g}", self.reference, arm, plain,
                 other, sides, self.bound)

  def judged_test(self, data: Data, p: Pairs) -> claims.Test:
    raise NotImplementedError

  def test(self, data: Data) -> claims.Test:
    p = self.pairs(data)
    if len(p.sides) < self.min_seeds:
      return claims.Test(self.key, self.claim, self.rule(), [], missing=claims.Verdict(
          self.claim, CANNOT_JUDGE, [p.summary() + ".", f"It cannot be judged at this rate: the "
          f"claim is about models whose log Z runs away, and at least {self.min_seeds} seeds are "
          f"needed. This is not a failure to reproduce it."], self.rule()))
    t = self.judged_test(data, p)
    if p.lost():
      t = dataclasses.replace(t, p_for=1.0, lines=t.lines + [
          f"{self.arm} did not complete at seed{'s' * (len(p.lost()) > 1)} "
          f"{', '.join(map(str, p.lost()))}, where {self.reference} ran away: the claim cannot "
          f"come out reproduced; the other seeds can decide against it."])
    return t

  def premise(self) -> str:
    return (f"at rate {self.rate:g}, on the seeds where {self.reference} completed with its "
            f"{self.probe} at least {self.bound:g} nats past the band [0, log V] (above: "
            f"{self.probe} - log V; below: -{self.probe}; at least {self.min_seeds} such seeds, "
            f"else it cannot be judged there), {self.arm} of the same seed and rate")


@dataclasses.dataclass(frozen=True)
class Holds(Runaway):
  """``arm`` holds the probe where ``reference``'s runs away: per judged seed, ``arm``'s
  overshoot past the band on the reference's side; reproduced when its mean lies decisively
  below ``bound`` (one-sided t test), not reproduced when decisively above."""

  def quantity_text(self) -> str:
    return f"{self.arm}'s overshoot past [0, log V] on {self.reference}'s side (held below +{self.bound:g})"

  def rule(self) -> str:
    return (f"{self.premise()}: its overshoot past the band on that side; reproduced when the "
            f"mean overshoot lies decisively below {self.bound:g} nats (one-sided t test), not "
            f"reproduced when decisively above, inconclusive otherwise; a model of {self.arm} that "
            f"did not complete cannot support it")

  def judged_test(self, data: Data, p: Pairs) -> claims.Test:
    plain, held = p.overshoots()
    e, p_for, p_against = stats.below(list(held.values()), self.bound)
    e = dataclasses.replace(e, kind="paired seeds")
    lines = [p.summary() + ".",
             f"Overshoot past the band [0, log V] on {self.reference}'s side: {self.reference} "
             f"{stats.one_sample(list(plain.values())).text()}; {self.arm} {e.text()} (bound "
             f"+{self.bound:g}); {self.reference} - {self.arm} {stats.paired(plain, held).text()}."]
    return claims.Test(self.key, self.claim, self.rule(), lines, e, self.quantity_text(), p_for,
                       p_against, [], tuple(held))


@dataclasses.dataclass(frozen=True)
class LowersLoss(Runaway):
  """``arm`` lowers the final loss where ``reference``'s probe runs away: per judged seed,
  ``arm - reference``; reproduced when decisively negative (t test), not reproduced when
  decisively positive or equivalent to none within ``margin`` (TOST)."""
  margin: float = 0.1

  def quantity_text(self) -> str:
    return f"final loss, {self.arm} - {self.reference}"

  def rule(self) -> str:
    return (f"{self.premise()}: the final validation loss minus {self.reference}'s, paired by "
            f"seed; reproduced when decisively negative (t test), not reproduced when decisively "
            f"positive or equivalent to none within {self.margin:g} nats (TOST), inconclusive "
            f"otherwise; a model of {self.arm} that did not complete cannot support it")

  def judged_test(self, data: Data, p: Pairs) -> claims.Test:
    plain, other = p.losses()
    diff = {s: other[s] - plain[s] for s in plain}
    e, p_for, p_against = stats.directed(list(diff.values()), "lower", self.margin)
    e = dataclasses.replace(e, kind="paired")
    lines = [p.summary() + ".",
             f"Final validation loss: {self.reference} {stats.one_sample(list(plain.values())).text()}, "
             f"{self.arm} {stats.one_sample(list(other.values())).text()}."]
    return claims.Test(self.key, self.claim, self.rule(), lines, e, self.quantity_text(), p_for,
                       p_against, [], tuple(diff))


@dataclasses.dataclass(frozen=True)
class RunawaySeeds:
  """A report item: per rate and seed, ``reference``'s excess over log V and whether (and on
  which side) it ran away, each of ``arms``' excess, and every model's final loss; then, for
  each of ``reported`` (arms not judged), its overshoot and its loss difference from
  ``reference`` on the seeds where the reference ran away."""
  reference: str
  arms: tuple[str, ...]
  reported: tuple[str, ...] = ()
  bound: float = 2.0
  at: tuple = ()

  def section(self, data: Data, out: str) -> Section:
    del out
    fmt = lambda x, f: "—" if x is None else format(x, f)
    names = (self.reference, *self.arms)
    lines = ["## Per seed", "", f"Each seed's models at one rate: log Z at the end minus log V, "
             f"whether {self.reference} ran away (past the band [0, log V] by {self.bound:g} nats, "
             f"and on which side), and the final validation loss (— where a model did not complete).", "",
             f"| rate | seed | {self.reference}: log Z - log V | ran away | " + " | ".join(self.arms)
             + " | " + " | ".join(f"{a} loss" for a in names) + " |", "|---" * (3 + 2 * len(names)) + "|"]
    rows, reported = [], []
    for rate in sorted({m.lr for m in models(data, self.reference, self.at)}):
      claim = lambda arm: Runaway("", None, arm=arm, reference=self.reference, rate=rate,
                                  at=self.at, bound=self.bound)
      by = {a: claim(a).pairs(data).other for a in names}
      for seed, plain in claim(self.reference).pairs(data).plain.items():
        row = {"learning_rate": rate, "seed": seed, "runaway": runaway(plain, self.bound)}
        for a in names:
          m = by[a].get(seed)
          row[f"{a}_excess"], row[f"{a}_final"] = (m.excess, m.final) if m and m.read else (None, None)
        rows.append(row)
        lines.append(f"| {rate:g} | {seed} | {fmt(row[f'{self.reference}_excess'], '+.2f')} | "
                     f"{ {1: 'above', -1: 'below', 0: 'no'}[row['runaway']]} | "
                     + " | ".join(fmt(row[f"{a}_excess"], "+.2f") for a in self.arms) + " | "
                     + " | ".join(fmt(row[f"{a}_final"], ".3f") for a in names) + " |")
      for arm in self.reported:
        p = claim(arm).pairs(data)
        _, over = p.overshoots()
        plain, other = p.losses()
        o, d = stats.one_sample(list(over.values())), stats.paired(other, plain)
        reported.append((arm, f"- {p.summary()}: overshoot {o.text()}; final loss {arm} - "
                         f"{self.reference} {d.text()}" + (f"; did not complete at seeds "
                         f"{', '.join(map(str, p.lost()))}" if p.lost() else "") + ".",
                         {"arm": arm, "learning_rate": rate, "runaway_seeds": list(p.sides),
                          "overshoot": o, "loss_difference": d, "not_completed": p.lost()}))
    for arm in self.reported:
      lines += ["", f"## {arm} (reported, not judged)", "", f"Not part of the claims: the same "
                f"quantities for {arm}, on the seeds where {self.reference} ran away.", "",
                *[text for a, text, _ in reported if a == arm]]
    return Section(lines + [""], [], {"seeds": rows, "reported": [r for _, _, r in reported]})
