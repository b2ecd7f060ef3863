"""The training step, each side in its own fresh process, alternating: a benchmark whose rounds agree with each other (issue 31).

  pip install -r requirements-bench.txt
  python -m benchmarks.separate --shapes=tiny,andrea12m,andrea120m --rounds=7 --steps=5 \
      --out=docs/performance_separate.json

Why: timing JAX and PyTorch in one process lets their thread pools and allocators meet (a
PyTorch call's spinning OpenMP workers slow the next XLA product; the two allocators share
one heap), and a ratio that moves with the method cannot carry a claim. Here, per shape,
``--rounds`` rounds; each round starts one fresh Python process per side:

- ``--interleave=processes`` (the default): one side's whole round, then the other's,
  ``--settle_s`` apart, ours first in even rounds and the peer first in odd ones.
- ``--interleave=steps``: every side's process is built and warmed up (one after another,
  the others waiting), then they take turns one timed step at a time, the order rotating by
  one each step, ``--step_settle_s`` apart (``lockstep_round``). Tried as a cure for the
  noise, and not the default: the waiting process takes no CPU (``waiting_cpu_s_per_step``,
  from ``/proc``), but a step right after the other process's step ran 1-7 % slower than one
  after its own, more for ours than the peer's, and the rounds agreed no better
  (docs/performance.md).

The sides:

- ours: ``step.train_step`` with ``step.make_optimizer``, jitted, donated state
  (``benchmarks/ours.py``);
- the peer: ``transformers.GPT2LMHeadModel`` of the same shape with ``torch.optim.AdamW``
  and ``clip_grad_norm_``, eager float32 (``benchmarks/peer.py``).

A side's process builds its step, runs ``--warmup`` steps (ours compiles there), then
times ``--steps`` steps and reports their median, the minor page faults and CPU seconds
of the timed steps (``getrusage`` before and after), its peak resident memory (VmHWM) and
the CPU model. Per side: the median over rounds of the rounds' medians, and the spread,
``(max - min) / median`` over rounds. The ratio is paired by round (ours' tokens/s over
the peer's in the same round), given as the median, the range over rounds and its own
spread, flagged like a side's, and as the geometric mean with its 95 % t interval
(``ratio_interval``), "too wide" when the interval spans more than ``--max_spread`` of the
mean: the range only widens as rounds are added, the interval narrows, so on a noisy
machine a figure is published when its interval is narrow enough. Results go
into ``docs/`` only from an idle machine (``results.refusal``), and a table says
"spread over the limit" beside any side whose rounds differ by more than ``--max_spread``.

The arms (``arms``): each round runs both sides under each allocator named in
``--allocators=system,tcmalloc`` (``LD_PRELOAD`` in the child's environment; ``system``
preloads nothing), and ours once more in each ``--variant NAME:SETTINGS`` (config settings
added, e.g. ``noremat:model.remat_policy=none``; the variant's ratio is paired with its
allocator's peer in the same round), all in the rotating order, so every arm is alternated
with every other in one run. The table has a row per arm (``system``, ``system+noremat``, ...),
and our step's time in the first arm over its time in each other one, paired by round
(``arm_ab``).

The limits (``matmul_limit.py``; ``--no-limit`` leaves them out): once per run, the
machine's float32 FMA peak (``fma_peak.c``, every core); per shape, after its rounds, each
library's ceiling over the step's weight matmuls, XLA and PyTorch each in a fresh process
of its own, settled between calls. Each side's step is given as a fraction of both
(``pct_of_fma_peak``, ``pct_of_ceiling``: the faster library's), its FLOPs counted with
causal attention (``model.flops_per_token(..., causal=True)``: the pairs a causal kernel
computes, as both sides' kernels run them).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from typing import NamedTuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIDES = ("andrea_jax", "peer")
CEILINGS = ("ceiling_xla", "ceiling_torch")  # a library's dense-matmul ceiling, in its own process


def cpu_model() -> str:
  """The CPU's model name (Linux ``/proc/cpuinfo``), else what ``platform`` knows."""
  try:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
      for line in f:
        if line.startswith("model name"):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or platform.machine()


