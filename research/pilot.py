"""The pilot gate (issue 69): before a confirmatory study's first cell, each arm trains a few models at its middle rate; an arm that does not leave the unigram plateau stops the study, and the pilot's per-seed spreads can plan the study's power.

The pilot is the study's own sweep (``Study.sweep``, so the same shape, arms and points) at one
rate per arm, the middle of its grid (``middle_rate``), at ``N_SEEDS`` pilot seeds, trained by the
sweep's runner (``runner.run_sweep``) into ``directory(workdir)``, beside the sweep's directory
(so the study's report never reads its cells). Pilot seeds come from ``SEEDS``, a range no study's
grid may use (``check_seeds`` refuses them for a confirmatory study): every pilot trains the
first ``n`` of them, so pilots share seeds, and no pilot model is a study's data.

An arm passes when it learns at every point of the pilot (``curves.learns``: its losses lie
decisively ``curves.LEARNS_BY`` below the unigram), or when the study declares it not to learn
(``Arm(..., learns=False)``, which no "same" claim may then name: ``Study``). Outside the rules'
identity: what gates a run is not what judges it.
"""

from __future__ import annotations

import dataclasses
import math
import os

from andrea_jax import errors
from research import cells as cells_lib
from research import curves
from research import kinds
from research import power

SEEDS = range(9000, 9100)  # reserved for pilots: no study's grid may train them
N_SEEDS = 3  # per arm: a t interval over 3 seeds decides "learns"; 2 would leave it wide open


def needed(study, scale: str) -> bool:
  """Whether ``scale`` of ``study`` is gated by a pilot: a confirmatory study's, not its smoke scale."""
  return study.design.lower().lstrip("*").startswith("confirmatory") and not study.grid(scale).smoke


