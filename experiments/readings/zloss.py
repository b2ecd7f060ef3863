"""The z-loss studies' report items (not rules): log Z per arm and rate at the end (``ExcessTable``) and over
training (``DriftTable``), each with the finding it shows; per rate and seed, whether the plain arm's log Z ran
away and each arm's excess and final loss (``RunawaySeeds``), and the same over the late window (``LateSeeds``)."""

from __future__ import annotations

import dataclasses
import math

from research import curves
from research import page as reporting
from research import stats
from research.kind_base import at_text, Data, LOSS, named, NAN, Section
from research.kind_zloss import Finding, late_models, median_of, Model, models, runaway, Runaway, state


def in_order(points) -> list[tuple]:
  """Grid points by their values (numbers as numbers: d64 before d128)."""
  num = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
  return sorted(points, key=lambda p: [(not num(v), v if num(v) else repr(v)) for _, v in p])


def points(data: Data) -> list[tuple[tuple, str]]:
  """Every grid point in order, with each arm that has it."""
  return [(point, arm) for point in in_order({p for arm in data.arms() for p in data.points(arm)})
          for arm in data.arms() if point in data.points(arm)]


def finding_results(finding: Finding | None, data: Data) -> dict:
  """results.json's ``finding``: the verdict, the point judged and the (arm, rate) that moved (none: {})."""
  if finding is None:
    return {}
  verdict, point, moved, _ = finding.find(data)
  return {"finding": {"verdict": verdict, **{k.split(".")[-1]: v for k, v in point.items()}, "moved": [
      {"arm": a, **named(data, a, finding.names), "learning_rate": lr} for a, lr in moved]}}


@dataclasses.dataclass(frozen=True)
class ExcessTable:
  """Per arm, point and rate, medians over seeds of log Z, its excess over ``log V`` and ``state``, and the
  final loss; and the median excess against the rate, a panel per point; ``finding``: its verdict recorded."""
  bound: float = 2.0
  note: str = ""  # a line under the heading
  finding: Finding | None = None

  def section(self, data: Data, out: str) -> Section:
    lines = ["## log_z per arm and rate", "", *([self.note, ""] if self.note else []),
             f"Per arm, grid point and rate, over the seeds: log_z at step 0 and at the end "
             f"(medians), the excess (at the end minus log V, a uniform softmax's: median, and each "
             f"seed's), its state at {self.bound:g} nats (grows, stays or mixed) and the final "
             f"validation loss (median; — where a model diverged).", "",
             "| arm | point | rate | start | end | excess over log V (per seed) | state | final loss |",
             "|---" * 8 + "|"]
    by_point: dict[tuple, list[tuple[str, float, float]]] = {}
    for point, arm in points(data):
      for lr, ms in curves.by_rate(models(data, arm, point)).items():
        seeds = ", ".join("—" if not math.isfinite(m.excess) else f"{m.excess:+.2f}" for m in ms)
        loss, excess = median_of(m.final for m in ms), median_of(m.excess for m in ms)
        lines.append(f"| {arm} | {at_text(point)[2:] or '—'} | {lr:g} | "
                     f"{median_of(m.at(0) for m in ms):.2f} | {median_of(m.end for m in ms):.2f} | "
                     f"{excess:+.2f} ({seeds}) | {state(ms, self.bound)} | "
                     f"{'—' if math.isnan(loss) else format(loss, '.3f')} |")
        by_point.setdefault(point, []).append((arm, lr, excess))
    return Section(lines + [""], [self.plot(by_point, out)], finding_results(self.finding, data))

  def plot(self, by_point: dict, out: str) -> str | None:
    if not by_point:
      return None
    fig = reporting.figure(figsize=(5 * len(by_point), 3.8))
    for i, point in enumerate(in_order(by_point)):
      ax = fig.add_subplot(1, len(by_point), i + 1)
      for j, arm in enumerate(dict.fromkeys(a for a, _, _ in by_point[point])):
        pts = [(lr, x) for a, lr, x in by_point[point] if a == arm]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "os^v"[j % 4] + "-", color=f"C{j}", label=arm)
      for bound in (-self.bound, self.bound):
        ax.axhline(bound, color="grey", lw=0.8, ls=":")
      ax.set(xscale="log", xlabel="peak learning rate", ylabel=f"log_z at the end - log V ({LOSS})",
             title=at_text(point)[2:])
      ax.legend(fontsize=7)
    return reporting.save(fig, out, "log_z_excess.png")


