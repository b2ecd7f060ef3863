"""The z-loss study's claims, committed before it runs: where the plain model's output softmax runs away, z-loss 1e-4 holds its log Z and lowers its loss, judged per seed against the plain model of the same seed and rate.

Wortsman et al. 2023 (section 3.2): without weight decay, at high learning rates, the output
logits diverge, more so the wider the model, and PaLM's z-loss (``1e-4 * log(Z)^2``) prevents
it. The z-loss probe (``docs/studies/zloss_probe-cpu``, exploratory, seeds 400-401) found this
shape's runaway at d128, weight decay 0, rate 0.3 (log Z 15.7 and 18.4 nats above log V, the
loss 14.3 against 9.0 at init), and in its one 2-seed look z-loss 1e-4 did not hold it (+25.3,
+26.6). This study judges the claim on new seeds (``grid.py``).

The rules see the probe's rows (``zloss_probe.rules.Row``, a record: a model's width,
vocabulary, weight decay, z-loss, rate, seed, whether it completed, its log Z at step 0 and at
the last probe, its final validation loss); what they compute from its fields is all in this
file and the shared rule modules, so the rules' recorded identity covers it. log Z is the
output softmax's mean log-normaliser at the last probe (step 200), V the vocabulary. Two references bound where log Z belongs: a uniform
softmax's, ``log V`` (6.24 at V = 512), near which a trained model's stays (the probe's d128
models ended within 1.1 nats of it at every rate up to 0.1), and z-loss's own target, log Z = 0,
towards which z-loss pulls it. A model's **overshoot** on a side is how far its log Z ended
past that band: above, ``log Z - log V``; below, ``-log Z``. At the widest width, weight
decay 0, per rate and seed:

- the plain model (z-loss 0) **runs away** when it completed with an overshoot of at least
  ``RUNAWAY_NATS`` on a side: above, the probe's rule (log Z at least 2 nats above log V);
  below, log Z at or under -2 (the band's lower end is z-loss's target: a z-loss model pulled
  to log Z = 0 has not run away, so neither has a plain model there);
- a claim at a rate is judged on the seeds where the plain model ran away, each paired with
  the z-loss 1e-4 model of that seed and rate, on the side the plain model ran to. With fewer
  than ``MIN_RUNAWAY_SEEDS`` such seeds it **cannot be judged** there (``CANNOT_JUDGE``, a
  verdict of its own: where nothing runs away nothing is held, and that is not a failure to
  reproduce).

The claims, at each rate of the grid:

- ``holds``: the z-loss model's log Z ends within ``RUNAWAY_NATS`` of the band on the side
  the plain model ran to: per seed its overshoot there. Reproduced when the mean overshoot
  lies decisively below ``RUNAWAY_NATS`` (the one-sided t test against it), not reproduced
  when decisively above it, inconclusive otherwise;
- ``loss``: the z-loss model's final validation loss is lower: per seed z-loss minus plain,
  reproduced when decisively negative (the t test), not reproduced when decisively positive
  or equivalent to none within ``LOSS_MARGIN`` (TOST), inconclusive otherwise.

The family is every test that can be judged, decided together (``claims.decide_family``):
Holm over their tests for the claims and, apart, against them (family-wise error
``stats.ALPHA``). A z-loss model that did not complete (diverged) at a judged seed cannot
support its claim: the test's p for is 1 (it cannot come out reproduced), while the seeds that
completed can still decide against it; the seed is named. Leave-one-seed-out from
``LOSO_MIN_SEEDS`` seeds. The z-loss 1e-3 arm is reported beside these, not judged.
"""

from __future__ import annotations

import dataclasses
import math

from research import claims
from research import stats
from research.claims import Test, Verdict
from experiments.studies.zloss_probe.rules import Row

PLAIN = 0.0
JUDGED_Z = 1e-4  # PaLM's, Wortsman et al.'s
REPORTED_Z = 1e-3  # reported beside the claim, not judged
RUNAWAY_NATS = 2.0  # the probe's GROWS_NATS: its finding is this study's premise
MIN_RUNAWAY_SEEDS = 3  # a t interval with two degrees of freedom at least
# nats: a z-loss that moves the final loss by less than this where the plain model's log Z ran
# away (the probe's ended 5.3 nats above its loss at init) prevents nothing: twice the 0.05
# nats the norm x MLP study holds a warmup penalty to as none (about 1 % of the loss).
LOSS_MARGIN = 0.1
LOSO_MIN_SEEDS = 5
CANNOT_JUDGE = "Cannot be judged"
NOT_POWERED_VERDICT = "Not powered"
# The tests the budget cannot decide, declared before the run by the power plan (``plan.py``;
# a test recomputes it): at this budget it powers all four.
NOT_POWERED: frozenset[str] = frozenset()

