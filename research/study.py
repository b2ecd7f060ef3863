"""What a study is, in one record: its question, arms, grid per scale and claims; from it the framework makes the sweep, the power plan, the verdicts and the report.

A study is one file, ``experiments/studies/<name>.py``, that defines ``STUDY = Study(...)``
(``experiments/studies/template.py`` is the one to copy; ``docs/study.md`` walks through
it). From that record:

- ``sweep(scale)``: the cells (``research.sweep``): every arm at every point of the grid's
  axes, over its rates and seeds (an arm's own where its grid gives them: ``Grid.arm_rates``,
  ``arm_seeds``, ``arm_overrides``), one vmapped program per (arm, point);
- ``plan_lines(scale)``: per claim, the seeds its test needs at its family's Holm level for
  the effect it states, from the study's stated per-seed spread, against the seeds the grid
  gives it: powered or **not powered**, declared before the run
  (``python -m experiments.sweep --sweep=<name> --dry_run``); with a ``Budget``, the plan
  that sized the grid (``budget_plan``: claims admitted cheapest first within the budget,
  ``research.power.admit``) and whether the grid and ``Study.not_powered`` are still it;
- ``judge(cells)``: each claim's test (``research/kinds.py``), each family decided
  together under Holm (``research/claims.py``), with the leave-one-seed-out check; a claim
  declared not powered is outside every family, its figures reported;
- ``page(index, cells, out)``: the report page: the plan, the verdicts, the code that
  trained the cells, the optimum of every arm at every point, the loss against the rate
  and a plot of it, and the figures of the kinds that draw their own (``figures``).

Pre-registration: the study's rules identity (``research/identity.py``) hashes ``STUDY``
and everything it reaches in its file, ``research/kinds.py`` and the shared rule modules
(its grid, seeds and claims included); ``experiments.sweep`` records it in ``sweep.json``
before the first cell trains, and the report says whether the rules that judge it are
those. Commit the study file before its seeds run.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

from andrea_jax import errors
from research import cells as cells_lib
from research import claims
from research import curves
from research import kinds
from research import power
from research import provenance
from research import report as reporting
from research.sweep import Cell, Sweep, split_groups

DESIGNS = ("exploratory", "confirmatory")
# The verdict of a claim its study declared not powered before the run: figures reported, not judged.
NOT_POWERED = "Not powered"


@dataclasses.dataclass(frozen=True)
class Arm:
  """One arm: its name and the overrides that make it (``{}``: the reference as it is)."""
  name: str
  overrides: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  label: str = ""  # what it is, for the report
  group: str = ""  # its programs' name (default: the name, ``+`` as ``-``)
  also: tuple[str, ...] = ()  # other names its cells carry: the same cells in another role


@dataclasses.dataclass(frozen=True)
class Grid:
  """What a scale trains: every arm at every combination of ``axes`` (override -> values),
  over ``rates`` x ``seeds``, with ``shared`` overrides on every cell."""
  rates: tuple[float, ...]
  seeds: tuple[int, ...]
  shared: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  axes: Mapping[str, tuple] = dataclasses.field(default_factory=dict)
  base_config: str = "tiny"
  refine: bool = False  # add rates around an optimum at the grid's edge (research.sweep.refine)
  members_per_program: int | None = None
  # Measured cost, for the estimate: seconds per model-step, or per value of the first axis
  # (a width ladder's cost grows with its width: ``ladder.SECONDS_PER_MODEL_STEP_CPU``).
  seconds_per_model_step: float | Mapping[Any, float] | None = None
  seconds_per_program: float = 30.0
  smoke: bool = False  # toy models that prove the pipeline: their verdicts mean nothing
  # Per arm (by name), where it differs from the grid at this scale:
  arm_rates: Mapping[str, tuple[float, ...]] = dataclasses.field(default_factory=dict)
  arm_seeds: Mapping[str, tuple[int, ...]] = dataclasses.field(default_factory=dict)
  arm_overrides: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
  arm_axes: Mapping[str, Mapping[str, tuple]] = dataclasses.field(default_factory=dict)  # values it runs at
  # An axis' name in the group and cell names (default: its last part; "d": ``pre-d64``).
  axis_names: Mapping[str, str] = dataclasses.field(default_factory=dict)
  budget: "Budget | None" = None  # a budgeted power plan (``Study.budget_plan``)


@dataclasses.dataclass(frozen=True)
class Budget:
  """A budgeted power plan (``research.power.admit``): each claim's seeds at its family's
  Holm level (at least ``min_seeds``), claims admitted cheapest first while the arms they
  need fit ``minutes``; the rest are not powered. ``minutes_per_seed``: what one more seed of
  each arm costs, arms the plan may cut included (by name; ``source`` says how it was
  measured). The study's arms that only claims not powered need get the most seeds, the same
  for each, that the rest of the budget allows, at most those of the arms they are paired
  with, and are not run below ``reported_min_seeds``."""
  minutes: float
  minutes_per_seed: Mapping[str, float]
  min_seeds: int = 5
  reported_min_seeds: int = 3
  source: str = ""


@dataclasses.dataclass(frozen=True)
class Study:
  name: str
  question: str  # one paragraph: what is asked and what the literature says
  design: str  # "exploratory" or "confirmatory", then why
  arms: tuple[Arm, ...]
  scales: Mapping[str, Grid]
  claims: tuple[kinds.Claim, ...]
  # The planned per-seed spread of each claim's quantity (by the claim's key, or "*"),
  # and where it comes from (an earlier study's cells, the literature).
  # A ``power.Spread`` also says from how many seeds (the plan then gives the seeds at its
  # one-sided 80 % upper bound too).
  spread: Mapping[str, float | power.Spread] = dataclasses.field(default_factory=dict)
  spread_source: str = ""
  power: float = 0.8
  # Claims (by text) the plan could not power, declared before the run: their verdict is
  # ``NOT_POWERED``, their figures reported; they are outside every family.
  not_powered: tuple[str, ...] = ()
  # Leave-one-seed-out is reported for a claim with at least this many seeds of its own.
  loso_min_seeds: int = 2
  # Report sections beyond the verdicts (``kinds.Rates``, ``figures.AxisFigures``): ``title``
  # (empty: no heading), ``key``, ``lines(data)`` and ``result(data)`` (None: not in
  # results.json) each, and ``plots(data, out)`` where it draws.
  sections: tuple = ()

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
    unknown = set(self.not_powered) - {c.claim for c in self.claims}
    if unknown:
      raise errors.ConfigError(f"study {self.name!r}: not_powered names {sorted(unknown)}, "
                               f"which are not its claims")

  # --------------------------------------------------------------------------- the sweep

  def grid(self, scale: str) -> Grid:
    if scale not in self.scales:
      raise errors.ConfigError(f"--scale={scale!r}: study {self.name} has scales {sorted(self.scales)}")
    return self.scales[scale]

  def points(self, scale: str, arm: str | None = None) -> list[dict[str, Any]]:
    """Every combination of the grid's axes, in the order declared (``arm``'s own values
    where ``Grid.arm_axes`` gives them)."""
    g = self.grid(scale)
    own = g.arm_axes.get(arm, {})
    out = [{}]
    for axis, values in g.axes.items():
      out = [{**p, axis: v} for p in out for v in own.get(axis, values)]
    return out

  def sweep(self, scale: str) -> Sweep:
    g = self.grid(scale)
    cells = []
    for arm in self.arms:
      for point in self.points(scale, arm.name):
        group = (arm.group or arm.name.replace("+", "-")) + "".join(
            f"-{g.axis_names.get(k, k.split('.')[-1])}{v}" for k, v in point.items())
        o = {**g.shared, **arm.overrides, **g.arm_overrides.get(arm.name, {}), **point}
        cells += [Cell(f"{group}-lr{lr:g}-seed{seed}", {**o, "train.learning_rate": lr, "train.seed": seed},
                       (arm.name, *arm.also), seed, group, 0, g.refine)
                  for lr in g.arm_rates.get(arm.name, g.rates) for seed in g.arm_seeds.get(arm.name, g.seeds)]
    cells = split_groups(cells, g.members_per_program)
    return Sweep(self.name, scale, g.base_config, cells, description=self.describe(scale, cells))

  def minutes(self, scale: str, cells: list[Cell]) -> float | None:
    g = self.grid(scale)
    if g.seconds_per_model_step is None:
      return None
    per, axis = g.seconds_per_model_step, next(iter(g.axes), None)
    cost = lambda c: per[c.overrides[axis]] if isinstance(per, Mapping) else per
    steps = sum(int(c.overrides.get("train.steps", 0)) * cost(c) for c in cells)
    return (len({c.group for c in cells}) * g.seconds_per_program + steps) / 60

  def describe(self, scale: str, cells: list[Cell]) -> str:
    g = self.grid(scale)
    axes = "; ".join(f"{k} {', '.join(map(str, v))}" for k, v in g.axes.items())
    arms = ", ".join(a.name + (f" ({a.label})" if a.label else "") for a in self.arms)
    minutes = self.minutes(scale, cells)
    own = "; ".join(f"{a} " + ", ".join(
        ([f"rates {', '.join(f'{r:g}' for r in g.arm_rates[a])}"] if a in g.arm_rates else [])
        + ([f"{len(g.arm_seeds[a])} seeds"] if a in g.arm_seeds else [])
        + [f"{k.split('.')[-1]} {', '.join(map(str, v))} only" for k, v in g.arm_axes.get(a, {}).items()])
        for a in dict.fromkeys([*g.arm_rates, *g.arm_seeds, *g.arm_axes]))
    text = (f"{self.question} Arms: {arms}. " + (f"Axes: {axes}. " if axes else "")
            + f"Rates {', '.join(f'{r:g}' for r in g.rates)}; seeds {', '.join(map(str, g.seeds))}; "
            + (f"per arm where it differs: {own}; " if own else "")
            + f"{len(cells)} models in {len({c.group for c in cells})} programs"
            + (f", about {minutes:.0f} minutes on the 2-core CPU" if minutes is not None else "") + ".")
    return ("**Smoke scale: toy models that prove the pipeline; they mean nothing.** " + text
            if g.smoke else text)

  # --------------------------------------------------------------------------- the plan

  def spread_of(self, key: str) -> power.Spread | None:
    """The claim's stated per-seed spread (by its key, else ``"*"``)."""
    sd = self.spread.get(key, self.spread.get("*"))
    return sd if sd is None or isinstance(sd, power.Spread) else power.Spread(float(sd), 0)

  def arm_of(self, name: str) -> str:
    """The arm whose cells carry ``name`` (its name, or one of its ``also``)."""
    return next((a.name for a in self.arms if name == a.name or name in a.also), name)

  def seeds_of(self, scale: str, arm: str) -> tuple[int, ...]:
    g = self.grid(scale)
    return g.arm_seeds.get(self.arm_of(arm), g.seeds)

  def plan(self, scale: str) -> list[tuple[kinds.Claim, int | None, int, bool]]:
    """Per claim: the seeds its test needs at its family's Holm level (None: over
    ``power.MAX_SEEDS`` or no stated spread), the seeds the grid gives its arms, and whether powered."""
    families: dict[Any, int] = {}
    for c in self.claims:
      families[c.family or c.key] = families.get(c.family or c.key, 0) + 1
    out = []
    for c in self.claims:
      sp = self.spread_of(c.key)
      p = c.plan()
      need = None
      if sp is not None and math.isfinite(p.effect):
        need = power.seeds_needed(p.effect, sp.sd, 0.05 / families[c.family or c.key],
                                  self.power if p.power is None else p.power, p.margin)
      have = min((len(self.seeds_of(scale, a)) for a in c.needs()), default=0)
      out.append((c, need, have, need is not None and have >= need))
    return out

  def budget_plan(self, scale: str) -> tuple[list[power.Planned], dict[str, int], float, int]:
    """With the grid's ``budget``: ``(planned claims, seeds per arm, each claim's level, family
    size)`` from ``power.admit`` over the claims' plans (their arms as the study's arm names),
    then the seeds of the arms only claims not powered need (``Budget``)."""
    b = self.grid(scale).budget
    plans = [dataclasses.replace(c.plan(), arms=tuple(dict.fromkeys(self.arm_of(a) for a in c.plan().arms)))
             for c in self.claims]
    spreads = {p.key: self.spread_of(p.key) or power.Spread(math.nan, 0) for p in plans}
    planned, seeds, level, family = power.admit(plans, spreads, b.minutes_per_seed, b.minutes,
                                                b.min_seeds, self.power, 0.05)
    mine = {a.name for a in self.arms}
    unpowered = [c.plan.arms for c in planned if not c.powered]
    own = sorted({a for arms in unpowered for a in arms if a in mine and a not in seeds})
    paired = [seeds[a] for arms in unpowered if set(arms) & set(own) for a in arms if a in seeds]
    left = b.minutes - sum(b.minutes_per_seed[a] * n for a, n in seeds.items())
    cost = sum(b.minutes_per_seed[a] for a in own)
    n = min(min(paired, default=power.MAX_SEEDS), int(left // cost)) if cost else 0
    if n >= b.reported_min_seeds:
      seeds.update({a: n for a in own})
    return planned, seeds, level, family

  def plan_lines(self, scale: str) -> list[str]:
    if self.grid(scale).budget is not None:
      return self.budget_lines(scale)
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

  def budget_lines(self, scale: str) -> list[str]:
    """The budgeted plan as markdown, and whether the grid's seeds and the claims declared
    not powered are the plan's."""
    b = self.grid(scale).budget
    planned, seeds, level, family = self.budget_plan(scale)
    minutes = {a: b.minutes_per_seed[a] * n for a, n in seeds.items()}
    grid = {a.name: len(self.seeds_of(scale, a.name)) for a in self.arms}
    declared = {c.plan.claim for c in planned if not c.powered}
    same = grid == seeds and declared == set(self.not_powered)
    return [f"Power plan (budget {b.minutes:g} minutes): each claim's test at level 0.05 / "
            f"{family} = {level:.4f} (Holm over the family of the {family} powered claims, planned "
            f"at the first-ranked test's level) and power {self.power:.0%}, for the effect "
            f"stated; per-seed spread: {self.spread_source or 'none stated'} (in brackets the "
            f"seeds needed at its one-sided 80 % upper bound). Cost: {b.source or 'as stated'}; "
            f"'minutes' is the claim's arms at its seeds alone (arms are shared between claims). "
            f"Every judged arm has at least {b.min_seeds} seeds.", "",
            *power.table_lines(planned, seeds, minutes, b.minutes, "planned"),
            "The grid's seeds per arm and the claims the study declares not powered are the "
            "plan's." if same else f"**The grid differs from the plan**: seeds {grid} against "
            f"{seeds}; declared not powered {sorted(self.not_powered)} against {sorted(declared)}.", ""]

  # --------------------------------------------------------------------------- the verdicts

  def data(self, cells: list[dict], scale: str | None = None) -> kinds.Data:
    axes = tuple(dict.fromkeys(a for g in self.scales.values() for a in g.axes))
    return kinds.Data.of(cells, axes, cells_lib.to_run)

  def judge(self, cells: list[dict], robust: bool = True) -> list[claims.Verdict]:
    return judge(self, self.data(cells), robust)

  # --------------------------------------------------------------------------- the report

  def page(self, index: dict, cells: list[dict], out: str) -> reporting.Page:
    data = self.data(cells)
    verdicts = self.judge(cells)
    method = (f"Each claim's rule is stated under it (`research/kinds.py`); the claims of one "
              f"family are decided together under Holm's correction at level 0.05, each verdict "
              f"with its leave-one-seed-out check"
              + (f" (from {self.loso_min_seeds} seeds)" if self.loso_min_seeds > 2 else "") + ". "
              + (f"The {len(self.not_powered)} claims declared not powered before the run are "
                 f"outside every family: their figures are reported, not judged. " if self.not_powered else "")
              + self.design)
    # The table and the plot by arm: the names an arm's cells also carry (``Arm.also``) apart.
    own = kinds.Data(tuple(r for r in data.rows if r[0] in {a.name for a in self.arms}))
    rows, table = optimum_lines(own)
    table = provenance.code_lines(cells) + table
    scale = index.get("scale")
    notes = ["## Power plan", "", *self.plan_lines(scale)] if scale in self.scales else []
    extra = [line for s in self.sections if s.title for line in (f"## {s.title}", "", *s.lines(data), "")]
    drawn = [p for s in self.sections if hasattr(s, "plots") for p in s.plots(data, out)]
    plots = drawn or [plot_curves(own, out)]  # a section's figures replace the default plot
    for kind in dict.fromkeys(type(c) for c in self.claims if hasattr(c, "figures")):
      plots += kind.figures([c for c in self.claims if type(c) is kind], data, out)
    results = {s.key: r for s in self.sections for r in [s.result(data)] if r is not None}
    return reporting.Page(verdicts=verdicts, method=method, sections=extra + table, plots=plots,
                          results={"table": rows, "verdicts": verdicts, **results}, notes=notes)


def judge(study: Study, data: kinds.Data, robust: bool = True) -> list[claims.Verdict]:
  """Each claim's verdict, families decided together under Holm; with ``robust``, whether
  it survives leaving out any one of its seeds (the whole family re-decided without it),
  for a judged claim with at least ``study.loso_min_seeds`` seeds."""
  tests = [c.test(data) for c in study.claims]
  verdicts = decide(study, tests)
  if not robust:
    return verdicts
  everyone = sorted({run.seed for _, _, run, _ in data.rows})
  held: dict[int, list[claims.Verdict]] = {}
  for i, (t, v) in enumerate(zip(tests, verdicts)):
    if v.verdict == NOT_POWERED or t.missing is not None:
      continue
    seeds = list(t.seeds) or everyone
    if len(seeds) < max(2, study.loso_min_seeds):
      v.robustness = ("Leave-one-seed-out: not applicable (one seed)." if len(seeds) < 2 else
                      f"Leave-one-seed-out: uninformative at {len(seeds)} seeds (reported from "
                      f"{study.loso_min_seeds}).")
      continue
    flips = []
    for s in seeds:
      if s not in held:
        rest = kinds.Data(tuple(r for r in data.rows if r[2].seed != s))
        held[s] = decide(study, [c.test(rest) for c in study.claims])
      if held[s][i].verdict != v.verdict:
        flips.append(f"without seed {s}: {held[s][i].verdict.lower()}")
    v.robustness = ("Leave-one-seed-out: the verdict survives leaving out any one seed."
                    if not flips else "Leave-one-seed-out: it does not survive (" + "; ".join(flips) + ").")
  return verdicts


def decide(study: Study, tests: list[claims.Test]) -> list[claims.Verdict]:
  """The verdicts in the claims' order, each family's tests decided together; a claim
  declared not powered is outside them, its figures reported."""
  by_key = {}
  families: dict[Any, list[claims.Test]] = {}
  for c, t in zip(study.claims, tests):
    if c.claim in study.not_powered:
      by_key[t.key] = claims.Verdict(t.claim, NOT_POWERED, t.lines + (t.missing.lines if t.missing else []) + [
          "Not powered: the plan, before the run, found that the budget cannot decide it; the "
          "figures above are reported, not judged."], t.rule, t.effect, t.effect_name)
      continue
    families.setdefault(c.family or c.key, []).append(t)
  for family in families.values():
    for t, v in claims.decide_family(family):
      by_key[t.key] = v
  return [by_key[t.key] for t in tests]


def optimum_lines(data: kinds.Data) -> tuple[list[dict], list[str]]:
  """The optimum of every arm at every grid point: rate and loss with their intervals over
  seeds, bracketed seeds, sensitivity; as rows for results.json and a markdown table."""
  rows = []
  lines = ["## Optima", "", "Per arm and grid point, over seeds: the fitted optimal peak rate "
           "(geometric mean, 95 % t interval), the best loss there, the seeds whose optimum is "
           "bracketed by the grid, the sensitivity and whether the arm learns.", "",
           "| arm | point | optimal rate | best loss | bracketed | sensitivity | learns |",
           "|---|---|---|---|---|---|---|"]
  for arm in data.arms():
    for point in data.points(arm):
      runs = data.runs(arm, point)
      s = curves.summary(runs)
      rows.append({"arm": arm, "point": dict(point), **s, "rates": curves.rate_curve(runs)})
      f = lambda x, ci, fmt: reporting.interval_text(x, ci, fmt)
      lines.append(f"| {arm} | {kinds.at_text(point)[2:] or '—'} | "
                   f"{f(s['optimum_lr'], s['optimum_lr_interval'], '.3g')} | "
                   f"{f(s['optimum_loss'], s['optimum_loss_interval'], '.3f')} | "
                   f"{s['bracketed_seeds']}/{s['seeds']} | "
                   f"{f(s['sensitivity'], s['sensitivity_interval'], '.3f')} | "
                   f"{'yes' if s['learns'] else 'no'} |")
  return rows, lines + [""]


def plot_curves(data: kinds.Data, out: str) -> str | None:
  """The mean final loss against the peak rate, a line per arm and grid point."""
  if not data.rows:
    return None
  fig = reporting.figure(figsize=(6, 4))
  ax = fig.add_subplot(1, 1, 1)
  i = 0
  for arm in data.arms():
    for point in data.points(arm):
      curve = curves.rate_curve(data.runs(arm, point))
      ax.plot(list(curve), [v["mean"] for v in curve.values()], "o-", color=f"C{i % 10}",
              label=arm + kinds.at_text(point))
      i += 1
  ax.set(xscale="log", xlabel="peak learning rate", ylabel="final validation loss (mean over seeds)")
  ax.legend(fontsize=7)
  return reporting.save(fig, out, "loss_vs_rate.png")
