"""What a study is, in one record: its question, arms, grid per scale and claims; from it the framework makes the sweep, the power plan, the verdicts and the report.

A study is one file, ``experiments/studies/<name>.py``, that defines ``STUDY = Study(...)``
(``experiments/studies/template.py`` is the one to copy; ``docs/study.md`` walks through
it). From that record:

- ``sweep(scale)``: the cells (``research.sweep``): every arm at every point of the grid's
  axes, over its rates and seeds, one vmapped program per (arm, point);
- ``plan_lines(scale)``: per claim, the seeds its test needs at its family's Holm level for
  the effect it states, from the study's stated per-seed spread, against the seeds the grid
  gives it: powered or **not powered**, declared before the run
  (``python -m experiments.sweep --sweep=<name> --dry_run``);
- ``judge(cells)``: each claim's test (``research/kinds.py``), each family decided
  together under Holm (``research/claims.py``), with the leave-one-seed-out check;
- ``page(index, cells, out)``: the report page: verdicts, the optimum of every arm at every
  point, the loss against the rate, and a plot of it.

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
from research import report as reporting
from research.sweep import Cell, Sweep, split_groups

DESIGNS = ("exploratory", "confirmatory")


@dataclasses.dataclass(frozen=True)
class Arm:
  """One arm: its name and the overrides that make it (``{}``: the reference as it is)."""
  name: str
  overrides: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  label: str = ""  # what it is, for the report
  group: str = ""  # its programs' name (a directory; default: the name, "+" as "-")
  # Further arms its cells count for: one program that serves several comparisons (the
  # norm x MLP study's pre-LN arm is also its MLP ratio 4 and its GPT-2 init profile).
  also: tuple[str, ...] = ()
  refine: bool | None = None  # whether rounds of rates may be added to it (None: the grid's)

  @property
  def prefix(self) -> str:
    return self.group or self.name.replace("+", "-")

  @property
  def names(self) -> tuple[str, ...]:
    """The arms its cells belong to: its own name first, then ``also``."""
    return (self.name, *self.also)


@dataclasses.dataclass(frozen=True)
class PerArm:
  """What one arm trains differently at a scale: its own rates, overrides of its own (e.g.
  a parameter-matched width or a depth that is the scale's)."""
  rates: tuple[float, ...] | None = None
  overrides: Mapping[str, Any] = dataclasses.field(default_factory=dict)


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
  seconds_per_model_step: float | None = None  # measured cost, for the estimate
  seconds_per_program: float = 30.0
  smoke: bool = False  # toy models that prove the pipeline: their verdicts mean nothing
  arms: tuple[str, ...] | None = None  # the study's arms this scale trains (None: all)
  per_arm: Mapping[str, PerArm] = dataclasses.field(default_factory=dict)  # by arm name


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
  spread: Mapping[str, float] = dataclasses.field(default_factory=dict)
  spread_source: str = ""
  power: float = 0.8
  # Report items beside the claims (``research/kinds.py``: each ``section(data, out)``).
  reports: tuple = ()

  def __post_init__(self):
    if self.design.split(" ", 1)[0].strip(".:*").lower() not in DESIGNS:
      raise errors.ConfigError(f"study {self.name!r}: design {self.design[:40]!r} must start "
                               f"with one of {DESIGNS}")
    names = [n for a in self.arms for n in a.names]
    for c in self.claims:
      missing = [a for a in c.needs() if a not in names]
      if missing:
        raise errors.ConfigError(f"study {self.name!r}: claim {c.claim!r} names arms "
                                 f"{missing} that the study does not define ({names})")

  # --------------------------------------------------------------------------- the sweep

  def grid(self, scale: str) -> Grid:
    if scale not in self.scales:
      raise errors.ConfigError(f"--scale={scale!r}: study {self.name} has scales {sorted(self.scales)}")
    return self.scales[scale]

  def points(self, scale: str) -> list[dict[str, Any]]:
    """Every combination of the grid's axes, in the order declared."""
    out = [{}]
    for axis, values in self.grid(scale).axes.items():
      out = [{**p, axis: v} for p in out for v in values]
    return out

  def sweep(self, scale: str) -> Sweep:
    g = self.grid(scale)
    cells = []
    for arm in self.arms_at(scale):
      own = g.per_arm.get(arm.name, PerArm())
      refine = g.refine if arm.refine is None else arm.refine
      for point in self.points(scale):
        group = arm.prefix + "".join(f"-{k.split('.')[-1]}{v}" for k, v in point.items())
        o = {**g.shared, **arm.overrides, **own.overrides, **point}
        cells += [Cell(f"{group}-lr{lr:g}-seed{seed}", {**o, "train.learning_rate": lr, "train.seed": seed},
                       arm.names, seed, group, 0, refine)
                  for lr in (g.rates if own.rates is None else own.rates) for seed in g.seeds]
    cells = split_groups(cells, g.members_per_program)
    return Sweep(self.name, scale, g.base_config, cells, description=self.describe(scale, cells))

  def arms_at(self, scale: str) -> tuple[Arm, ...]:
    """The arms ``scale`` trains (its grid's ``arms``; every arm when it names none)."""
    names = self.grid(scale).arms
    if names is not None and set(names) - {a.name for a in self.arms}:
      raise errors.ConfigError(f"study {self.name!r}, scale {scale!r}: arms "
                               f"{sorted(set(names) - {a.name for a in self.arms})} are not its arms")
    return self.arms if names is None else tuple(a for a in self.arms if a.name in names)

  def minutes(self, scale: str, cells: list[Cell]) -> float | None:
    g = self.grid(scale)
    if g.seconds_per_model_step is None:
      return None
    steps = sum(int(c.overrides.get("train.steps", 0)) for c in cells)
    return (len({c.group for c in cells}) * g.seconds_per_program + steps * g.seconds_per_model_step) / 60

  def describe(self, scale: str, cells: list[Cell]) -> str:
    g = self.grid(scale)
    axes = "; ".join(f"{k} {', '.join(map(str, v))}" for k, v in g.axes.items())
    arms = ", ".join(a.name + (f" ({a.label})" if a.label else "") for a in self.arms_at(scale))
    minutes = self.minutes(scale, cells)
    text = (f"{self.question} Arms: {arms}. " + (f"Axes: {axes}. " if axes else "")
            + f"Rates {', '.join(f'{r:g}' for r in g.rates)}" + own_rates(g, self.arms_at(scale))
            + f"; seeds {', '.join(map(str, g.seeds))}; "
            f"{len(cells)} models in {len({c.group for c in cells})} programs"
            + (f", about {minutes:.0f} minutes on the 2-core CPU" if minutes is not None else "") + ".")
    return ("**Smoke scale: toy models that prove the pipeline; they mean nothing.** " + text
            if g.smoke else text)

  # --------------------------------------------------------------------------- the plan

  def plan(self, scale: str) -> list[tuple[kinds.Claim, int | None, int, bool]]:
    """Per claim: the seeds its test needs at its family's Holm level (None: over
    ``power.MAX_SEEDS`` or no stated spread), the seeds the grid gives, and whether powered."""
    g = self.grid(scale)
    families: dict[Any, int] = {}
    for c in self.claims:
      families[c.family or c.key] = families.get(c.family or c.key, 0) + 1
    out = []
    for c in self.claims:
      sd = self.spread.get(c.key, self.spread.get("*"))
      p = c.plan()
      need = None
      if sd is not None and math.isfinite(p.effect):
        need = power.seeds_needed(p.effect, sd, 0.05 / families[c.family or c.key], self.power, p.margin)
      out.append((c, need, len(g.seeds), need is not None and len(g.seeds) >= need))
    return out

  def plan_lines(self, scale: str) -> list[str]:
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
              f"with its leave-one-seed-out check. {self.design}")
    rows, table = optimum_lines(data)
    page = reporting.Page(verdicts=verdicts, method=method, sections=table,
                          plots=[plot_curves(data, out)], results={"table": rows})
    for item in (*self.claims, *self.reports):
      extra = item.section(data, out)
      if extra is not None:
        page.sections += extra.lines
        page.plots += extra.plots
        page.results.update(extra.results)
    return page