def peak_rss_mb() -> float:
  """This process's peak resident memory (VmHWM: ru_maxrss carries the parent's over exec)."""
  with open("/proc/self/status", encoding="utf-8") as f:
    for line in f:
      if line.startswith("VmHWM"):
        return int(line.split()[1]) / 1024
  return float("nan")


# ----------------------------------------------------------------------------- one side, one process


def side_step(side: str, shape: str, batch: int, seq: int, settings: str = ""):
  """One side's step as a function running one step, or ``{"skipped": why}``."""
  from benchmarks import shapes  # pylint: disable=import-outside-toplevel
  config = shapes.load_config(shape, settings)  # the model's settings: both sides build from it
  if side == "andrea_jax":
    from benchmarks import ours  # pylint: disable=import-outside-toplevel
    return ours.ours_step(config, batch, seq)[0]
  from benchmarks import peer  # pylint: disable=import-outside-toplevel
  missing = peer.peer_available()
  if missing:
    return {"skipped": missing}
  return peer.peer_step(shapes.model_config(config, seq), config.train, batch, seq, False)


def timed(run) -> dict:
  """One step of ``run``: its wall seconds, CPU seconds and minor page faults."""
  before = resource.getrusage(resource.RUSAGE_SELF)
  start = time.perf_counter()
  run()
  wall = time.perf_counter() - start
  after = resource.getrusage(resource.RUSAGE_SELF)
  return {"s": wall, "faults": after.ru_minflt - before.ru_minflt,
          "cpu_s": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)}


def side_result(steps: list[dict]) -> dict:
  """A side's round from its timed steps (``timed``): the median step, faults and CPU
  seconds per step, its peak resident memory and the CPU model."""
  n = len(steps)
  return {"step_s": statistics.median(t["s"] for t in steps), "times": [t["s"] for t in steps],
          "minor_faults_per_step": sum(t["faults"] for t in steps) / n,
          "cpu_s_per_step": sum(t["cpu_s"] for t in steps) / n,
          "peak_rss_mb": peak_rss_mb(), "cpu": cpu_model()}


def child(side: str, shape: str, batch: int, seq: int, warmup: int, steps: int,
          settings: str = "") -> dict:
  """Build one side's step, warm it up, time ``steps`` steps (runs in the fresh process)."""
  from benchmarks import shapes  # pylint: disable=import-outside-toplevel
  if side in CEILINGS:
    config = shapes.load_config(shape, settings)
    return ceiling_child(side[len("ceiling_"):], shapes.model_config(config, seq), batch, seq)
  run = side_step(side, shape, batch, seq, settings)
  if isinstance(run, dict):
    return run
  for _ in range(warmup):
    run()
  return side_result([timed(run) for _ in range(steps)])


def serve(side: str, shape: str, batch: int, seq: int, warmup: int, settings: str = "",
          stdin=sys.stdin, stdout=sys.stdout) -> None:
  """The lockstep child: build and warm up one side's step, say ``READY``, then run one timed
  step for each ``step`` line on stdin (answering ``STEP {...}``) until ``end`` (answering
  ``RESULT {...}``, the round's figures); a skipped side answers ``RESULT`` at once."""
  run = side_step(side, shape, batch, seq, settings)
  if isinstance(run, dict):
    print("RESULT " + json.dumps(run), file=stdout, flush=True)
    return
  for _ in range(warmup):
    run()
  print("READY", file=stdout, flush=True)
  steps = []
  for line in stdin:
    if line.strip() == "step":
      steps.append(timed(run))
      print("STEP " + json.dumps(steps[-1]), file=stdout, flush=True)
    elif line.strip() == "end":
      break
  print("RESULT " + json.dumps(side_result(steps) if steps else {"error": "no steps timed"}),
        file=stdout, flush=True)


def ceiling_child(library: str, cfg, batch: int, seq: int) -> dict:
  """One library's ceiling over the step's weight matmuls (``matmul_limit.library_ceiling``)."""
  from benchmarks import matmul_limit  # pylint: disable=import-outside-toplevel
  if library == "torch":
    from benchmarks import peer  # pylint: disable=import-outside-toplevel
    missing = peer.peer_available()
    if missing:
      return {"skipped": missing}
  return {"flops_per_s": matmul_limit.library_ceiling(cfg, batch, seq, library)}