@dataclasses.dataclass(frozen=True)
class DriftTable:
  """Per arm, point and rate, medians over seeds of log Z's track, its late drift and ``state``, the
  attention logit and final loss; and every model's trajectory, a panel per rate; ``finding``: its verdict
  recorded."""
  bound: float = 2.0
  note: str = ""
  finding: Finding | None = None

  def section(self, data: Data, out: str) -> Section:
    f = lambda x, spec: "—" if not math.isfinite(x) else format(x, spec)
    lines = ["## log_z over training per arm and rate", "", *([self.note, ""] if self.note else []),
             f"Per arm, grid point and rate, over the seeds: the models that learn (completed, not "
             f"diverged, final loss {curves.LEARNS_BY:g} nats below the unigram), log_z at "
             f"step 0, half-way and at the end (medians), the late drift (the end minus half-way: "
             f"median, and each seed's), its state at {self.bound:g} nats (drifts: every seed learns "
             f"and drifts that far; stays; mixed), the largest attention logit at the end and the "
             f"final validation loss (medians).", "",
             "| arm | point | rate | learn | start | half-way | end | late drift (per seed) | state "
             "| attention logit at the end | final loss |", "|---" * 11 + "|"]
    panels: dict[float, list[tuple[str, Model]]] = {}
    rows = []
    for point, arm in points(data):
      for lr, ts in curves.by_rate(models(data, arm, point)).items():
        seeds = ", ".join(f(t.drift, "+.2f") for t in ts)
        st = state(ts, self.bound, drift=True)
        lines.append(
            f"| {arm} | {at_text(point)[2:] or '—'} | {lr:g} | {sum(t.learns for t in ts)}/{len(ts)} | "
            f"{f(median_of(t.at(0) for t in ts), '.2f')} | {f(median_of(t.mid for t in ts), '.2f')} | "
            f"{f(median_of(t.end for t in ts), '.2f')} | {f(median_of(t.drift for t in ts), '+.2f')} "
            f"({seeds}) | {st} | {f(median_of(t.attn_end for t in ts), '.3g')} | "
            f"{f(median_of(t.final for t in ts), '.3f')} |")
        rows.append({"arm": arm, **dict(point), "learning_rate": lr, "state": st,
                     "drift": {t.seed: t.drift for t in ts}, "learns": sum(t.learns for t in ts)})
        panels.setdefault(lr, []).extend((arm, t) for t in ts)
    return Section(lines + [""], [self.plot(panels, out)], {"drift": rows} | finding_results(self.finding, data))

  def plot(self, panels: dict[float, list[tuple[str, Model]]], out: str) -> str | None:
    if not panels:
      return None
    fig = reporting.figure(figsize=(4 * len(panels), 3.6))
    arms = list(dict.fromkeys(a for ts in panels.values() for a, _ in ts))
    for i, lr in enumerate(sorted(panels)):
      ax = fig.add_subplot(1, len(panels), i + 1)
      for arm, t in panels[lr]:
        ax.plot([s for s, _ in t.curve], [v for _, v in t.curve], color=f"C{arms.index(arm)}", lw=1,
                label=arm if t is next(u for a, u in panels[lr] if a == arm) else None)
      ax.set(xlabel="step", ylabel="log_z", title=f"rate {lr:g}")
      ax.legend(fontsize=7)
    return reporting.save(fig, out, "log_z_trajectories.png")


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
    for rate in sorted({m.lr for m in models(data, self.reference)}):
      claim = lambda arm: Runaway("", None, arm=arm, reference=self.reference, rate=rate, bound=self.bound)
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
        _, over = p.per_seed(loss=False)
        plain, other = p.per_seed(loss=True)
        o, d = stats.one_sample(list(over.values())), stats.paired(other, plain)
        reported.append((arm, f"- {p.summary()}: overshoot {o.text(LOSS)}; final loss {arm} - "
                         f"{self.reference} {d.text(LOSS)}" + (f"; did not complete at seeds "
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
  """A report item: per seed at ``rate``, each arm's log Z over the late window
  (``late_models``), whether ``reference``'s lies ``bound`` past the band [0, log V] (and on
  which side), and every model's final loss."""
  reference: str
  arms: tuple[str, ...]
  rate: float
  bound: float = 2.0
  window: float = 0.2

  def section(self, data: Data, out: str) -> Section:
    del out
    fmt = lambda x, f: "—" if not math.isfinite(x) else format(x, f)
    names = (self.reference, *self.arms)
    by = {a: {m.seed: m for m in late_models(data, a, (), self.window) if m.lr == self.rate}
          for a in names}
    lines = ["## Per seed, late in training", "", f"Each seed's models at rate {self.rate:g}: "
             f"log_z averaged over the readings in the last {self.window:.0%} of training "
             f"(— where a model does not learn), whether {self.reference}'s lies {self.bound:g} nats "
             f"past the band [0, log V] (and on which side), and the final validation loss.", "",
             "| seed | " + " | ".join(f"{a}: late log_z" for a in names) + " | ran away | "
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
