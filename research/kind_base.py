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

  def rows_of(self, arm: str, at: Mapping[str, Any] | tuple = ()) -> list[tuple[tuple, curves.Run, Mapping[str, Any]]]:
    """``(point, run, record)`` of ``arm`` at the grid point ``at`` (axes not named: any value)."""
    at = dict(at)
    return [(point, run, rec) for a, point, run, rec in self.rows
            if a == arm and all(dict(point).get(k) == v for k, v in at.items())]

  def runs(self, arm: str, at: Mapping[str, Any] | tuple = ()) -> list[curves.Run]:
    """The runs of ``arm`` at the grid point ``at`` (axes not named: any value)."""
    return [run for _, run, _ in self.rows_of(arm, at)]

  def records(self, arm: str, at: Mapping[str, Any] | tuple = ()) -> list[Mapping[str, Any]]:
    return [rec for _, _, rec in self.rows_of(arm, at)]

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


# The axis whose values are a run's horizons (``sweep.cooldown_branches`` branches its shorter values).
HORIZON = "train.steps"


@dataclasses.dataclass(frozen=True)
class ToTarget:
  """A per-seed quantity: the tokens (``by="tokens"``) or seconds (``by="seconds"``) a model needs to
  reach a validation loss, the first evaluation at or below it, linear between evaluations
  (``curves.first_reach``), the fewest over the seed's models at the claim's point (every rate, and
  every horizon or other axis value the point leaves open). The loss is ``loss`` (nats), or, with
  ``reference`` (an arm), read from the data: that arm's best loss, the mean over its seeds of its final
  validation loss at its best rate at its longest run (the rate and point there whose mean is lowest,
  ``best``), each seed reaching for its own reference seed's loss there, so a pair with the reference
  carries the reference's spread too. ``log``: the natural log of the tokens or seconds, so
  ``pair(reference, arm)`` is per seed the log of their ratio, the arm's efficiency (``LOG_RATIO``).
  A diverged model does not reach it; a seed none of whose models does is censored (``math.inf``,
  "not reached"), and a claim on it cannot conclude (``Contrast``) rather than drop it. Seconds are
  the model's share of its program's wall clock (in a group of N, the clock over N), the whole run
  (data preparation, compiles and evaluations included). Read from the cells whose evaluations
  logged their tokens and clock (``cells.record``'s ``val_tokens_curve``, ``val_seconds_curve``)."""
  loss: float = NAN
  by: str = "tokens"
  reference: str = ""
  log: bool = False

  CURVES = {"tokens": "val_tokens_curve", "seconds": "val_seconds_curve"}

  def __post_init__(self):
    if self.by not in self.CURVES:
      raise errors.ConfigError(f"ToTarget(by={self.by!r}): expected one of {sorted(self.CURVES)}")
    if self.reference and not math.isnan(self.loss):
      raise errors.ConfigError(f"ToTarget(loss={self.loss!r}, reference={self.reference!r}): give the target "
                               f"loss or the arm whose best loss is the target, not both")
    if not self.reference and not (math.isfinite(self.loss) and self.loss > 0):
      raise errors.ConfigError(f"ToTarget(loss={self.loss!r}): expected a validation loss in nats, above 0, "
                               f"or reference=<arm> to read it from that arm's best loss")

  def raw_unit(self) -> str:
    return TOKENS if self.by == "tokens" else SECONDS

  def unit(self) -> str:
    return LOG_RATIO if self.log else self.raw_unit()

  def goal(self) -> str:
    """The target in words: ``4.5 nats``, or ``adamw's best loss``."""
    return f"{self.reference}'s best loss" if self.reference else f"{self.loss:g} nats"

  def text(self) -> str:
    target = (f"{self.reference}'s best loss (per seed, its own final validation loss at {self.reference}'s "
              f"best rate at its longest run, the rate whose mean over seeds is lowest there)"
              if self.reference else f"a validation loss of {self.loss:g} nats")
    return (("the natural log of " if self.log else "") + f"the {self.by} to reach {target} (interpolated "
            f"between evaluations; the fewest over the rates" + (" and horizons" if self.reference else "")
            + ", a diverged model not reaching it; not reached: censored)")

  def points(self, rec: Mapping[str, Any], by: str = "") -> list[tuple[float, float]]:
    """The record's validation loss against tokens or against its share of the seconds (``by``, default
    the quantity's; [] where its evaluations logged neither)."""
    by = by or self.by
    share = 1.0 / (rec.get("group_size") or 1) if by == "seconds" else 1.0
    return [(x * share, l) for x, l in rec.get(self.CURVES[by], [])]

  def reach(self, run: curves.Run, rec: Mapping[str, Any], target: float | None = None) -> float | None:
    """One model's tokens or seconds to ``target`` (default ``loss``; ``math.inf``: not reached, or
    diverged; None: its evaluations logged neither)."""
    points = self.points(rec)
    if not points:
      return None
    return math.inf if run.diverged else curves.first_reach(points, self.loss if target is None else target)

  def best(self, data: Data, at=()) -> tuple[tuple, float, dict[int, float], float] | None:
    """The reference's best configuration: among its runs of the most tokens (its longest), the point and
    rate whose mean final loss (``Run.clipped``) over seeds is lowest, as ``(point, rate, {seed: loss},
    tokens)`` (None: no run of it logged its evaluations' tokens)."""
    rows = [(point, run, self.points(rec, "tokens")) for point, run, rec in data.rows_of(self.reference, at)]
    rows = [(point, run, pts[-1][0]) for point, run, pts in rows if pts]
    if not rows:
      return None
    longest = max(tokens for _, _, tokens in rows)
    configs: dict[tuple, dict[int, float]] = {}
    for point, run, tokens in rows:
      if tokens == longest:
        configs.setdefault((point, run.lr), {})[run.seed] = run.clipped
    (point, lr), losses = min(configs.items(), key=lambda c: (float(np.mean(list(c[1].values()))), repr(c[0])))
    return point, lr, dict(sorted(losses.items())), longest

  def targets(self, data: Data, at=()) -> dict[int, float] | None:
    """Per seed, the loss it reaches for (None: ``loss``, every seed's)."""
    if not self.reference:
      return None
    found = self.best(data, at)
    return found[2] if found else {}

  def level(self, data: Data, at=()) -> float:
    """The one loss a figure draws: ``loss``, or the reference's best loss (the mean of its seeds')."""
    targets = self.targets(data, at)
    return self.loss if targets is None else float(np.mean(list(targets.values()))) if targets else NAN

  def fewest(self, data: Data, arm: str, at=()) -> dict[int, tuple[float, tuple, curves.Run]]:
    """Per seed with a target, ``(tokens or seconds, point, run)`` of its model that reached it first
    (``math.inf`` where none did)."""
    targets = self.targets(data, at)
    out: dict[int, tuple[float, tuple, curves.Run]] = {}
    for point, run, rec in data.rows_of(arm, at):
      target = self.loss if targets is None else targets.get(run.seed)
      x = None if target is None else self.reach(run, rec, target)
      if x is not None and (run.seed not in out or x < out[run.seed][0]):
        out[run.seed] = (x, point, run)
    return dict(sorted(out.items()))

  def per_seed(self, data: Data, arm: str, at=()) -> dict[int, float]:
    values = {s: x for s, (x, _, _) in self.fewest(data, arm, at).items()}
    return {s: math.log(x) if x > 0 else -math.inf for s, x in values.items()} if self.log else values

  def edges(self, data: Data, arm: str, at=()) -> list[str]:
    """Where what was tried may not have bracketed the fewest: a seed's first model to reach the target at
    the lowest or highest rate of its point, or at the arm's shortest horizon (``HORIZON``: a shorter run
    might reach it sooner); the reference's best rate at the edge of its rates."""
    rates: dict[tuple, set[float]] = {}
    for point, run, _ in data.rows_of(arm, at):
      rates.setdefault(point, set()).add(run.lr)
    edge = lambda point, lr: len(rates[point]) > 1 and lr in (min(rates[point]), max(rates[point]))
    horizons = data.values(arm, HORIZON)
    out = []
    for seed, (x, point, run) in self.fewest(data, arm, at).items():
      if not math.isfinite(x):
        continue
      where = at_text(point)
      if edge(point, run.lr):
        out.append(f"{arm} seed {seed} reached it first at rate {run.lr:g}{where}, the edge of its rates")
      if len(horizons) > 1 and dict(point).get(HORIZON) == horizons[0]:
        out.append(f"{arm} seed {seed} reached it at its shortest horizon{where}: a shorter run might sooner")
    found = self.best(data, at) if arm == self.reference else None
    if found and edge(found[0], found[1]):
      out.append(f"{arm}'s best rate{at_text(found[0])}, {found[1]:g}, is the edge of its rates: its best loss "
                 f"may lie beyond them")
    return out

  def target_lines(self, data: Data, at=()) -> list[str]:
    """The reference's best loss as a sentence ([] for a fixed ``loss``)."""
    if not self.reference:
      return []
    found = self.best(data, at)
    if found is None:
      return [f"Target: {self.reference} has no run whose evaluations logged their tokens."]
    point, lr, losses, tokens = found
    return [f"Target: {self.goal()}, {np.mean(list(losses.values())):.3f} nats, its mean over {len(losses)} "
            f"seeds at rate {lr:g}{at_text(point)} ({tokens:,.0f} tokens, its longest run); each seed "
            f"reaches for its own {self.reference} seed's loss there ("
            + ", ".join(f"{s}: {l:.3f}" for s, l in losses.items()) + ")."]

  def describe(self, values: Mapping[int, float]) -> str:
    """``tokens to 4.5 nats +1.2e+05 tokens [95 % CI ...] over the 3 seeds that reached it; not reached:
    seed 4`` (``log``: the geometric mean, in tokens or seconds)."""
    reached = [v for v in values.values() if math.isfinite(v)]
    missed = sorted(s for s, v in values.items() if not math.isfinite(v))
    e = stats.one_sample(reached)
    if not self.log:
      text = e.text(self.unit(), 0)
    elif not reached:
      text = "none reached it"
    else:
      text = (f"geometric mean {math.exp(e.diff):,.0f} {self.raw_unit()}" + (
          f" [95 % CI {math.exp(e.lo):,.0f}, {math.exp(e.hi):,.0f}]" if e.defined else "") + f" ({e.n} seeds)")
    return (f"{self.by} to {self.goal()} " + text
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


def p_within(e: stats.Effect, center: float, margin: float) -> float:
  """TOST p that the mean lies within ``center +- margin`` (the larger one-sided t p; ``stats``'
  ``p_same`` is this at ``center`` 0)."""
  se = se_of(e)
  if not math.isfinite(se):
    return NAN
  gap = margin - abs(e.diff - center)
  if se == 0:
    return 0.0 if gap > 0 else 1.0
  return float(max(sps.t.sf((e.diff - center + margin) / se, e.df), sps.t.sf((margin - e.diff + center) / se, e.df)))


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