def shape_limits(name: str, batch: int, seq: int, fma: dict, run=None) -> dict:
  """A shape's limits: the FMA peak (``fma``, measured once per run), each library's ceiling
  (``ceiling_xla``, ``ceiling_torch``: fresh processes) and the step's causal FLOPs per token."""
  from andrea_jax import model  # pylint: disable=import-outside-toplevel
  from benchmarks import shapes  # pylint: disable=import-outside-toplevel
  run = run or run_child
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


def child_args(side: str, shape: str, batch: int, seq: int, warmup: int, steps: int,
               settings: str = "") -> list[str]:
  return [sys.executable, "-m", "benchmarks.separate", f"--child={side}", f"--shapes={shape}",
          f"--batch={batch}", f"--seq={seq}", f"--warmup={warmup}", f"--steps={steps}",
          f"--settings={settings}"]


def last_line(text: str) -> str:
  return (text.strip().splitlines() or [""])[-1][:300]


def run_child(side: str, shape: str, batch: int, seq: int, warmup: int, steps: int,
              preload: str = "", settings: str = "") -> dict:
  """``child`` in a fresh process (with ``preload`` in ``LD_PRELOAD``, if given); its
  result, or the error it ended with."""
  return result_of(child_args(side, shape, batch, seq, warmup, steps, settings), preload)


def result_of(argv: list[str], preload: str = "") -> dict:
  """Run ``argv`` (a benchmark's child mode) in a fresh process from the repository root
  (``preload`` in ``LD_PRELOAD``, if given): the JSON of its ``RESULT`` line, or the error it
  ended with. ``benchmarks.components --separate`` runs its sides through it too."""
  out = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, check=False,
                       env=child_env(preload))
  for line in out.stdout.splitlines():
    if line.startswith("RESULT "):
      return json.loads(line[len("RESULT "):])
  return {"error": f"exit {out.returncode}: {last_line(out.stderr)}"}


