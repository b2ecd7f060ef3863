"""What every claim kind shares: a study's ``Data``, the ``Claim`` base, a report ``Section``, the per-seed quantities (``QUANTITIES``; ``ToTarget``, tokens or seconds to a loss), the p-value helpers, and the optima along an axis (``point_optima`` at one grid point, ``axis_optima`` per value, ``local_slopes``: how the seeds' mean bends)."""

from __future__ import annotations

import abc
import dataclasses
import itertools
import math
from typing import Any, Callable, ClassVar, Mapping, NamedTuple

import numpy as np
from scipy import stats as sps

from andrea_jax import errors
from research import claims
from research import curves
from research import optimum
from research import power
from research import stats

NAN = float("nan")


@dataclasses.dataclass(frozen=True)
class Data:
  """A study's finished cells as ``(arm, point, run, record)``; ``point``: ``((axis, value), ...)``."""
  rows: tuple[tuple[str, tuple, curves.Run, Mapping[str, Any]], ...]

  @classmethod
  def of(cls, records: list[dict], axes: tuple[str, ...], to_run: Callable) -> "Data":
    return cls(tuple((arm, tuple((a, r["overrides"].get(a)) for a in axes), to_run(r), r)
                     for r in records for arm in r["arms"]))

  def runs(self, arm: str, at: Mapping[str, Any] | tuple = ()) -> list[curves.Run]:
    """The runs of ``arm`` at the grid point ``at`` (axes not named: any value)."""
    at = dict(at)
    return [run for a, point, run, _ in self.rows
            if a == arm and all(dict(point).get(k) == v for k, v in at.items())]

  def records(self, arm: str, at: Mapping[str, Any] | tuple = ()) -> list[Mapping[str, Any]]:
    at = dict(at)
    return [rec for a, point, _, rec in self.rows
            if a == arm and all(dict(point).get(k) == v for k, v in at.items())]

  def values(self, arm: str, axis: str) -> list:
    """The values ``axis`` takes among ``arm``'s runs, sorted."""
    return sorted({dict(p)[axis] for a, p, _, _ in self.rows if a == arm and axis in dict(p)})

  def points(self, arm: str) -> list[tuple]:
    return sorted({p for a, p, _, _ in self.rows if a == arm}, key=repr)

  def arms(self) -> list[str]:
    return list(dict.fromkeys(a for a, _, _, _ in self.rows))


# The units a report prints beside an estimate: each claim kind's ``unit()`` names its quantity's, and a
# difference of two values keeps their unit (a loss difference is in nats). Every log here is natural (math.log).
LOSS = "nats"  # a loss, a loss difference, a sensitivity (mean loss over rates less the best), and log Z
# (log p_i = z_i - log Z: the log-normaliser shifts every token's log-probability, so it is in the loss's nats)
LOG_RATE = "ln(rate)"  # the natural log of a learning rate; a difference of two is the ln of their ratio
LOG_RATIO = "ln(ratio)"  # the natural log of a ratio of like quantities (two probe entries, two rates)
DECADES = "decades of rate"  # a width in log10(rate)
RATES_COUNT = "rates"  # a count of grid rates
TOKENS = "tokens"  # training tokens seen by one model
SECONDS = "s"  # wall-clock seconds


def per_doubling(unit: str) -> str:
  """The unit of a slope against log2 of an axis: ``unit`` per doubling."""
  return f"{unit} per doubling"


class Quantity(NamedTuple):
  """A per-seed quantity a claim can be on: what it is, its function of an arm's runs, its unit."""
  what: str
  per_seed: Callable[[list[curves.Run]], dict[int, float]]
  unit: str


QUANTITIES: dict[str, Quantity] = {
    "best_loss": Quantity(f"the best validation loss at the fitted optimum ({LOSS})", curves.best_losses, LOSS),
    "log_optimum": Quantity("the natural log of the fitted optimal peak rate", curves.log_optima, LOG_RATE),
    "sensitivity": Quantity(f"Wortsman et al.'s sensitivity over the base rates ({LOSS})", curves.sensitivity, LOSS),
    "rate_range": Quantity(f"the decades (log10) of rate within {curves.RANGE_MARGIN:g} nats of the seed's own best, "
                           "over the base rates", curves.rate_range, DECADES),
    "learning_rates": Quantity(f"the number of base rates at which the seed ends {curves.LEARNS_BY:g} nats below the "
                               "unigram", curves.learning_counts, RATES_COUNT),
}


