"""The study record: question, arms, grid per scale and claims; from it the sweep, plan, verdicts and report.

A study file defines ``STUDY = Study(...)`` (template: ``experiments/studies/template.py``;
walkthrough: ``docs/study.md``). ``Study`` gives ``sweep(scale)`` (the cells),
``plan_lines(scale)`` (the power plan, budgeted with a ``Budget``), ``judge(cells)`` (each
claim's test from ``research/kinds.py``, families under Holm, leave-one-seed-out) and
``page(index, cells, out)`` (the report page). ``research/identity.py`` hashes ``STUDY`` as
the pre-registered rules.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import math
from typing import Any, Callable, Mapping

from andrea_jax import errors
from research import cells as cells_lib
from research import claims
from research import kinds
from research import power
from research import provenance
from research import page as reporting
from research.kind_choice import optimum_lines, plot_curves
from research.sweep import Cell, cooldown_branches, split_groups, Sweep

DESIGNS = ("exploratory", "confirmatory")
# Verdict of a claim declared not powered: figures reported, not judged.
NOT_POWERED = "Not powered"


@dataclasses.dataclass(frozen=True)
class Arm:
  """One arm: its name and the overrides that make it (``{}``: the reference as it is)."""
  name: str
  overrides: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  label: str = ""  # what it is, for the report
  group: str = ""  # programs' name prefix (default: the name, ``+`` as ``-``)
  also: tuple[str, ...] = ()  # other names its cells carry (same cells, another role)
  refine: bool | None = None  # may add rounds of rates (None: the grid's)
  # False: declared before the run not to learn (its pilot may sit at the unigram; no claim may call it a match).
  learns: bool = True


@dataclasses.dataclass(frozen=True)
class Budget:
  """A budgeted power plan (``power.admit``); seed cost per arm from ``minutes_per_seed`` or, if
  None, the grid's measured cost. Arms only unpowered claims need get the seeds left over
  (none below ``reported_min_seeds``)."""
  minutes: float
  minutes_per_seed: Mapping[str, float] | None = None
  min_seeds: int = 5
  reported_min_seeds: int = 3
  source: str = ""


@dataclasses.dataclass(frozen=True)
class Grid:
  """What a scale trains: every arm at every combination of ``axes`` (override -> values),
  over ``rates`` x ``seeds``, with ``shared`` overrides on every cell."""
  rates: tuple[float, ...]
  seeds: tuple[int, ...]
  shared: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  axes: Mapping[str, tuple] = dataclasses.field(default_factory=dict)
  base_config: str = "tiny"
  refine: bool = False  # add rates around an optimum at the grid's edge (sweep.refine)
  members_per_program: int | None = None
  # Seconds per model-step: a number, per first-axis value, or a function of a cell's overrides.
  seconds_per_model_step: float | Mapping[Any, float] | Callable[[Mapping], float] | None = None
  seconds_per_program: float = 30.0
  smoke: bool = False  # toy models proving the pipeline: verdicts mean nothing
  arms: tuple[str, ...] | None = None  # the study's arms this scale trains (None: all)
  # Per arm (by name), where it differs from the grid:
  arm_rates: Mapping[str, tuple[float, ...]] = dataclasses.field(default_factory=dict)
  arm_seeds: Mapping[str, tuple[int, ...]] = dataclasses.field(default_factory=dict)
  arm_overrides: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
  arm_axes: Mapping[str, Mapping[str, tuple]] = dataclasses.field(default_factory=dict)
  budget: Budget | None = None
  # Overrides following an axis' value: {"model.d_model": {256: {"model.n_head": 4}}}.
  linked: Mapping[str, Mapping[Any, Mapping[str, Any]]] = dataclasses.field(default_factory=dict)
  # The ``train.steps`` axis' shorter WSD horizons branched as cooldowns off the longest's stable
  # phase (``sweep.cooldown_branches``): the loss at every budget for one stable run's steps.
  cooldowns: bool = False


@dataclasses.dataclass(frozen=True)
class Study:
  name: str
  question: str  # one paragraph: the question and the literature
  design: str  # "exploratory" or "confirmatory", then why
  arms: tuple[Arm, ...]
  scales: Mapping[str, Grid]
  claims: tuple[kinds.Claim, ...]
  # Planned per-seed spread per claim key (or "*"); a ``power.Spread`` also gives its n.
  spread: Mapping[str, float | power.Spread] = dataclasses.field(default_factory=dict)
  spread_source: str = ""
  power: float = 0.8
  # Claims (by text) declared not powered before the run: outside every family.
  not_powered: tuple[str, ...] = ()
  # Leave-one-seed-out is reported from this many seeds of the claim's own.
  loso_min_seeds: int = 2
  # Axis short names in program names (``{"model.d_model": "d"}``: ``pre-d64``).
  tags: Mapping[str, str] = dataclasses.field(default_factory=dict)
  # Report items beside the claims, each with ``section(data, out)``.
  reports: tuple = ()

  def __post_init__(self):
    if self.design.split(" ", 1)[0].strip(".:*").lower() not in DESIGNS:
      raise errors.ConfigError(f"study {self.name!r}: design {self.design[:40]!r} must start "
                               f"with one of {DESIGNS}")
    names = [n for a in self.arms for n in (a.name, *a.also)]
    for c in self.claims:
      missing = [a for a in c.needs() if a not in names]
      if missing:
        raise errors.ConfigError(f"study {self.name!r}: claim {c.claim!r} names arms "
                                 f"{missing} that the study does not define ({names})")
    plateau = {n for a in self.arms if not a.learns for n in (a.name, *a.also)}
    for c in self.claims:
      named = sorted(plateau & set(c.needs()))
      if named and (c.predict == "same" or isinstance(c, kinds.Alike)):
        raise errors.ConfigError(f"study {self.name!r}: claim {c.claim!r} calls {named} a match, but the "
                                 f"study declares {'it' if len(named) == 1 else 'them'} not to learn "
                                 f"(Arm(learns=False)): claim a deficit instead, or drop the declaration")
    unknown = set(self.not_powered) - {c.claim for c in self.claims}
    if unknown:
      raise errors.ConfigError(f"study {self.name!r}: not_powered names {sorted(unknown)}, "
                               f"which are not its claims")
    for scale, g in self.scales.items():
      unknown = set(g.arms or ()) - {a.name for a in self.arms}
      if unknown:
        raise errors.ConfigError(f"study {self.name!r}: scale {scale!r} trains arms {sorted(unknown)} "
                                 f"that the study does not define ({[a.name for a in self.arms]})")
      if g.budget and g.budget.minutes_per_seed is None and g.seconds_per_model_step is None:
        raise errors.ConfigError(f"study {self.name!r}: scale {scale!r} has a Budget without "
                                 f"minutes_per_seed and no measured cost: give the grid "
                                 f"seconds_per_model_step, or the budget minutes_per_seed")

  # --------------------------------------------------------------------------- the sweep

  def grid(self, scale: str) -> Grid:
    if scale not in self.scales:
      raise errors.ConfigError(f"--scale={scale!r}: study {self.name} has scales {sorted(self.scales)}")
    return self.scales[scale]

  def sweep(self, scale: str) -> Sweep:
    g = self.grid(scale)
    cells = []
    for arm in self.arms_at(scale):
      own, points = g.arm_axes.get(arm.name, {}), [{}]
      for axis, values in g.axes.items():  # every combination, in declared order (the arm's own axes)
        points = [{**p, axis: v} for p in points for v in own.get(axis, values)]
      for point in points:
        prefix = arm.group or arm.name.replace("+", "-")  # the programs' name before the point's
        group = prefix + "".join(f"-{self.tags.get(k, k.split('.')[-1])}{v}" for k, v in point.items())
        o = {**g.shared, **arm.overrides, **g.arm_overrides.get(arm.name, {}), **point}
        for axis, value in point.items():
          o.update(g.linked.get(axis, {}).get(value, {}))
        cells += [Cell(f"{group}-lr{lr:g}-seed{seed}", {**o, "train.learning_rate": lr, "train.seed": seed},
                       (arm.name, *arm.also), seed, group, 0,
                       g.refine if arm.refine is None else arm.refine)
                  for lr in g.arm_rates.get(arm.name, g.rates) for seed in g.arm_seeds.get(arm.name, g.seeds)]
    cells = split_groups(cells, g.members_per_program)
    cells = cooldown_branches(cells) if g.cooldowns else cells
    return Sweep(self.name, scale, g.base_config, cells, description=self.describe(scale, cells))

  def arms_at(self, scale: str) -> tuple[Arm, ...]:
    names = self.grid(scale).arms
    return self.arms if names is None else tuple(a for a in self.arms if a.name in names)

  def minutes(self, scale: str, cells: list[Cell]) -> float | None:
    g = self.grid(scale)
    if g.seconds_per_model_step is None:
      return None
    per, axis = g.seconds_per_model_step, next(iter(g.axes), None)
    cost = lambda c: (per(c.overrides) if callable(per) else per[c.overrides[axis]]
                      if isinstance(per, Mapping) else per)
    steps = sum(c.trained_steps * cost(c) for c in cells)
    return (len({c.group for c in cells}) * g.seconds_per_program + steps) / 60

  def describe(self, scale: str, cells: list[Cell]) -> str:
    g = self.grid(scale)
    axes = "; ".join(f"{k} {', '.join(map(str, v))}" for k, v in g.axes.items())
    arms = ", ".join(a.name + (f" ({a.label})" if a.label else "") for a in self.arms_at(scale))
    minutes = self.minutes(scale, cells)
    own = "; ".join(f"{a} " + ", ".join(
        ([f"rates {', '.join(f'{r:g}' for r in g.arm_rates[a])}"] if a in g.arm_rates else [])
        + ([f"{len(g.arm_seeds[a])} seeds"] if a in g.arm_seeds else [])
        + [f"{k.split('.')[-1]} {', '.join(map(str, v))} only" for k, v in g.arm_axes.get(a, {}).items()])
        for a in dict.fromkeys([*g.arm_rates, *g.arm_seeds, *g.arm_axes]))
    text = (f"{self.question} Arms: {arms}. " + (f"Axes: {axes}. " if axes else "")
            + ("The shorter train.steps are cooldowns branched off the longest's stable phase. " if g.cooldowns else "")
            + f"Rates {', '.join(f'{r:g}' for r in g.rates)}; seeds {', '.join(map(str, g.seeds))}; "
            + (f"per arm where it differs: {own}; " if own else "")
            + f"{len(cells)} models in {len({c.group for c in cells})} programs"
            + (f", about {minutes:.0f} minutes on the 2-core CPU" if minutes is not None else "") + ".")
    return ("**Smoke scale: toy models that prove the pipeline; they mean nothing.** " + text
            if g.smoke else text)

  # --------------------------------------------------------------------------- the plan

  def tested(self) -> list[kinds.Claim]:
    """The claims that are tests (not a finding or a choice)."""
    return [c for c in self.claims if c.test_kind != "finding"]

  def spread_of(self, claim: kinds.Claim) -> power.Spread | None:
    """The claim's stated spread (by key, else ``"*"``; a bare number has n 0)."""
    sd = self.spread.get(claim.key, self.spread.get("*"))
    return sd if sd is None or isinstance(sd, power.Spread) else power.Spread(float(sd), 0)

  def arm_of(self, name: str) -> str:
    """The arm whose cells carry ``name`` (its name, or one of its ``also``)."""
    return next((a.name for a in self.arms if name == a.name or name in a.also), name)

  def seeds_of(self, scale: str, arm: str) -> tuple[int, ...]:
    """The seeds ``scale`` trains ``arm`` at (() if not trained there)."""
    g, name = self.grid(scale), self.arm_of(arm)
    return g.arm_seeds.get(name, g.seeds) if name in {a.name for a in self.arms_at(scale)} else ()

  def plan(self, scale: str) -> list[tuple[kinds.Claim, int | None, int, bool]]:
    """Per tested claim: (claim, seeds needed at its Holm level, seeds given, powered); needed is
    None with no stated spread or past ``power.MAX_SEEDS``."""
    tested = self.tested()
    families = collections.Counter(c.family or c.key for c in tested)
    out = []
    for c in tested:
      sp = self.spread_of(c)
      p = c.plan()
      need = (power.seeds_needed(p.effect, sp.sd, 0.05 / families[c.family or c.key],
                                 self.power if p.power is None else p.power, p.margin)
              if sp is not None and math.isfinite(p.effect) else None)
      have = min((len(self.seeds_of(scale, a)) for a in c.needs()), default=0)
      out.append((c, need, have, need is not None and have >= need))
    return out

  def seed_costs(self, scale: str) -> tuple[dict[str, float], dict[str, float]]:
    """Minutes per arm: one more seed, and programs' fixed cost ({} if the budget states costs)."""
    g = self.grid(scale)
    if g.budget.minutes_per_seed is not None:
      return dict(g.budget.minutes_per_seed), {}
    cells = self.sweep(scale).cells
    per_seed, fixed = collections.defaultdict(float), collections.defaultdict(float)
    for c in cells:
      if c.seed == self.seeds_of(scale, c.arms[0])[0]:
        per_seed[c.arms[0]] += c.trained_steps * g.seconds_per_model_step / 60
    for arm in {c.group: c.arms[0] for c in cells}.values():
      fixed[arm] += g.seconds_per_program / 60
    return dict(per_seed), dict(fixed)

  def budget_plan(self, scale: str, costs=None) -> tuple[list[power.Planned], dict[str, int], float, int]:
    """``(planned claims, seeds per arm, level, family size)`` under the grid's ``Budget``, at
    ``costs`` (``seed_costs``, when the caller has them)."""
    b = self.grid(scale).budget
    per_seed, fixed = costs or self.seed_costs(scale)
    plans = [dataclasses.replace(p, arms=tuple(dict.fromkeys(self.arm_of(a) for a in p.arms)))
             for p in (c.plan() for c in self.tested())]
    # The arms no tested claim names (a table's, a figure's) train at their grid's seeds: off the top.
    named = {a for p in plans for a in p.arms}
    table = sum(per_seed[a.name] * len(self.seeds_of(scale, a.name)) for a in self.arms_at(scale)
                if a.name not in named and a.name in per_seed)
    budget = b.minutes - sum(fixed.values()) - table
    spreads = {c.key: self.spread_of(c) or power.Spread(math.nan, 0) for c in self.tested()}
    planned, seeds, level, family = power.admit(plans, spreads, per_seed, budget, b.min_seeds, self.power, 0.05)
    mine = {a.name for a in self.arms}
    unpowered = [c.plan.arms for c in planned if not c.powered]
    own = sorted({a for arms in unpowered for a in arms if a in mine and a not in seeds})
    paired = [seeds[a] for arms in unpowered if set(arms) & set(own) for a in arms if a in seeds]
    left = budget - sum(per_seed[a] * n for a, n in seeds.items())
    cost = sum(per_seed[a] for a in own)
    n = min(min(paired, default=power.MAX_SEEDS), int(left // cost)) if cost else 0
    if n >= b.reported_min_seeds:
      seeds.update({a: n for a in own})
    return planned, seeds, level, family

  def plan_lines(self, scale: str) -> list[str]:
    """The power plan as markdown: under the grid's ``Budget``, the budgeted plan and whether the
    grid and ``not_powered`` keep it; without one, each tested claim's seeds needed and given."""
    g, b = self.grid(scale), self.grid(scale).budget
    if b is None and not self.tested():
      return ["Power plan: no claim is a test (a finding or a choice), nothing to power.", ""]
    if b is None:
      lines = [f"Power plan (per-seed spread: {self.spread_source or 'none stated'}; each claim at "
               f"its family's Holm level, power {self.power:g}):", "",
               "| claim | family | quantity | test | planned effect | seeds needed | seeds | plan |",
               "|---|---|---|---|---|---|---|---|"]
      for c, need, have, powered in self.plan(scale):
        p = c.plan()
        lines.append(f"| {c.claim} | {c.family or '(alone)'} | {p.quantity} | {p.test} | "
                     f"{p.effect:g} ({p.source or 'no source'}) | {need if need is not None else '—'} | "
                     f"{have} | {'powered' if powered else '**not powered**'} |")
      return lines + [""]
    per_seed, fixed = costs = self.seed_costs(scale)
    planned, seeds, level, family = self.budget_plan(scale, costs)
    grid = {a.name: len(self.seeds_of(scale, a.name)) for a in self.arms_at(scale)}
    minutes = {a: per_seed[a] * n + fixed.get(a, 0.0) for a, n in grid.items()}
    declared = {c.plan.claim for c in planned if not c.powered}
    kept = (all(grid.get(a, 0) >= n for a, n in seeds.items()) and sum(minutes.values()) <= b.minutes
            and declared == set(self.not_powered))
    cost = b.source or "as stated"
    if b.minutes_per_seed is None:
      cost = (f"the grid's measured {g.seconds_per_model_step:g} s per model-step and "
              f"{g.seconds_per_program:g} s per program" + (f" ({b.source})" if b.source else "")
              + f"; the {len({c.group for c in self.sweep(scale).cells})} programs' fixed cost, "
              f"{sum(fixed.values()):.1f} minutes, comes off the budget first (in each group's "
              f"minutes below)")
    return [f"Power plan (budget {b.minutes:g} minutes): each claim's test at level 0.05 / "
            f"{family} = {level:.4f} (Holm over the family of the {family} powered claims, planned "
            f"at the first-ranked test's level) and power {self.power:.0%}, for the effect "
            f"stated; per-seed spread: {self.spread_source or 'none stated'} (in brackets the "
            f"seeds needed at its one-sided 80 % upper bound). Cost: {cost}; 'minutes' is the "
            f"claim's arms at its seeds alone (arms are shared between claims). Every judged arm "
            f"has at least {b.min_seeds} seeds.", "",
            *power.table_lines(planned, grid, minutes, b.minutes, "planned"),
            "The grid's seeds per arm keep the plan's (more is a reserve) within the budget, and "
            "the claims the study declares not powered are the plan's." if kept else
            f"**The grid differs from the plan**: seeds {grid} against the plan's {seeds} "
            f"({sum(minutes.values()):.0f} minutes of {b.minutes:g}); declared not powered "
            f"{sorted(self.not_powered)} against {sorted(declared)}.", ""]

  # --------------------------------------------------------------------------- the verdicts

  def data(self, cells: list[dict]) -> kinds.Data:
    axes = tuple(dict.fromkeys(a for g in self.scales.values() for a in g.axes))
    return kinds.Data.of(cells, axes, cells_lib.to_run)

  def judge(self, cells: list[dict], robust: bool = True) -> list[claims.Verdict]:
    return judge(self, self.data(cells), robust)

  # --------------------------------------------------------------------------- the report

  def page(self, index: dict, cells: list[dict], out: str) -> reporting.Page:
    data = self.data(cells)
    verdicts = judge(self, data)
    findings = len(self.claims) - len(self.tested())
    method = ("Each claim's rule is stated under it (`research/kinds.py`); the claims of one "
              "family are decided together under Holm's correction at level 0.05, each verdict "
              "with its leave-one-seed-out check"
              + (f" (from {self.loso_min_seeds} seeds)" if self.loso_min_seeds > 2 else "") + ". "
              + (f"The {len(self.not_powered)} claims declared not powered before the run are "
                 f"outside every family: their figures are reported, not judged. " if self.not_powered else "")
              + (f"A finding or a choice ({findings} here) is not a test: no plan sizes it, it is in "
                 f"no family and not re-judged without a seed. " if findings else "")
              + self.design)
    # Table and plot by arm name only (not ``Arm.also`` roles).
    own = kinds.Data(tuple(r for r in data.rows if r[0] in {a.name for a in self.arms}))
    rows, table = optimum_lines(own)
    scale = index.get("scale")
    notes = ["## Power plan", "", *self.plan_lines(scale)] if scale in self.scales and self.tested() else []
    page = reporting.Page(verdicts=verdicts, method=method, sections=provenance.code_lines(cells) + table,
                          plots=[plot_curves(own, out)], results={"table": rows, "verdicts": verdicts}, notes=notes)
    for kind in dict.fromkeys(type(c) for c in self.claims):
      page.plots += kind.figures([c for c in self.claims if type(c) is kind], data, out)
    for item in (*self.claims, *self.reports):
      extra = item.section(data, out)
      if extra is not None:
        page.sections += extra.lines
        page.opens += extra.opens
        page.plots += extra.plots
        page.results.update(extra.results)
    return page


def judge(study: Study, data: kinds.Data, robust: bool = True) -> list[claims.Verdict]:
  """Each claim's verdict, families under Holm; with ``robust``, leave-one-seed-out (family
  re-decided) from ``loso_min_seeds`` seeds, not for not-powered claims or ``missing`` verdicts."""
  tests = [c.test(data) for c in study.claims]
  verdicts = decide(study, tests)
  if not robust:
    return verdicts
  everyone = sorted({run.seed for _, _, run, _ in data.rows})

  @functools.cache
  def held(s: int) -> list[claims.Verdict]:  # every claim re-decided without seed s, once per seed
    rest = kinds.Data(tuple(r for r in data.rows if r[2].seed != s))
    return decide(study, [c.test(rest) for c in study.claims])

  for i, (t, v) in enumerate(zip(tests, verdicts)):
    if v.verdict == NOT_POWERED or t.missing is not None:
      continue
    seeds = list(t.seeds) or everyone
    if len(seeds) < max(2, study.loso_min_seeds):
      v.robustness = ("Leave-one-seed-out: not applicable (one seed)." if len(seeds) < 2 else
                      f"Leave-one-seed-out: uninformative at {len(seeds)} seeds (reported from "
                      f"{study.loso_min_seeds}).")
      continue
    flips = [f"without seed {s}: {held(s)[i].verdict.lower()}" for s in seeds if held(s)[i].verdict != v.verdict]
    v.robustness = ("Leave-one-seed-out: the verdict survives leaving out any one seed."
                    if not flips else "Leave-one-seed-out: it does not survive (" + "; ".join(flips) + ").")
  return verdicts


def decide(study: Study, tests: list[claims.Test]) -> list[claims.Verdict]:
  """The verdicts in the claims' order, each family decided together; not-powered claims outside."""
  by_key = {}
  families: dict[Any, list[claims.Test]] = {}
  for c, t in zip(study.claims, tests):
    if c.claim in study.not_powered:
      by_key[t.key] = claims.Verdict(t.claim, NOT_POWERED, t.lines + (t.missing.lines if t.missing else []) + [
          "Not powered: the plan, before the run, found that the budget cannot decide it; the "
          "figures above are reported, not judged."], t.rule, t.effect, t.effect_name)
      continue
    families.setdefault(c.family or c.key, []).append(t)
  by_key.update((t.key, v) for family in families.values() for t, v in claims.decide_family(family))
  for c, t in zip(study.claims, tests):  # the unit its estimate is printed in: the claim's quantity's
    by_key[t.key].unit = c.unit()
  return [by_key[t.key] for t in tests]