CLAIM = "z-loss holds the output softmax's log Z where the plain model's runs away"
HOLDS_RULE = (f"at the widest width, weight decay 0, per rate: on the seeds where the plain "
              f"model completed with its log Z at least {RUNAWAY_NATS:g} nats past the band "
              f"[0, log V] (above: log Z - log V; below: -log Z; at least {MIN_RUNAWAY_SEEDS} "
              f"such seeds, else it cannot be judged there), the z-loss {JUDGED_Z:g} model of "
              f"the same seed and rate: its overshoot past the band on that side; reproduced "
              f"when the mean overshoot lies decisively below {RUNAWAY_NATS:g} nats (one-sided "
              f"t test), not reproduced when decisively above, inconclusive otherwise; Holm "
              f"over the family of the tests judged; a z-loss model that did not complete "
              f"cannot support it.")
LOSS_RULE = (f"on the same seeds, the final validation loss of the z-loss {JUDGED_Z:g} model "
             f"minus the plain model's, paired by seed: reproduced when decisively negative (t "
             f"test), not reproduced when decisively positive or equivalent to none within "
             f"{LOSS_MARGIN:g} nats (TOST), inconclusive otherwise; Holm over the family of the "
             f"tests judged; a z-loss model that did not complete cannot support it.")


def excess(r: Row) -> float:
  """log Z at the last probe minus a uniform softmax's, ``log V``."""
  return r.log_z_end - math.log(r.vocab)


def read(r: Row | None) -> bool:
  """Whether the model completed with a log Z at its last probe."""
  return r is not None and r.completed and math.isfinite(r.log_z_end)


def overshoot(r: Row, side: int) -> float:
  """How far the model's log Z ended past the band [0, log V] on ``side`` (+1: above log V)."""
  return excess(r) if side > 0 else -r.log_z_end


def runaway(r: Row) -> int:
  """The side (+1 above log V, -1 below 0) on which the model's log Z ran away, else 0."""
  if not read(r):
    return 0
  return next((side for side in (1, -1) if overshoot(r, side) >= RUNAWAY_NATS), 0)


def rates(rows: list[Row]) -> list[float]:
  """The rates of the plain models at the widest width, weight decay 0."""
  width = max((r.width for r in rows), default=0)
  return sorted({r.lr for r in rows if (r.width, r.weight_decay, r.z_loss) == (width, 0.0, PLAIN)})


@dataclasses.dataclass(frozen=True)
class Pairs:
  """At one rate (the widest width, weight decay 0): the plain and the z-loss models by seed,
  and the seeds where the plain model ran away with the side it ran to."""
  width: int
  rate: float
  z_loss: float
  plain: dict[int, Row]
  other: dict[int, Row]
  sides: dict[int, int]  # seed -> +1 / -1, where the plain model ran away and ``other`` exists

  def judged(self) -> list[int]:
    """The judged seeds whose ``other`` model completed (the rest did not: ``lost``)."""
    return [s for s in self.sides if read(self.other[s])]

  def lost(self) -> list[int]:
    return [s for s in self.sides if not read(self.other[s])]

  def overshoots(self) -> tuple[dict[int, float], dict[int, float]]:
    """Per judged seed, the plain model's overshoot and the other's."""
    seeds = self.judged()
    return ({s: overshoot(self.plain[s], self.sides[s]) for s in seeds},
            {s: overshoot(self.other[s], self.sides[s]) for s in seeds})

  def losses(self) -> tuple[dict[int, float], dict[int, float]]:
    seeds = self.judged()
    return {s: self.plain[s].final for s in seeds}, {s: self.other[s].final for s in seeds}

  def summary(self) -> str:
    """``d128, rate 0.3: the plain model's log Z ran away in 9 of 10 seeds (...)``."""
    ran = {s: runaway(r) for s, r in self.plain.items() if runaway(r)}
    up = sum(v > 0 for v in ran.values())
    gone = sorted(s for s, r in self.plain.items() if not read(r))
    unpaired = sorted(s for s in ran if s not in self.other)
    notes = ([f"the plain model did not complete at {', '.join(map(str, gone))}"] if gone else [])
    if unpaired:
      notes.append(f"no z-loss {self.z_loss:g} model to pair with: {', '.join(map(str, unpaired))}")
    return (f"d{self.width}, rate {self.rate:g}: the plain model's log Z ran away in "
            f"{len(ran)} of {len(self.plain)} seeds ({up} above log V, "
            f"{len(ran) - up} below" + "".join(f"; {n}" for n in notes) + ")")


def pairs(rows: list[Row], rate: float, z_loss: float = JUDGED_Z) -> Pairs:
  """The plain and the ``z_loss`` models at ``rate`` (see ``Pairs``)."""
  width = max(r.width for r in rows)
  at = lambda z: {r.seed: r for r in rows if (r.width, r.weight_decay, r.z_loss, r.lr)
                  == (width, 0.0, z, rate)}
  plain, other = at(PLAIN), at(z_loss)
  sides = {s: runaway(r) for s, r in sorted(plain.items()) if s in other and runaway(r)}
  return Pairs(width, rate, z_loss, plain, other, sides)


