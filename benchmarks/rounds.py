"""Each side of a benchmark in its own fresh process, alternating round by round (issue 31):
the machinery behind ``python -m benchmarks.step --processes=separate``.

Why: timing JAX and PyTorch in one process lets their thread pools and allocators meet (a
PyTorch call's spinning OpenMP workers slow the next XLA product; the two allocators share
one heap), and a ratio that moves with the method cannot carry a claim. Here a round starts
one fresh process per run (a side under an arm), and:

- ``order`` rotates the runs by one each round (two sides: ours first in even rounds, the
  peer first in odd ones), ``process_rounds`` runs them one after another, settled apart;
- ``Live`` and ``lockstep_round`` keep every run's process alive at once and let them take
  turns one timed step at a time (``--interleave=steps``). Tried as a cure for the noise,
  and not the default: the waiting process takes no CPU (``waiting_cpu_s_per_step``, from
  ``/proc``), but a step right after the other process's step ran 1-7 % slower than one
  after its own, and the rounds agreed no better (docs/performance.md);
- ``summarise``: per side the median over rounds of the rounds' medians and the spread,
  ``(max - min) / median``; the ratio paired by round (ours' tokens/s over the peer's in
  the same round) as the median, the range and its spread, and as the geometric mean with
  its 95 % t interval (``ratio_interval``), "too wide" when the interval spans more than
  ``--max_spread`` of the mean: the range only widens as rounds are added, the interval
  narrows, so on a noisy machine a figure is published when its interval is narrow enough;
- the arms (``arms``): every allocator of ``--allocators`` (``LD_PRELOAD`` in the child's
  environment) with every ``--variant NAME:SETTINGS`` of ours (config settings added; the
  variant's ratio is paired with its allocator's peer in the same round), and our step in
  the first arm against each other one (``arm_ab``);
- the limits (``shape_limits``, ``with_limits``): each side's step FLOP/s, its FLOPs counted
  with causal attention, as a fraction of the machine's FMA peak and of the faster
  library's weight-matmul ceiling, each library timed in a fresh process of its own
  (``benchmarks/matmul_limit.py``).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import tempfile
import time
from typing import NamedTuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIDES = ("andrea_jax", "peer")
CEILINGS = ("ceiling_xla", "ceiling_torch")  # a library's dense-matmul ceiling, in its own process


def shape_limits(name: str, batch: int, seq: int, fma: dict, run) -> dict:
  """A shape's limits: the FMA peak (``fma``, measured once per run), each library's ceiling
  (``run(kind, name, batch, seq, warmup, steps)`` for ``ceiling_xla`` and ``ceiling_torch``:
  fresh processes) and the step's causal FLOPs per token."""
  from andrea_jax import model  # pylint: disable=import-outside-toplevel
  from benchmarks import shapes  # pylint: disable=import-outside-toplevel
  cfg = shapes.model_config(shapes.load_config(name), seq)
  limits = {"flops_per_token_causal": model.flops_per_token(cfg, seq, causal=True), **fma}
  for kind in CEILINGS:
    got = run(kind, name, batch, seq, 0, 1)  # warmup and steps: the ceiling has its own
    limits[f"{kind}_flops_per_s" if "flops_per_s" in got else f"{kind}_skipped"] = \
        got.get("flops_per_s", got.get("skipped") or got.get("error"))
  return limits


def with_limits(row: dict, limits: dict) -> dict:
  """Each side's step FLOP/s (causal count) as a fraction of the FMA peak and of the faster
  library's ceiling."""
  ceilings = [limits[f"{k}_flops_per_s"] for k in CEILINGS if f"{k}_flops_per_s" in limits]
  row["limits"] = {**limits, **({"ceiling_flops_per_s": max(ceilings)} if ceilings else {})}
  for side in SIDES:
    d = row.get(side, {})
    if "tokens_per_s" not in d:
      continue
    flops = d["tokens_per_s"] * limits["flops_per_token_causal"]
    d["flops_per_s"] = flops
    if "fma_peak_flops_per_s" in limits:
      d["pct_of_fma_peak"] = flops / limits["fma_peak_flops_per_s"]
    if ceilings:
      d["pct_of_ceiling"] = flops / max(ceilings)
  return row


def child_env(preload: str = "") -> dict:
  """A child's environment: ours without ``LD_PRELOAD``, with ``preload`` there if given."""
  env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
  if preload:
    env["LD_PRELOAD"] = preload
  return env


def last_line(text: str) -> str:
  return (text.strip().splitlines() or [""])[-1][:300]


def result_of(argv: list[str], preload: str = "") -> dict:
  """Run ``argv`` (a benchmark's child mode) in a fresh process from the repository root
  (``preload`` in ``LD_PRELOAD``, if given): the JSON of its ``RESULT`` line, or the error it
  ended with."""
  out = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, check=False,
                       env=child_env(preload))
  for line in out.stdout.splitlines():
    if line.startswith("RESULT "):
      return json.loads(line[len("RESULT "):])
  return {"error": f"exit {out.returncode}: {last_line(out.stderr)}"}