def own_rates(g: Grid, arms: tuple[Arm, ...]) -> str:
  """`` (0.002, 0.004 for mlp1, mlp2; ...)``: the arms trained at rates of their own."""
  by: dict[tuple, list[str]] = {}
  for a in arms:
    if a.name in g.per_arm and g.per_arm[a.name].rates is not None:
      by.setdefault(tuple(g.per_arm[a.name].rates), []).append(a.name)
  return "" if not by else " (" + "; ".join(
      f"{', '.join(f'{r:g}' for r in rates)} for {', '.join(names)}" for rates, names in by.items()) + ")"


def judge(study: Study, data: kinds.Data, robust: bool = True) -> list[claims.Verdict]:
  """Each claim's verdict, families decided together under Holm; with ``robust``, whether
  it survives leaving out any one seed (the whole family re-decided without it)."""
  tests = [c.test(data) for c in study.claims]
  verdicts = decide(study, tests)
  if robust:
    seeds = sorted({run.seed for _, _, run, _ in data.rows})
    flips: dict[str, list[str]] = {v.claim: [] for v in verdicts}
    for s in seeds:
      held = kinds.Data(tuple(r for r in data.rows if r[2].seed != s))
      for v, w in zip(verdicts, decide(study, [c.test(held) for c in study.claims])):
        if w.verdict != v.verdict:
          flips[v.claim].append(f"without seed {s}: {w.verdict.lower()}")
    for v in verdicts:
      v.robustness = ("Leave-one-seed-out: not applicable (one seed)." if len(seeds) < 2 else
                      "Leave-one-seed-out: the verdict survives leaving out any one seed."
                      if not flips[v.claim] else
                      "Leave-one-seed-out: it does not survive (" + "; ".join(flips[v.claim]) + ").")
  return verdicts


def decide(study: Study, tests: list[claims.Test]) -> list[claims.Verdict]:
  """The verdicts in the claims' order, each family's tests decided together."""
  by_key = {}
  families: dict[Any, list[claims.Test]] = {}
  for c, t in zip(study.claims, tests):
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