def _lost_line(p: Pairs) -> tuple[float | None, list[str]]:
  """A test's p for when a z-loss model did not complete at a judged seed (1: it cannot be
  reproduced), and the line that says so."""
  lost = p.lost()
  if not lost:
    return None, []
  return 1.0, [f"The z-loss model did not complete at seed{'s' * (len(lost) > 1)} "
               f"{', '.join(map(str, lost))}, where the plain model ran away: the claim cannot "
               f"come out reproduced; the other seeds can decide against it."]


def _cannot(claim: str, rule: str, p: Pairs) -> Verdict:
  return Verdict(claim, CANNOT_JUDGE, [
      p.summary() + ".", f"It cannot be judged at this rate: the claim is about models whose "
      f"log Z runs away, and at least {MIN_RUNAWAY_SEEDS} seeds are needed. This is not a "
      f"failure to reproduce it."], rule)


def check_holds(rows: list[Row], rate: float) -> Test:
  p = pairs(rows, rate)
  claim = f"z-loss {JUDGED_Z:g} holds log Z where the plain model's runs away (rate {rate:g})"
  key = f"holds@{rate:g}"
  if len(p.sides) < MIN_RUNAWAY_SEEDS:
    return Test(key, claim, HOLDS_RULE, [], missing=_cannot(claim, HOLDS_RULE, p))
  plain, zl = p.overshoots()
  e, pf, pa = stats.below(list(zl.values()), RUNAWAY_NATS)
  e = dataclasses.replace(e, kind="paired seeds")
  cut = stats.paired(plain, zl)
  lines = [p.summary() + ".",
           f"Overshoot past the band [0, log V] on the plain model's side: plain "
           f"{stats.one_sample(list(plain.values())).text()}; z-loss {e.text()} (bound "
           f"+{RUNAWAY_NATS:g}); plain - z-loss {cut.text()}."]
  override, note = _lost_line(p)
  return Test(key, claim, HOLDS_RULE, lines + note, e,
              f"z-loss model's overshoot past [0, log V] on the plain model's side (held below "
              f"+{RUNAWAY_NATS:g})", pf if override is None else override, pa, [], tuple(zl))


def check_loss(rows: list[Row], rate: float) -> Test:
  p = pairs(rows, rate)
  claim = (f"z-loss {JUDGED_Z:g} lowers the final loss where the plain model's log Z runs away "
           f"(rate {rate:g})")
  key = f"loss@{rate:g}"
  if len(p.sides) < MIN_RUNAWAY_SEEDS:
    return Test(key, claim, LOSS_RULE, [], missing=_cannot(claim, LOSS_RULE, p))
  plain, zl = p.losses()
  diff = {s: zl[s] - plain[s] for s in plain}
  e, pf, pa = stats.directed(list(diff.values()), "lower", LOSS_MARGIN)
  e = dataclasses.replace(e, kind="paired")
  lines = [p.summary() + ".",
           f"Final validation loss: plain {stats.one_sample(list(plain.values())).text()}, z-loss "
           f"{stats.one_sample(list(zl.values())).text()}."]
  override, note = _lost_line(p)
  return Test(key, claim, LOSS_RULE, lines + note, e, "final loss, z-loss - plain",
              pf if override is None else override, pa, [], tuple(diff))


CHECKS = (check_holds, check_loss)


def family(rows: list[Row]) -> list[tuple[Test, Verdict]]:
  """Every test (each claim at each rate) and its verdict, decided together under Holm; the
  tests the plan declared not powered are reported, not judged."""
  tests = [check(rows, rate) for rate in rates(rows) for check in CHECKS]
  for t in tests:
    if t.key in NOT_POWERED and t.missing is None:
      t.missing = Verdict(t.claim, NOT_POWERED_VERDICT, t.lines + [
          "Not powered: the plan, before the run, found that the budget cannot decide it; "
          "the figures are reported, not judged."], t.rule, t.effect, t.effect_name)
  return claims.decide_family(tests)


def judge(rows: list[Row], robust: bool = True) -> list[Verdict]:
  """The verdicts, with leave-one-seed-out where a test has ``LOSO_MIN_SEEDS`` seeds."""
  pairs_ = family(rows)
  if not pairs_:
    return [claims.missing(CLAIM, "no plain model (z-loss 0, weight decay 0)", HOLDS_RULE)]
  if robust:
    for t, v in pairs_:
      if t.missing is not None:
        continue
      if len(t.seeds) < LOSO_MIN_SEEDS:
        v.robustness = f"Leave-one-seed-out: uninformative at {len(t.seeds)} seeds."
        continue
      again = lambda rs, key=t.key: next(vv for tt, vv in family(rs) if tt.key == key)
      v.robustness = claims.robustness(again, rows, v.verdict)
  return [v for _, v in pairs_]


RULE_ROOTS = ("judge",)