@dataclasses.dataclass(frozen=True)
class ToTarget:
  """A per-seed quantity: the tokens (``by="tokens"``) or seconds (``by="seconds"``) a model needs to
  reach the validation loss ``loss`` (nats), the first evaluation at or below it, linear between
  evaluations (``curves.first_reach``), the fewest over the rates the seed was trained at. A
  diverged model does not reach it; a seed none of whose models does is censored (``math.inf``,
  "not reached"), and a claim on it cannot conclude (``Contrast``) rather than drop it. Seconds are
  the model's share of its program's wall clock (in a group of N, the clock over N), the whole run
  (data preparation, compiles and evaluations included). Read from the cells whose evaluations
  logged their tokens and clock (``cells.record``'s ``val_tokens_curve``, ``val_seconds_curve``)."""
  loss: float
  by: str = "tokens"

  CURVES = {"tokens": "val_tokens_curve", "seconds": "val_seconds_curve"}

  def __post_init__(self):
    if self.by not in self.CURVES:
      raise errors.ConfigError(f"ToTarget(by={self.by!r}): expected one of {sorted(self.CURVES)}")
    if not (math.isfinite(self.loss) and self.loss > 0):
      raise errors.ConfigError(f"ToTarget(loss={self.loss!r}): expected a validation loss in nats, above 0")

  def unit(self) -> str:
    return TOKENS if self.by == "tokens" else SECONDS

  def text(self) -> str:
    return (f"the {self.by} to reach a validation loss of {self.loss:g} nats (interpolated between "
            f"evaluations; the fewest over the rates, a diverged model not reaching it; not reached: censored)")

  def points(self, rec: Mapping[str, Any]) -> list[tuple[float, float]]:
    """The record's validation loss against tokens or against its share of the seconds ([] where its
    evaluations logged neither)."""
    share = 1.0 / (rec.get("group_size") or 1) if self.by == "seconds" else 1.0
    return [(x * share, l) for x, l in rec.get(self.CURVES[self.by], [])]

  def reach(self, run: curves.Run, rec: Mapping[str, Any]) -> float | None:
    """One model's tokens or seconds to the target (``math.inf``: not reached, or diverged; None:
    its evaluations logged neither)."""
    points = self.points(rec)
    if not points:
      return None
    return math.inf if run.diverged else curves.first_reach(points, self.loss)

  def per_seed(self, data: Data, arm: str, at=()) -> dict[int, float]:
    out: dict[int, float] = {}
    for run, rec in zip(data.runs(arm, at), data.records(arm, at)):
      x = self.reach(run, rec)
      if x is not None:
        out[run.seed] = min(out.get(run.seed, math.inf), x)
    return out

  def describe(self, values: Mapping[int, float]) -> str:
    """``+1.2e+05 tokens [95 % CI ...] over the 3 seeds that reached it; not reached: seed 4``."""
    reached = [v for v in values.values() if math.isfinite(v)]
    missed = sorted(s for s, v in values.items() if not math.isfinite(v))
    return (f"{self.by} to {self.loss:g} nats " + stats.one_sample(reached).text(self.unit(), 0)
            + (f"; not reached (censored): seed{'s' * (len(missed) > 1)} {', '.join(map(str, missed))}" if missed else ""))


def at_text(at: Mapping[str, Any] | tuple) -> str:
  return "".join(f", {k.split('.')[-1]} {v}" for k, v in dict(at).items())


def se_of(e: stats.Effect) -> float:
  """The standard error behind an effect's t interval."""
  q = float(sps.t.ppf(1 - stats.ALPHA / 2, e.df)) if e.df > 0 else NAN
  return (e.hi - e.diff) / q if e.defined and q > 0 else NAN


def p_beyond(e: stats.Effect, bound: float, side: str) -> float:
  """One-sided t p-value that the mean lies ``side`` (above/below) of ``bound``, doubled like ``stats``' levels."""
  se = se_of(e)
  if not math.isfinite(se):
    return NAN
  gap = e.diff - bound if side == "above" else bound - e.diff
  if se == 0:
    return 0.0 if gap > 0 else 1.0
  return float(min(1.0, 2 * sps.t.sf(gap / se, e.df)))


@dataclasses.dataclass
class Section:
  """A report section: markdown lines, the plots drawn into the report's directory, numbers for results.json."""
  lines: list[str]
  plots: list[str | None] = dataclasses.field(default_factory=list)
  results: dict[str, Any] = dataclasses.field(default_factory=dict)
  opens: list[str] = dataclasses.field(default_factory=list)  # lines the report opens with, before its answer