class Live:
  """One side's lockstep process (``argv``: a child in ``benchmarks.step``'s ``--serve``
  mode): started, built and warmed up, then asked for one timed step at a time."""

  def __init__(self, argv: list[str], preload: str = ""):
    self.err = tempfile.TemporaryFile(mode="w+")
    self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=self.err, text=True, cwd=ROOT, env=child_env(preload))
    self.result = None  # set once the process has answered RESULT (or died)
    self.ready()

  def _answer(self, prefix: str | None):
    """The payload of the next line starting with ``prefix``; on ``RESULT`` or on the
    process's end, ``self.result`` is set and None returned (``prefix`` None: wait for it)."""
    for line in self.proc.stdout:
      if prefix and line.startswith(prefix):
        return json.loads(line[len(prefix):]) if line[len(prefix):].strip() else True
      if line.startswith("RESULT "):
        self.result = json.loads(line[len("RESULT "):])
        self.proc.wait()
        return None
    self.proc.wait()
    self.err.seek(0)
    self.result = {"error": f"exit {self.proc.returncode}: {last_line(self.err.read())}"}
    return None

  def ready(self) -> None:
    self._answer("READY")

  def _send(self, command: str) -> None:
    try:
      self.proc.stdin.write(command + "\n")
      self.proc.stdin.flush()
    except BrokenPipeError:  # it died: _answer reads its end and its error
      pass

  def step(self) -> dict | None:
    self._send("step")
    return self._answer("STEP ")

  def end(self) -> dict:
    if self.result is None:
      self._send("end")
      self._answer(None)
    for f in (self.proc.stdin, self.proc.stdout, self.err):
      try:
        f.close()
      except BrokenPipeError:
        pass
    return self.result

  def cpu_s(self) -> float:
    """The process's CPU seconds so far (``/proc/<pid>/stat``: user + system), 0 where
    there is no /proc."""
    try:
      with open(f"/proc/{self.proc.pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
      return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def lockstep_round(runs: tuple, start: dict, steps: int, round_index: int, settle_s: float,
                   sleep=time.sleep) -> dict:
  """One round with every run's process alive at once, their steps interleaved: step k of
  every run, in ``order(round_index + k)``, ``settle_s`` apart, so that whatever the machine
  does over seconds falls on every side alike. ``start(run)`` starts a run's ``Live``
  process (one after another, each warmed up while the others wait). Per run its
  ``side_result``, plus ``waiting_cpu_s_per_step``: the CPU seconds all the other
  processes used while one of its steps ran (near 0: the waiting ones take no CPU)."""
  live = {run: start(run) for run in order(round_index, runs)}
  waiting = {run: [] for run in runs}
  for k in range(steps):
    for run in order(round_index + k, runs):
      if live[run].result is not None:
        continue
      others = [live[r] for r in runs if r != run and live[r].result is None]
      before = sum(o.cpu_s() for o in others)
      live[run].step()
      waiting[run].append(sum(o.cpu_s() for o in others) - before)
      sleep(settle_s)
  out = {}
  for run in runs:
    got = live[run].end()
    if "step_s" in got and waiting[run]:
      got["waiting_cpu_s_per_step"] = sum(waiting[run]) / len(waiting[run])
    out[run] = got
  return out


# ----------------------------------------------------------------------------- the rounds


def order(round_index: int, runs: tuple = SIDES) -> tuple:
  """The round's runs, rotated by one each round: every run goes first equally often (two
  sides: ours first in even rounds, the peer first in odd ones), and, with several
  allocators, every side under every allocator after every other in turn."""
  k = round_index % len(runs)
  return tuple(runs[k:]) + tuple(runs[:k])


def process_rounds(runs: tuple, run, rounds: int, settle_s: float, sleep=time.sleep,
                   progress=None) -> list[dict]:
  """``rounds`` rounds, each a fresh process per run, one after another in ``order``,
  ``settle_s`` apart: per round {run: ``run(run)``, its result}. ``progress(i, round)`` is
  called after each round (a line of what it gave)."""
  out = []
  for i in range(rounds):
    rnd = {}
    for r in order(i, runs):
      rnd[r] = run(r)
      sleep(settle_s)
    out.append(rnd)
    if progress:
      progress(i, rnd)
  return out


def allocator_paths(names: str) -> dict[str, str]:
  """``--allocators`` (comma-separated) as {name: the library to preload, "" for the
  system's}: ``system``; ``auto``, what a command preloads by default (a system TCMalloc,
  else the wheel's mimalloc: ``allocator.find``); ``tcmalloc`` (the system's); ``mimalloc``
  (the ``cmeel-mimalloc`` wheel's); or a library path. ValueError naming one not found."""
  from andrea_jax import allocator  # pylint: disable=import-outside-toplevel
  named = {"system": lambda: "", "auto": lambda: allocator.find({}),
           "tcmalloc": lambda: allocator.find({}, wheel=lambda: None),
           "mimalloc": allocator.wheel_library}
  out = {}
  for name in (n.strip() for n in names.split(",") if n.strip()):
    path = named[name]() if name in named else name
    if path is None or (path and not os.path.exists(path)):
      raise ValueError(f"--allocators: {name!r} is not installed here (tcmalloc: apt-get install "
                       f"libtcmalloc-minimal4; mimalloc and auto: pip install -r requirements.txt; "
                       f"or give the library's path)")
    out[name] = path
  if not out:
    raise ValueError(f"--allocators={names!r}: expected one or more of system, auto, tcmalloc, "
                     f"mimalloc or a path")
  return out


def variant_settings(specs: list[str]) -> dict[str, str]:
  """``--variant NAME:SETTINGS`` (repeatable) as {name: settings}, the default ("") first;
  ValueError naming a malformed or repeated one."""
  out = {"": ""}
  for spec in specs or ():
    name, sep, settings = spec.partition(":")
    if not sep or not name or not settings or "+" in name or name in out:
      raise ValueError(f"--variant={spec!r}: expected NAME:SETTINGS with a new name without '+', "
                       f"e.g. noremat:model.remat_policy=none")
    out[name] = settings
  return out


class Arm(NamedTuple):
  """What one arm of a run changes: the library preloaded ("": the system's), the config
  settings, and whether the peer runs in it (a variant of ours shares its allocator's peer)."""
  preload: str
  settings: str
  peer: bool


def arms(allocators: dict[str, str], variants: dict[str, str], settings: str = "") -> dict[str, Arm]:
  """Every allocator with every variant: ``system``, ``system+noremat``, ``tcmalloc``, ...; a
  variant's settings are added to ``settings`` (ours only: the peer runs in the default arm
  of each allocator)."""
  return {(a if not v else f"{a}+{v}"): Arm(path, ",".join(filter(None, (settings, extra))), not v)
          for a, path in allocators.items() for v, extra in variants.items()}


def arm_ab(rounds: dict[str, list[dict]], base: str) -> dict[str, dict]:
  """Per arm other than ``base``: our step's time in ``base`` over its time in that arm,
  paired by round (above 1: that arm is faster), with the range."""
  out = {}
  for name, its in rounds.items():
    if name == base or base not in rounds:
      continue
    paired = [b["andrea_jax"]["step_s"] / r["andrea_jax"]["step_s"] for b, r in zip(rounds[base], its)
              if "step_s" in b.get("andrea_jax", {}) and "step_s" in r.get("andrea_jax", {})]
    if paired:
      out[name] = {"speedup": statistics.median(paired), "range": (min(paired), max(paired)),
                   "base": base, **ratio_interval(paired, float("inf"))}
  return out


def summarise(rounds: list[dict], tokens: int, max_spread: float) -> dict:
  """Per side the median over rounds and the spread; the ratio paired by round."""
  row = {"rounds": len(rounds)}
  for side in SIDES:
    got = [r[side] for r in rounds if "step_s" in r.get(side, {})]
    if not got:
      row[side] = {k: v for r in rounds for k, v in r.get(side, {}).items() if k in ("skipped", "error")}
      continue
    med = [g["step_s"] for g in got]
    centre = statistics.median(med)
    row[side] = {"step_s": centre, "tokens_per_s": tokens / centre,
                 "spread": (max(med) - min(med)) / centre,
                 "minor_faults_per_step": statistics.median(g["minor_faults_per_step"] for g in got),
                 "cpu_s_per_step": statistics.median(g["cpu_s_per_step"] for g in got),
                 "peak_rss_mb": max(g["peak_rss_mb"] for g in got), "round_step_s": med,
                 **({"shared_with": got[0]["shared_with"]} if "shared_with" in got[0] else {})}
    row[side]["agrees"] = row[side]["spread"] < max_spread
    if all("waiting_cpu_s_per_step" in g for g in got):
      row[side]["waiting_cpu_s_per_step"] = max(g["waiting_cpu_s_per_step"] for g in got)
  paired = [r["peer"]["step_s"] / r["andrea_jax"]["step_s"] for r in rounds
            if "step_s" in r.get("andrea_jax", {}) and "step_s" in r.get("peer", {})]
  if paired:
    row["ratio"] = statistics.median(paired)
    row["ratio_range"] = (min(paired), max(paired))
    row["ratio_spread"] = (max(paired) - min(paired)) / row["ratio"]
    row["ratio_agrees"] = row["ratio_spread"] < max_spread
    row.update(ratio_interval(paired, max_spread))
  return row


def ratio_interval(paired: list[float], max_width: float) -> dict:
  """The rounds' paired ratios as a geometric mean with its 95 % t interval (over the
  rounds' log ratios: ``research.stats.one_sample``), and whether the interval is
  narrower than ``max_width`` of the mean (``ratio_decided``). Unlike the range, the interval
  narrows as rounds are added: more rounds is how a noisy machine reaches a figure."""
  from research import stats  # pylint: disable=import-outside-toplevel
  e = stats.one_sample([math.log(r) for r in paired])
  if not e.defined:
    return {"ratio_mean": math.exp(e.diff), "ratio_decided": False}
  mean, lo, hi = math.exp(e.diff), math.exp(e.lo), math.exp(e.hi)
  return {"ratio_mean": mean, "ratio_ci95": (lo, hi), "ratio_decided": (hi - lo) / mean < max_width}