class Live:
  """One side's lockstep process (``serve``): started, built and warmed up, then asked for
  one timed step at a time."""

  def __init__(self, side: str, shape: str, batch: int, seq: int, warmup: int,
               preload: str = "", settings: str = ""):
    self.err = tempfile.TemporaryFile(mode="w+")
    self.proc = subprocess.Popen(child_args(side, shape, batch, seq, warmup, 1, settings) + ["--serve"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err,
                                 text=True, cwd=ROOT, env=child_env(preload))
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


def allocator_paths(names: str) -> dict[str, str]:
  """``--allocators`` (``system``, ``tcmalloc`` or a library path, comma-separated) as
  {name: the library to preload, "" for the system's}; ValueError naming one not found."""
  from andrea_jax import allocator  # pylint: disable=import-outside-toplevel
  out = {}
  for name in (n.strip() for n in names.split(",") if n.strip()):
    path = "" if name == "system" else (allocator.find({}) if name == "tcmalloc" else name)
    if path is None or (path and not os.path.exists(path)):
      raise ValueError(f"--allocators: {name!r} is not installed here (tcmalloc: apt-get install "
                       f"libtcmalloc-minimal4, or give the library's path)")
    out[name] = path
  if not out:
    raise ValueError(f"--allocators={names!r}: expected one or more of system, tcmalloc or a path")
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


def allocator_name(name: str) -> str:
  """An arm as the table names it: ``system``, ``tcmalloc``, a library's file name, each with
  ``+variant`` if it is one."""
  return os.path.basename(name) if os.sep in name else name


def code_line(code: dict | None) -> str:
  """The commit that ran (``experiments.sweep.code_version``), and whether its tree was clean."""
  if not code or not code.get("commit"):
    return "Code: not known (not a git checkout)"
  return f"Code: commit {code['commit'][:12]}" + ("" if code.get("clean") else ", with uncommitted changes")


INTERLEAVE_LINES = {
    "steps": "Interleaved by step: every side's process alive at once, one timed step of each in "
             "turn (the order rotating).",
    "processes": "Interleaved by process: each side's round in a fresh process after the other's."}


def run_record(module: str, argv, load: float) -> dict:
  """What a run's results open with (``header_lines`` prints it): the CPU, the commit
  (``experiments.sweep.code_version``), the versions, the date, the command and the load
  at the start. ``benchmarks.components --separate`` records its runs with it too."""
  import jax  # pylint: disable=import-outside-toplevel
  from research import provenance  # pylint: disable=import-outside-toplevel
  return {"cpu": cpu_model(), "code": provenance.code_version(ROOT), "cores": os.cpu_count(),
          "load_at_start": load, "versions": f"jax {jax.__version__}, python {platform.python_version()}",
          "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
          "command": f"python -m {module} " + " ".join(argv if argv is not None else sys.argv[1:]),
          "shapes": []}


def finish_run(results: dict, text: str, out: str) -> int:
  """The end of a run: the load then, the tables printed, and the JSON and tables written
  to ``out`` (if given, ``results.write_results``)."""
  from benchmarks import results as results_lib  # pylint: disable=import-outside-toplevel
  results["load_at_end"] = os.getloadavg()[0]
  print(text)
  if out:
    results_lib.write_results(results, out, text)
  return 0


def header_lines(results: dict) -> list[str]:
  """What a results table opens with: the CPU, the command, the commit and the load at the
  start (``benchmarks.components --separate`` opens its tables with them too)."""
  return [f"CPU: {results['cpu']} ({results['cores']} cores); {results['versions']}", "",
          f"Command: `{results['command']}`", "", code_line(results.get("code")), "",
          f"Date: {results['date']}; 1-minute load average before starting: {results['load_at_start']:.2f}"]


def markdown(results: dict) -> str:
  lines = [*header_lines(results), "",
           INTERLEAVE_LINES.get(results.get("interleave", "processes"), ""), "",
           "| shape | arm | batch x seq | andrea_jax step (spread) | peer step (spread) | ratio, median [range over rounds] (spread) | "
           "ratio, geometric mean [95 % CI] | "
           "minor faults per step ours / peer | peak RSS MB ours / peer | "
           "% of FMA peak ours / peer | % of ceiling ours / peer |", "|---" * 11 + "|"]
  for s in results["shapes"]:
    o, p = s.get("andrea_jax", {}), s.get("peer", {})
    side = lambda d: (f"{d['step_s']:.3f} s ({100 * d['spread']:.0f} %" + ("" if d["agrees"] else
                      ", over the limit") + ")") if "step_s" in d else (d.get("skipped") or d.get("error") or "n/a")
    ratio = (f"{s['ratio']:.2f}x [{s['ratio_range'][0]:.2f}, {s['ratio_range'][1]:.2f}]"
             + (f" ({100 * s['ratio_spread']:.0f} %" + ("" if s["ratio_agrees"] else ", over the limit") + ")"
                if "ratio_spread" in s else "") if "ratio" in s else "n/a")
    mean = (f"{s['ratio_mean']:.2f}x [{s['ratio_ci95'][0]:.2f}, {s['ratio_ci95'][1]:.2f}]"
            + ("" if s["ratio_decided"] else ", too wide") if "ratio_ci95" in s else "n/a")
    faults = " / ".join(f"{d['minor_faults_per_step']:,.0f}" if "step_s" in d else "n/a" for d in (o, p))
    rss = " / ".join(f"{d['peak_rss_mb']:,.0f}" if "step_s" in d else "n/a" for d in (o, p))
    pct = lambda key: " / ".join(f"{100 * d[key]:.0f} %" if key in d else "n/a" for d in (o, p))
    lines.append(f"| {s['shape']} | {allocator_name(s.get('arm', 'system'))} | {s['batch']} x {s['seq']} | {side(o)} "
                 f"| {side(p)} | {ratio} | {mean} | {faults} | {rss} | {pct('pct_of_fma_peak')} | {pct('pct_of_ceiling')} |")
  ab = [f"- {s['shape']}: our step in {allocator_name(name)} against {allocator_name(a['base'])}, paired by "
        f"round (above 1: faster): {a['speedup']:.2f}x [{a['range'][0]:.2f}, {a['range'][1]:.2f}]"
        + (f"; geometric mean {a['ratio_mean']:.2f}x [95 % CI {a['ratio_ci95'][0]:.2f}, {a['ratio_ci95'][1]:.2f}]"
           if "ratio_ci95" in a else "")
        for s in results["shapes"] for name, a in s.get("arm_ab", {}).items()]
  if ab:
    lines += ["", "The arms, alternated in one run:", *ab]
  waits = [f"{s['shape']}/{allocator_name(s.get('arm', 'system'))} {side} "
           f"{s[side]['waiting_cpu_s_per_step']:.3f} s (its step {s[side]['step_s']:.3f} s)"
           for s in results["shapes"] for side in SIDES
           if "waiting_cpu_s_per_step" in s.get(side, {}) and not s[side].get("shared_with")]
  if waits:
    lines += ["", "The waiting processes' CPU seconds during one timed step (most in any round; "
              "near 0: a waiting side took nothing from the one timed): " + "; ".join(waits)]
  lines += ["", *limit_lines(results)]
  return "\n".join(lines) + "\n"


def limit_lines(results: dict) -> list[str]:
  """What the limits were, per shape, and how the FLOPs were counted."""
  g = lambda x: f"{x / 1e9:,.0f} GFLOP/s"
  fma = results.get("fma") or {}
  out = [("FMA peak: " + (f"{g(fma['fma_peak_flops_per_s'])} ({fma['fma_threads']} threads, "
                          f"{fma['fma_lanes']} float32 lanes: benchmarks/fma_peak.c)"
                          if "fma_peak_flops_per_s" in fma else fma.get("fma_peak_skipped", "not measured")))]
  shown = set()
  for s in results["shapes"]:
    lim = s.get("limits")
    if lim and s["shape"] not in shown:  # one line a shape: its allocators' rows share the limits
      shown.add(s["shape"])
      side = lambda k: g(lim[f"{k}_flops_per_s"]) if f"{k}_flops_per_s" in lim else f"n/a ({lim.get(k + '_skipped')})"
      out.append(f"- {s['shape']}: weight-matmul ceiling XLA {side('ceiling_xla')}, PyTorch "
                 f"{side('ceiling_torch')}; a step counts {lim['flops_per_token_causal'] / 1e6:,.1f} "
                 f"MFLOP per token (causal attention)")
  return out


def parse_args(argv=None) -> argparse.Namespace:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--shapes", default="tiny,andrea12m,andrea120m")
  p.add_argument("--rounds", type=int, default=7)
  p.add_argument("--warmup", type=int, default=2)
  p.add_argument("--steps", type=int, default=5)
  p.add_argument("--batch", type=int, default=0, help="0: the shape's default (benchmarks/shapes.py)")
  p.add_argument("--seq", type=int, default=0, help="0: the shape's default")
  p.add_argument("--settle_s", type=float, default=2.0, help="pause between processes")
  p.add_argument("--interleave", choices=("steps", "processes"), default="processes",
                 help="steps: every side's process alive at once, their timed steps taking turns "
                      "(lockstep_round); processes: one side's whole round after the other's")
  p.add_argument("--step_settle_s", type=float, default=0.2,
                 help="with --interleave=steps, the pause between two sides' steps")
  p.add_argument("--max_spread", type=float, default=0.10)
  p.add_argument("--max_load", type=float, default=0.5)
  p.add_argument("--force", action="store_true", help="measure on a busy machine (never into docs/)")
  p.add_argument("--allocators", default="system",
                 help="comma-separated: 'system', 'tcmalloc' (andrea_jax/allocator.py finds it) or a "
                      "library path; each round runs both sides under each (in LD_PRELOAD), rotating "
                      "the order, and the table has a row per allocator")
  p.add_argument("--variant", action="append", default=[], metavar="NAME:SETTINGS",
                 help="a variant of our step, e.g. noremat:model.remat_policy=none (repeatable): "
                      "an arm per allocator in which only ours runs, with these settings added, its "
                      "ratio paired with that allocator's peer and its time with the default arm's")
  p.add_argument("--settings", default="", help="the configs' overrides for this run, e.g. "
                 "'model.remat_policy=full' (benchmarks/shapes.py: load_config)")
  p.add_argument("--out", default="")
  p.add_argument("--limit", action=argparse.BooleanOptionalAction, default=True,
                 help="measure the FMA peak and each library's ceiling (--no-limit: skip them)")
  p.add_argument("--child", choices=SIDES + CEILINGS, default=None, help=argparse.SUPPRESS)
  p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
  args = p.parse_args(argv)
  for name in ("rounds", "steps"):
    if getattr(args, name) < 1:
      p.error(f"--{name}={getattr(args, name)}: expected at least 1")
  return args


def main(argv=None, sleep=time.sleep) -> int:
  try:
    return measure(argv, sleep)
  except KeyboardInterrupt:  # the children, in our process group, got the same Ctrl-C
    print("interrupted: nothing written (--out is written only when every shape is done)",
          file=sys.stderr, flush=True)
    return 130


def measure(argv=None, sleep=time.sleep) -> int:
  args = parse_args(argv)
  if args.child and args.serve:
    serve(args.child, args.shapes, args.batch, args.seq, args.warmup, args.settings)
    return 0
  if args.child:
    print("RESULT " + json.dumps(child(args.child, args.shapes, args.batch, args.seq, args.warmup,
                                        args.steps, args.settings)), flush=True)
    return 0
  from benchmarks import results as results_lib  # pylint: disable=import-outside-toplevel
  from benchmarks import shapes  # pylint: disable=import-outside-toplevel
  load = os.getloadavg()[0]
  why = results_lib.refusal(args.out, load, args.max_load, args.force)
  if why:
    print(f"error: {why}", file=sys.stderr)
    return 2
  try:
    setup = arms(allocator_paths(args.allocators), variant_settings(args.variant), args.settings)
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  out = {**run_record("benchmarks.separate", argv, load),
         "arms": {a: arm._asdict() for a, arm in setup.items()}, "interleave": args.interleave}
  if args.limit:
    from benchmarks import matmul_limit  # pylint: disable=import-outside-toplevel
    out["fma"] = matmul_limit.fma_peak()
  for name in args.shapes.split(","):
    batch, seq = shapes.SHAPE_DEFAULTS.get(name, (16, 128))
    batch, seq = args.batch or batch, args.seq or seq
    rounds = {a: [] for a in setup}
    runs = tuple((a, side) for a in setup for side in SIDES if side != "peer" or setup[a].peer)
    start = lambda run, name=name, batch=batch, seq=seq: Live(
        run[1], name, batch, seq, args.warmup, setup[run[0]].preload, setup[run[0]].settings)
    for i in range(args.rounds):
      rnd = {a: {} for a in setup}
      if args.interleave == "steps":
        for (a, side), got in lockstep_round(runs, start, args.steps, i, args.step_settle_s,
                                             sleep).items():
          rnd[a][side] = got
        sleep(args.settle_s)
      for a, side in order(i, runs) if args.interleave == "processes" else ():
        rnd[a][side] = run_child(side, name, batch, seq, args.warmup, args.steps, setup[a].preload,
                                 setup[a].settings)
        sleep(args.settle_s)
      for a in setup:
        if not setup[a].peer:  # a variant of ours: paired with its allocator's peer, same round
          base = a.rsplit("+", 1)[0]
          rnd[a]["peer"] = {**rnd[base]["peer"], "shared_with": base}
        rounds[a].append(rnd[a])
      print(f"{name} round {i + 1}/{args.rounds}: " + ", ".join(
          f"{s}/{a} {rnd[a][s]['step_s']:.3f} s" if "step_s" in rnd[a][s] else f"{s}/{a} {rnd[a][s]}"
          for a, s in runs), flush=True)
    limits = shape_limits(name, batch, seq, out["fma"]) if args.limit else None
    ab = arm_ab(rounds, base=next(iter(setup)))
    for a in setup:
      row = {"shape": name, "arm": a, "batch": batch, "seq": seq, "per_round": rounds[a],
             **summarise(rounds[a], batch * seq, args.max_spread),
             **({"arm_ab": {a: ab[a]}} if a in ab else {})}
      out["shapes"].append(with_limits(row, limits) if limits else row)
  return finish_run(out, markdown(out), args.out)


if __name__ == "__main__":
  sys.exit(main())