@dataclasses.dataclass(frozen=True)
class Claim(abc.ABC):
  """What every kind has: its text, its Holm family (None: judged alone), its planned effect and that effect's source.

  What the framework calls of a kind, each kind defines (one missing is refused when the kind is
  defined): ``needs``, ``quantity_text``, ``unit``, ``rule`` and ``test``. What it reads of any
  kind has a default here: ``CHOICES``, ``at``, ``rate``, ``over``, ``predict``, ``margin``,
  ``power``, ``section``, ``plan``, ``figures`` and ``find``."""
  claim: str
  family: str | None = "main"
  effect: float = NAN
  source: str = ""

  # The values each text parameter may take (``checks.claim_parameters`` refuses any other, the
  # field's default apart); a parameter not named here takes any text (an arm, an axis).
  CHOICES: ClassVar[Mapping[str, tuple[str, ...]]] = {}
  # The fields below, where a kind has none: the grid point it is judged at (``((axis, value), ...)``), the one rate
  # it reads (None: every rate), the axis at whose values it is judged (the pilot's spreads), what it
  # predicts (``same``: an equivalence test), an equivalence's margin (None: none it can be planned
  # for) and its power (None: the study's).
  at = ()
  rate = None
  over = ""
  predict = ""
  margin = None
  power = None

  def __init_subclass__(cls, **kwargs):
    super().__init_subclass__(**kwargs)
    missing = [m for m in sorted(Claim.__abstractmethods__) if getattr(getattr(cls, m), "__isabstractmethod__", False)]
    fields = {f for c in cls.__mro__ for f in vars(c).get("__annotations__", {})}
    unknown = sorted(set(cls.CHOICES) - fields)
    if missing or unknown:
      raise TypeError(f"claim kind {cls.__name__}: " + "; ".join(
          ([f"defines no {', '.join(missing)} (every kind defines {', '.join(sorted(Claim.__abstractmethods__))})"]
           if missing else []) + ([f"CHOICES names {unknown}, which are not its fields"] if unknown else [])))

  @property
  def test_kind(self) -> str:
    """``equivalent`` where the claim predicts ``same`` (TOST), else ``directed`` (a finding: ``finding``)."""
    return "equivalent" if self.predict == "same" else "directed"

  @property
  def key(self) -> str:
    return self.claim

  @abc.abstractmethod
  def needs(self) -> tuple[str, ...]:
    """The arms the claim reads."""

  @abc.abstractmethod
  def quantity_text(self) -> str:
    """The per-seed quantity in words, as the power plan and the verdict name it."""

  @abc.abstractmethod
  def unit(self) -> str:
    """The unit of the claim's estimate (``LOSS``, ``LOG_RATE``, ...), printed beside it."""

  @abc.abstractmethod
  def rule(self) -> str:
    """The decision rule in words, printed under the verdict."""

  @abc.abstractmethod
  def test(self, data: Data) -> claims.Test:
    """The claim's test on ``data``: its effect and p for and against (``claims.decide_family`` decides)."""

  def section(self, data: Data, out: str) -> Section | None:
    """What the claim adds to the report beyond its verdict (None: nothing)."""
    return None

  def plan(self) -> power.ClaimPlan:
    return power.ClaimPlan(self.key, self.claim, self.quantity_text(), self.test_kind,
                           self.effect, self.margin if self.test_kind == "equivalent" else None,
                           self.source, self.needs(), self.power)

  @classmethod
  def figures(cls, claims_of_kind: list, data: Data, out: str) -> list[str]:
    """The plots the claims of this kind draw together, into ``out`` (their file names)."""
    return []

  def find(self, data: Data) -> tuple[str, dict, list[tuple[str, float]], list[str]] | None:
    """A finding's ``(verdict, point, [(arm, rate)], lines)``: where it found what it reports (None: not a finding)."""
    return None


def slope(xs: list[float], ys: list[float]) -> float:
  """The least-squares slope of ``ys`` on ``xs`` (nan with fewer than two distinct xs)."""
  if len(set(xs)) < 2:
    return NAN
  return float(np.polyfit(np.asarray(xs, float), np.asarray(ys, float), 1)[0])


