"""The z-loss probe's finding rule, fixed before the probe ran: where the output softmax's log Z leaves its start.

Per model, the **drift** is its mean log Z at the last probe minus at step 0 (the output
softmax's normaliser: PaLM's z-loss pulls it towards 0, Wortsman et al. 2023 see it run away
without weight decay at high rates). Per (width, weight decay, z-loss, rate), over its seeds:

- ``grows``: every seed completed and every seed's |drift| is at least ``GROWS_NATS``, more
  than anything the committed proxies study saw (its log Z stayed within 5.7 .. 6.9, 1.2 nats,
  at every rate and width);
- ``stays``: every seed completed and every seed's |drift| is below it;
- ``mixed``: otherwise (seeds disagree, or a model diverged: a diverged model's logits say
  nothing about a drift).

The finding, at the widest width without z-loss: **Found** where at least one (weight decay,
rate) ``grows`` (the setting a z-loss claim is judged at: that width, that decay, rates from
the lowest that grows); **Not found** when every one ``stays``; **Inconclusive** otherwise.
Beside each setting found, the same setting with z-loss, whose drift says whether z-loss
holds log Z there (shown, not judged: the claim's rule comes after this probe).
"""

from __future__ import annotations

import dataclasses
import math
import statistics

from experiments import claims

GROWS_NATS = 2.0
FOUND, NOT_FOUND = "Found", "Not found"
CLAIM = f"Where the output logits diverge (log Z moves {GROWS_NATS:g} nats from its start)"
RULE = (f"per (width, weight decay, z-loss, rate), 'grows' when every seed completed with "
        f"|log Z at the end - log Z at step 0| >= {GROWS_NATS:g} nats, 'stays' when every seed "
        f"completed below it, 'mixed' otherwise; at the widest width without z-loss: Found when "
        f"one (weight decay, rate) grows, Not found when all stay, Inconclusive otherwise")


@dataclasses.dataclass(frozen=True)
class Row:
  """One model as the rule sees it."""
  width: int
  weight_decay: float
  z_loss: float
  lr: float
  seed: int
  completed: bool
  log_z_init: float
  log_z_end: float
  final: float

  @property
  def drift(self) -> float:
    return self.log_z_end - self.log_z_init


def state(rows: list[Row]) -> str:
  """``grows``, ``stays`` or ``mixed`` for one setting's seeds (see the module)."""
  if not rows or not all(r.completed and math.isfinite(r.drift) for r in rows):
    return "mixed"
  big = [abs(r.drift) >= GROWS_NATS for r in rows]
  return "grows" if all(big) else "stays" if not any(big) else "mixed"


def settings(rows: list[Row]) -> dict[tuple[int, float, float, float], list[Row]]:
  """The rows by (width, weight decay, z-loss, rate)."""
  out: dict[tuple[int, float, float, float], list[Row]] = {}
  for r in sorted(rows, key=lambda r: (r.width, -r.weight_decay, r.z_loss, r.lr, r.seed)):
    out.setdefault((r.width, r.weight_decay, r.z_loss, r.lr), []).append(r)
  return out


def median_drift(rows: list[Row]) -> float:
  finite = [r.drift for r in rows if math.isfinite(r.drift)]
  return statistics.median(finite) if finite else float("nan")


@dataclasses.dataclass(frozen=True)
class Finding:
  verdict: str
  width: int | None
  grows: list[tuple[float, float]]  # (weight decay, rate) that grow at ``width`` without z-loss
  lines: list[str]


def find(rows: list[Row]) -> Finding:
  """The finding (see the module)."""
  if not rows:
    return Finding(claims.INCONCLUSIVE, None, [], ["No models."])
  by = settings(rows)
  width = max(r.width for r in rows)
  plain = {(wd, lr): rs for (w, wd, z, lr), rs in by.items() if w == width and z == 0}
  states = {k: state(rs) for k, rs in plain.items()}
  grows = sorted(k for k, s in states.items() if s == "grows")
  lines = []
  for wd, lr in grows:
    with_z = [rs for (w, d, z, r), rs in by.items() if (w, d, r) == (width, wd, lr) and z > 0]
    z_text = "; ".join(f"with z-loss: median drift {median_drift(rs):+.2f} ({state(rs)})" for rs in with_z)
    lines.append(f"d{width}, weight decay {wd:g}, rate {lr:g}: median drift "
                 f"{median_drift(plain[(wd, lr)]):+.2f} nats" + (f"; {z_text}" if z_text else "") + ".")
  if grows:
    verdict = FOUND
    low = {wd: min(lr for d, lr in grows if d == wd) for wd, _ in grows}
    lines.append("A z-loss claim can be judged at d" + str(width) + ", " + ", ".join(
        f"weight decay {wd:g} from rate {lr:g}" for wd, lr in sorted(low.items(), reverse=True)) + ".")
  elif states and all(s == "stays" for s in states.values()):
    verdict = NOT_FOUND
    lines.append(f"At d{width} without z-loss log Z stays within {GROWS_NATS:g} nats of its start "
                 f"at every weight decay and rate (largest |median drift| "
                 f"{max(abs(median_drift(rs)) for rs in plain.values()):.2f}).")
  else:
    verdict = claims.INCONCLUSIVE
    mixed = [k for k, s in states.items() if s == "mixed"]
    lines.append(f"At d{width} without z-loss no setting grows in every seed; "
                 f"{len(mixed)} of {len(states)} are mixed (seeds disagree or a model diverged).")
  return Finding(verdict, width, grows, lines)


def judge(rows: list[Row], robust: bool = True) -> list[claims.Verdict]:
  """The probe's one entry for the report: the finding as a verdict line (not a claim on the
  literature)."""
  del robust  # two seeds: a finding, not re-judged without one
  f = find(rows)
  return [claims.Verdict(CLAIM, f.verdict, f.lines, RULE)]


RULE_ROOTS = ("judge", "find")
