"""The z-loss probe's finding rule: where the output softmax's log Z runs away from that of a uniform softmax.

Per model, the **excess** is its mean log Z at the last probe minus ``log V`` (V the
vocabulary: a uniform softmax's log Z, near which a trained model's stays; the committed
proxies study's stayed within 5.7 .. 6.9 at V = 512, ``log V`` = 6.24). Per (width, weight
decay, z-loss, rate), over its seeds:

- ``grows``: every seed completed and every seed's |excess| is at least ``GROWS_NATS``;
- ``stays``: every seed completed and every seed's |excess| is below it;
- ``mixed``: otherwise (seeds disagree, or a model diverged: a diverged model's logits say
  nothing about a drift).

The finding, at the widest width without z-loss: **Found** where at least one (weight decay,
rate) ``grows`` (the setting a z-loss claim is judged at: that width, that decay, rates from
the lowest that grows); **Not found** when every one ``stays``; **Inconclusive** otherwise.
Beside each setting found, the same setting with z-loss, whose excess says whether z-loss
holds log Z there (shown, not judged: the claim's rule comes after this probe).

Changed after the probe ran (so its finding is exploratory): the rule fixed before it
measured log Z's drift from step 0. With the base stage's readout multiplier 8 the logits
start large, log Z at step 0 is 7.4 at d64 and 9.1 at d128, and every d128 model's log Z
fell by 2.5-3.2 nats towards ``log V`` as it learned: the first rule called that learning a
divergence at every d128 setting. ``log V`` is the reference that does not move with the
init (``git log -p`` on this file has the first rule).
"""

from __future__ import annotations

import dataclasses
import math
import statistics

from research import claims

GROWS_NATS = 2.0
FOUND, NOT_FOUND = "Found", "Not found"
CLAIM = f"Where the output logits diverge (log Z ends {GROWS_NATS:g} nats from a uniform softmax's)"
RULE = (f"per (width, weight decay, z-loss, rate), 'grows' when every seed completed with "
        f"|log Z at the end - log V| >= {GROWS_NATS:g} nats (V the vocabulary), 'stays' when every "
        f"seed completed below it, 'mixed' otherwise; at the widest width without z-loss: Found "
        f"when one (weight decay, rate) grows, Not found when all stay, Inconclusive otherwise")


@dataclasses.dataclass(frozen=True)
class Row:
  """One model as the rule sees it."""
  width: int
  vocab: int
  weight_decay: float
  z_loss: float
  lr: float
  seed: int
  completed: bool
  log_z_init: float
  log_z_end: float
  final: float

  @property
  def excess(self) -> float:
    """log Z at the end minus a uniform softmax's, ``log V``."""
    return self.log_z_end - math.log(self.vocab)


def state(rows: list[Row]) -> str:
  """``grows``, ``stays`` or ``mixed`` for one setting's seeds (see the module)."""
  if not rows or not all(r.completed and math.isfinite(r.excess) for r in rows):
    return "mixed"
  big = [abs(r.excess) >= GROWS_NATS for r in rows]
  return "grows" if all(big) else "stays" if not any(big) else "mixed"


def settings(rows: list[Row]) -> dict[tuple[int, float, float, float], list[Row]]:
  """The rows by (width, weight decay, z-loss, rate)."""
  out: dict[tuple[int, float, float, float], list[Row]] = {}
  for r in sorted(rows, key=lambda r: (r.width, -r.weight_decay, r.z_loss, r.lr, r.seed)):
    out.setdefault((r.width, r.weight_decay, r.z_loss, r.lr), []).append(r)
  return out


def median_excess(rows: list[Row]) -> float:
  finite = [r.excess for r in rows if math.isfinite(r.excess)]
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
    z_text = "; ".join(f"with z-loss: median excess {median_excess(rs):+.2f} ({state(rs)})" for rs in with_z)
    lines.append(f"d{width}, weight decay {wd:g}, rate {lr:g}: log Z minus log V, median "
                 f"{median_excess(plain[(wd, lr)]):+.2f} nats" + (f"; {z_text}" if z_text else "") + ".")
  if grows:
    verdict = FOUND
    low = {wd: min(lr for d, lr in grows if d == wd) for wd, _ in grows}
    lines.append("A z-loss claim can be judged at d" + str(width) + ", " + ", ".join(
        f"weight decay {wd:g} from rate {lr:g}" for wd, lr in sorted(low.items(), reverse=True)) + ".")
  elif states and all(s == "stays" for s in states.values()):
    verdict = NOT_FOUND
    lines.append(f"At d{width} without z-loss log Z ends within {GROWS_NATS:g} nats of log V at "
                 f"every weight decay and rate (largest |median excess| "
                 f"{max(abs(median_excess(rs)) for rs in plain.values()):.2f}).")
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