def named(data: Data, arm: str, keys: tuple[str, ...]) -> dict[str, Any]:
  """The overrides ``keys`` of ``arm``'s first record, by their last name."""
  recs = data.records(arm)
  return {k.split(".")[-1]: recs[0]["overrides"].get(k) for k in keys} if recs else {}


def words(values: Mapping[str, Any]) -> str:
  return ", ".join(f"{k.replace('_', ' ')} {v:g}" for k, v in values.items())


def log_text(x: float) -> str:
  """A threshold as a rule states it: ``log 1.5`` where it is the log of a short factor, else ``0.05``."""
  f = round(math.exp(x), 2)
  return f"log {f:g}" if x and abs(math.log(f) - x) < 1e-12 else f"{x:g}"


def span(values) -> float:
  """Doublings the values span (log2 of the largest over the smallest)."""
  return math.log2(max(values) / min(values)) if len(values) else NAN


def seed_slopes(points: Mapping[int, Mapping[Any, float]], min_points: int) -> dict[int, float]:
  """Per seed, the least-squares slope of its values against log2 of the axis."""
  return {s: slope([math.log2(v) for v in by], list(by.values()))
          for s, by in points.items() if len(by) >= min_points}


def not_located(missing: list[str]) -> tuple[bool, str]:
  return bool(missing), "Not located, so no verdict: " + "; ".join(missing) + "."


def _missing(c: Claim, what: str, notes=()) -> claims.Test:
  return claims.Test(c.key, c.claim, c.rule(), [], missing=claims.missing(c.claim, what, c.rule(), notes))


def lowest(ps) -> float:
  """The smallest finite p (nan when none): "some part decisively"."""
  finite = [p for p in ps if math.isfinite(p)]
  return min(finite) if finite else NAN


def highest(ps) -> float:
  """The largest p, nan when one is (an intersection: "every part decisively")."""
  ps = list(ps)
  return max(ps) if ps and all(math.isfinite(p) for p in ps) else NAN


# Whether an arm learns: its best losses' t interval (``interval``) or every seed (``every_seed``) below the unigram.
LEARNS = {"interval": curves.learns, "every_seed": curves.learns_every_seed}


def point_optima(runs: list[curves.Run], arm: str, where: str, fit: str = "fitted",
                 learns: str = "interval") -> tuple[dict[int, float], list[str]]:
  """``{seed: log(optimum)}`` of ``arm``'s ``runs`` at one grid point by ``fit``, and what was not located
  (the arm does not learn; a seed's optimum outside the grid)."""
  if not LEARNS[learns](runs):
    return {}, [f"{where}: {arm} does not learn"]
  out, missing = {}, []
  if fit == "fitted":
    for seed, opt in curves.optima(runs).items():
      if opt.bracketed:
        out[seed] = math.log(opt.lr)
      else:
        missing.append(f"{where} seed {seed}: {arm}'s optimum at the grid's edge ({opt.lr:.2g})")
    return out, missing
  table = optimum.table(runs)
  for seed in sorted({r.seed for r in runs}):
    own = {lr: by[seed] for lr, by in table.items() if seed in by}
    if fit == "basin":
      b = optimum.basin({lr: {seed: x} for lr, x in own.items()}, resamples=0)
      opt, why = b.optimum, (f"{arm}'s basin has no minimum inside the grid (best grid rate {b.best:.3g})")
    else:
      opt, why = optimum.seed_optimum(own)
    if opt is None:
      missing.append(f"{where} seed {seed}: {why}")
    else:
      out[seed] = math.log(opt)
  return out, missing


def axis_optima(data: Data, arm: str, axis: str, fit: str = "fitted", learns: str = "interval"
                ) -> tuple[dict[int, dict[Any, float]], list[str]]:
  """``{seed: {value: log(optimum)}}`` of ``arm`` along ``axis`` (``point_optima`` at each value)."""
  points, missing = {}, []
  for v in data.values(arm, axis):
    found, out = point_optima(data.runs(arm, {axis: v}), arm, at_text({axis: v})[2:], fit, learns)
    missing += out
    for seed, x in found.items():
      points.setdefault(seed, {})[v] = x
  return dict(sorted(points.items())), missing


def local_slopes(points) -> list[float]:
  """Per doubling, the seeds' mean log optimum's slopes between neighbouring values (how the line bends)."""
  values = sorted({v for by in points.values() for v in by})
  means = [float(np.mean([by[v] for by in points.values() if v in by])) for v in values]
  return [(b - a) / math.log2(w / v) for (v, a), (w, b) in itertools.pairwise(zip(values, means))]