def middle_rate(rates) -> float:
  """The grid's middle rate (of an even count, the lower of the two middle ones)."""
  rates = sorted(rates)
  return rates[(len(rates) - 1) // 2]


def directory(workdir: str) -> str:
  """Where a sweep's pilot trains: ``<workdir>-pilot``, beside it."""
  return os.path.normpath(workdir) + "-pilot"


def pilot_study(study, scale: str, n: int = N_SEEDS):
  """``study`` with ``scale``'s grid at each arm's middle rate and the first ``n`` pilot seeds, no
  budget, nothing refined."""
  g, seeds = study.grid(scale), tuple(SEEDS[:n])
  grid = dataclasses.replace(g, rates=(middle_rate(g.rates),), seeds=seeds, refine=False, budget=None,
                             arm_rates={a: (middle_rate(r),) for a, r in g.arm_rates.items()},
                             arm_seeds={a: seeds for a in g.arm_seeds})
  return dataclasses.replace(study, arms=tuple(dataclasses.replace(a, refine=False) for a in study.arms),
                             scales={scale: grid})


def sweep(study, scale: str, n: int = N_SEEDS):
  """The pilot's cells, a ``Sweep`` of its own."""
  s = pilot_study(study, scale, n).sweep(scale)
  return dataclasses.replace(s, description=f"Pilot of {study.name} at {scale} (research/pilot.py): "
                                            f"{s.description}")


@dataclasses.dataclass(frozen=True)
class Outcome:
  """One arm's pilot at one grid point."""
  arm: str
  point: tuple
  rate: float
  losses: tuple[float, ...]  # per seed, the clipped final loss
  unigram: float
  learns: bool
  expected: bool  # the study expects it to learn (``Arm.learns``)

  @property
  def passed(self) -> bool:
    return self.learns or not self.expected

  def text(self) -> str:
    mean = sum(self.losses) / len(self.losses) if self.losses else math.nan
    return (f"{self.arm}{kinds.at_text(self.point)}: pilot loss {mean:.3f} against the unigram's "
            f"{self.unigram:.3f} at rate {self.rate:g} ({len(self.losses)} seeds)")


def outcomes(study, scale: str, cells: list[dict]) -> list[Outcome]:
  """Each arm's pilot at each point, from the pilot's finished cells."""
  data, out = study.data(cells), []
  for arm in study.arms_at(scale):
    for point in data.points(arm.name):
      runs = data.runs(arm.name, point)
      out.append(Outcome(arm.name, point, runs[0].lr, tuple(r.clipped for r in runs), curves.unigram(runs),
                         curves.learns(runs), arm.learns))
  return out


def read(study, scale: str, workdir: str) -> list[Outcome] | None:
  """The pilot's outcomes from ``directory(workdir)`` (None: no pilot cell there)."""
  d = directory(workdir)
  if not os.path.isdir(d) or not cells_lib.read_parts(d):
    return None
  return outcomes(study, scale, cells_lib.load(d)[1])


def gate(study, scale: str, found: list[Outcome] | None) -> None:
  """Refuse, in one line, a study an arm of which did not pass (or finish) its pilot."""
  done = {o.arm for o in found or ()}
  missing = [a.name for a in study.arms_at(scale) if a.name not in done]
  failed = [o for o in found or () if not o.passed]
  if missing or failed:
    why = ([f"{o.text()}, not {curves.LEARNS_BY:g} nats below it decisively" for o in failed]
           + ([f"{', '.join(missing)}: no finished pilot model"] if missing else []))
    raise errors.ConfigError(f"study {study.name!r} stopped by its pilot before any cell trained: "
                             + "; ".join(why) + "; declare an arm that is not meant to learn Arm(..., learns=False), or change "
                             "the design")


def run_gate(study, scale: str, workdir: str, parallel: int = 1, gpus: int = 0,
             only: str = "") -> list[Outcome] | None:
  """Train the pilot (resumable: finished models are skipped) and ``gate`` on it; with ``only``, just
  the pilot's cells whose path contains it (None: the gate waits for the whole pilot)."""
  from research import runner  # pylint: disable=import-outside-toplevel
  records = runner.run_sweep(sweep(study, scale), directory(workdir), parallel, only, gpus)
  if only:
    return None
  if any(r["status"] in ("interrupted", runner.NOT_STARTED) for r in records):
    raise errors.ConfigError(f"the pilot of {study.name!r} was interrupted: rerun the same command to resume it")
  found = read(study, scale, workdir)
  gate(study, scale, found)
  return found


# ----------------------------------------------------------------------------- the pilot's spreads


def _points(claim, data: kinds.Data) -> list[tuple]:
  """The grid points a claim is judged at: its ``at``, at each value of its ``over`` axis."""
  if not claim.over:
    return [tuple(claim.at)]
  values = set.intersection(*(set(data.values(a, claim.over)) for a in claim.needs()))
  return [(*claim.at, (claim.over, v)) for v in sorted(values)]


def spreads(study, cells: list[dict]) -> dict[str, power.Spread]:
  """Per tested claim whose quantity one rate can give (the best loss, a ``Probe``; a ``Contrast`` or
  an ``Alike``), the per-seed spread of its signed sum over the pilot's seeds (of an ``Alike``, or
  over an axis, the largest of its parts'); the others are left to the study's stated spreads."""
  data, out = study.data(cells), {}
  for c in study.tested():
    if isinstance(c, kinds.Contrast) and (c.quantity == "best_loss" or isinstance(c.quantity, kinds.Probe)):
      parts = [(c, c.terms, at) for at in _points(c, data)[-1:]]
    elif isinstance(c, kinds.Alike) and c.pairs == "reference":
      parts = [(kinds.Contrast(c.claim, terms=kinds.pair(a, c.reference)), kinds.pair(a, c.reference), at)
               for a in c.arms for at in _points(c, data)]
    else:
      continue
    found = []
    for contrast, terms, at in parts:
      _, per = contrast.measure(data, at)
      seeds = set.intersection(*(set(per[a]) for a, _ in terms)) if all(per.get(a) for a, _ in terms) else set()
      found.append(power.Spread.of([sum(s * per[a][seed] for a, s in terms) for seed in sorted(seeds)]))
    found = [f for f in found if f.n >= 2 and math.isfinite(f.sd)]
    if found:
      out[c.key] = max(found, key=lambda f: f.sd)
  return out


def lines(study, scale: str, workdir: str, wanted: bool) -> list[str]:
  """What the dry run says of the pilot: its cells, which arms passed, and the power plan at its spreads."""
  if not wanted:
    return []
  s, d = sweep(study, scale), directory(workdir)
  minutes = pilot_study(study, scale).minutes(scale, s.cells)  # None: the grid states no cost
  out = ["## Pilot", "", f"Before the first cell, each arm trains {N_SEEDS} pilot seeds ({SEEDS[0]}.."
         f"{SEEDS[N_SEEDS - 1]}) at its middle rate into {d}: {len(s.cells)} models in "
         f"{len({c.group for c in s.cells})} programs" + (f", about {minutes:.0f} minutes on the 2-core CPU"
                                                           if minutes is not None else "")
         + "; an arm that does not learn there stops the study (research/pilot.py).", ""]
  found = read(study, scale, workdir)
  if found is None:
    return out + ["Pilot: not run yet (the sweep trains it first; --pilot_only trains it alone).", ""]
  passed = [o.text() for o in found if o.learns]
  expected = [o.text() for o in found if not o.learns and not o.expected]
  failed = [o.text() for o in found if not o.passed]
  missing = sorted({a.name for a in study.arms_at(scale)} - {o.arm for o in found})
  out += [f"Passed their pilot: {'; '.join(passed) or 'none'}.", ""]
  out += [f"Declared not to learn, and did not: {'; '.join(expected)}.", ""] if expected else []
  out += [f"**Did not pass (the study stops here)**: {'; '.join(failed)}.", ""] if failed else []
  out += [f"No finished pilot model: {', '.join(missing)}.", ""] if missing else []
  _, cells, _ = cells_lib.load(d)
  got = spreads(study, cells)
  if not got or not study.tested():
    return out
  n = min(sp.n for sp in got.values())
  out += [f"Per-seed spreads from the pilot ({n}+ seeds at each arm's middle rate): " + "; ".join(
      f"*{k}* {sp.sd:.4f} ({sp.n} seeds)" for k, sp in got.items()) + ". To plan with them, write them "
      "into the study's `spread` as `power.Spread(sd, n)` before the run. The power plan at these "
      "spreads (the others as stated):", ""]
  at_pilot = dataclasses.replace(study, spread={**study.spread, **got},
                                 spread_source=f"the pilot's seeds at each arm's middle rate ({d}) where given; "
                                               f"else {study.spread_source or 'none stated'}")
  return out + at_pilot.plan_lines(scale)


def check_seeds(study, scale: str) -> None:
  """Refuse a confirmatory study whose grid trains a pilot seed (``SEEDS``)."""
  g = study.grid(scale)
  mine = sorted({s for a in study.arms_at(scale) for s in g.arm_seeds.get(a.name, g.seeds)} & set(SEEDS))
  if mine and needed(study, scale):
    raise errors.ConfigError(f"study {study.name!r}: seeds {mine} are reserved for pilots "
                             f"({SEEDS[0]}..{SEEDS[-1]}, research/pilot.py): choose others")

