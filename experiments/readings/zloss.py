"""The z-loss studies' per-seed tables (report items, not rules): per rate and seed, whether the plain arm's log Z ran away and each arm's excess and final loss (``RunawaySeeds``), and the same over the late window (``LateSeeds``)."""

from __future__ import annotations

import dataclasses
import math

from research import stats
from research.kind_base import Data, NAN, Section
from research.kind_drift import late_models
from research.kind_runaway import Runaway, runaway
from research.kind_zloss import models


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


@dataclasses.dataclass(frozen=True)
class LateSeeds:
  """A report item: per seed at ``rate``, each arm's probe over the late window
  (``late_mean``), whether ``reference``'s lies ``bound`` past the band [0, log V] (and on
  which side), and every model's final loss."""
  reference: str
  arms: tuple[str, ...]
  rate: float
  bound: float = 2.0
  window: float = 0.2
  probe: str = "log_z"

  def section(self, data: Data, out: str) -> Section:
    del out
    fmt = lambda x, f: "—" if not math.isfinite(x) else format(x, f)
    names = (self.reference, *self.arms)
    by = {a: {m.seed: m for m in late_models(data, a, (), self.probe, self.window) if m.lr == self.rate}
          for a in names}
    lines = ["## Per seed, late in training", "", f"Each seed's models at rate {self.rate:g}: "
             f"{self.probe} averaged over the readings in the last {self.window:.0%} of training "
             f"(— where a model does not learn), whether {self.reference}'s lies {self.bound:g} nats "
             f"past the band [0, log V] (and on which side), and the final validation loss.", "",
             "| seed | " + " | ".join(f"{a}: late {self.probe}" for a in names) + " | ran away | "
             + " | ".join(f"{a} loss" for a in names) + " |", "|---" * (2 + 2 * len(names)) + "|"]
    rows = []
    for seed, plain in sorted(by[self.reference].items()):
      side = runaway(plain, self.bound)
      get = lambda a, f, seed=seed: getattr(by[a][seed], f) if seed in by[a] else NAN
      rows.append({"seed": seed, "runaway": side, **{f"{a}_late": get(a, "end") for a in names},
                   **{f"{a}_final": get(a, "final") for a in names}})
      lines.append(f"| {seed} | " + " | ".join(fmt(get(a, "end"), "+.2f") for a in names)
                   + f" | { {1: 'above', -1: 'below', 0: 'no'}[side]} | "
                   + " | ".join(fmt(get(a, "final"), ".3f") for a in names) + " |")
    return Section(lines + [""], [], {"late_seeds": rows})
