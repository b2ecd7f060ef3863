"""The training step, each side in its own fresh process, alternating: a benchmark whose rounds agree with each other (issue 31).

  pip install -r requirements-bench.txt
  python -m benchmarks.separate --shapes=tiny,andrea12m,andrea120m --rounds=7 --steps=5 \
      --out=docs/performance_separate.json

Why: timing JAX and PyTorch in one process lets their thread pools and allocators meet (a
PyTorch call's spinning OpenMP workers slow the next XLA product; the two allocators share
one heap), and a ratio that moves with the method cannot carry a claim. Here, per shape,
``--rounds`` rounds; each round starts one fresh Python process per side, ours first in
even rounds and the peer first in odd ones, ``--settle_s`` apart:

- ours: ``step.train_step`` with ``step.make_optimizer``, jitted, donated state
  (``benchmarks/ours.py``);
- the peer: ``transformers.GPT2LMHeadModel`` of the same shape with ``torch.optim.AdamW``
  and ``clip_grad_norm_``, eager float32 (``benchmarks/peer.py``).

A side's process builds its step, runs ``--warmup`` steps (ours compiles there), then
times ``--steps`` steps and reports their median, the minor page faults and CPU seconds
of the timed steps (``getrusage`` before and after), its peak resident memory (VmHWM) and
the CPU model. Per side: the median over rounds of the rounds' medians, and the spread,
``(max - min) / median`` over rounds. The ratio is paired by round (ours' tokens/s over
the peer's in the same round), given as the median and the range over rounds. Results go
into ``docs/`` only from an idle machine (``results.refusal``), and a table says
"spread over the limit" beside any side whose rounds differ by more than ``--max_spread``.

The allocators (``--allocators=system,tcmalloc``): each round runs both sides under each
allocator named (``LD_PRELOAD`` in the child's environment; ``system`` preloads nothing),
the order rotating by one each round, so the allocators are alternated in one run; the table
has a row per allocator, and our step's time under the system allocator over its time under
each other one, paired by round (``allocator_ab``).

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
import os
import platform
import resource
import statistics
import subprocess
import sys
import time

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


def child(side: str, shape: str, batch: int, seq: int, warmup: int, steps: int,
          settings: str = "") -> dict:
  """Build one side's step, warm it up, time ``steps`` steps (runs in the fresh process)."""
  from benchmarks import shapes  # pylint: disable=import-outside-toplevel
  config = shapes.load_config(shape, settings)  # the model's settings: both sides build from it
  if side in CEILINGS:
    return ceiling_child(side[len("ceiling_"):], shapes.model_config(config, seq), batch, seq)
  if side == "andrea_jax":
    from benchmarks import ours  # pylint: disable=import-outside-toplevel
    run, _ = ours.ours_step(config, batch, seq)
  else:
    from benchmarks import peer  # pylint: disable=import-outside-toplevel
    missing = peer.peer_available()
    if missing:
      return {"skipped": missing}
    run = peer.peer_step(shapes.model_config(config, seq), config.train, batch, seq, False)
  for _ in range(warmup):
    run()
  before, times = resource.getrusage(resource.RUSAGE_SELF), []
  for _ in range(steps):
    start = time.perf_counter()
    run()
    times.append(time.perf_counter() - start)
  after = resource.getrusage(resource.RUSAGE_SELF)
  return {"step_s": statistics.median(times), "times": times,
          "minor_faults_per_step": (after.ru_minflt - before.ru_minflt) / steps,
          "cpu_s_per_step": ((after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)) / steps,
          "peak_rss_mb": peak_rss_mb(), "cpu": cpu_model()}


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


def run_child(side: str, shape: str, batch: int, seq: int, warmup: int, steps: int,
              preload: str = "", settings: str = "") -> dict:
  """``child`` in a fresh process (with ``preload`` in ``LD_PRELOAD``, if given); its
  result, or the error it ended with."""
  args = [sys.executable, "-m", "benchmarks.separate", f"--child={side}", f"--shapes={shape}",
          f"--batch={batch}", f"--seq={seq}", f"--warmup={warmup}", f"--steps={steps}",
          f"--settings={settings}"]
  env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
  if preload:
    env["LD_PRELOAD"] = preload
  out = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, check=False, env=env)
  for line in out.stdout.splitlines():
    if line.startswith("RESULT "):
      return json.loads(line[len("RESULT "):])
  return {"error": f"exit {out.returncode}: {(out.stderr.strip().splitlines() or [''])[-1][:300]}"}


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


def allocator_ab(rounds: dict[str, list[dict]], base: str = "system") -> dict[str, dict]:
  """Per allocator other than ``base``: our step's time under ``base`` over its time under
  that allocator, paired by round (above 1: that allocator is faster), with the range."""
  out = {}
  for name, its in rounds.items():
    if name == base or base not in rounds:
      continue
    paired = [b["andrea_jax"]["step_s"] / r["andrea_jax"]["step_s"] for b, r in zip(rounds[base], its)
              if "step_s" in b.get("andrea_jax", {}) and "step_s" in r.get("andrea_jax", {})]
    if paired:
      out[name] = {"speedup": statistics.median(paired), "range": (min(paired), max(paired))}
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
                 "peak_rss_mb": max(g["peak_rss_mb"] for g in got), "round_step_s": med}
    row[side]["agrees"] = row[side]["spread"] < max_spread
  paired = [r["peer"]["step_s"] / r["andrea_jax"]["step_s"] for r in rounds
            if "step_s" in r.get("andrea_jax", {}) and "step_s" in r.get("peer", {})]
  if paired:
    row["ratio"] = statistics.median(paired)
    row["ratio_range"] = (min(paired), max(paired))
  return row


def allocator_name(name: str) -> str:
  """An allocator as the table names it: ``system``, ``tcmalloc``, or a library's file name."""
  return os.path.basename(name) if os.sep in name else name


def markdown(results: dict) -> str:
  lines = [f"CPU: {results['cpu']} ({results['cores']} cores); {results['versions']}", "",
           f"Command: `{results['command']}`", "",
           f"Date: {results['date']}; 1-minute load average before starting: {results['load_at_start']:.2f}", "",
           "| shape | allocator | batch x seq | andrea_jax step (spread) | peer step (spread) | ratio, median [range over rounds] | "
           "minor faults per step ours / peer | peak RSS MB ours / peer | "
           "% of FMA peak ours / peer | % of ceiling ours / peer |", "|---" * 10 + "|"]
  for s in results["shapes"]:
    o, p = s.get("andrea_jax", {}), s.get("peer", {})
    side = lambda d: (f"{d['step_s']:.3f} s ({100 * d['spread']:.0f} %" + ("" if d["agrees"] else
                      ", over the limit") + ")") if "step_s" in d else (d.get("skipped") or d.get("error") or "n/a")
    ratio = (f"{s['ratio']:.2f}x [{s['ratio_range'][0]:.2f}, {s['ratio_range'][1]:.2f}]"
             if "ratio" in s else "n/a")
    faults = " / ".join(f"{d['minor_faults_per_step']:,.0f}" if "step_s" in d else "n/a" for d in (o, p))
    rss = " / ".join(f"{d['peak_rss_mb']:,.0f}" if "step_s" in d else "n/a" for d in (o, p))
    pct = lambda key: " / ".join(f"{100 * d[key]:.0f} %" if key in d else "n/a" for d in (o, p))
    lines.append(f"| {s['shape']} | {allocator_name(s.get('allocator', 'system'))} | {s['batch']} x {s['seq']} | {side(o)} "
                 f"| {side(p)} | {ratio} | {faults} | {rss} | {pct('pct_of_fma_peak')} | {pct('pct_of_ceiling')} |")
  ab = [f"- {s['shape']}: our step under {allocator_name(name)} against the system allocator, paired by round: "
        f"{a['speedup']:.2f}x faster [{a['range'][0]:.2f}, {a['range'][1]:.2f}]"
        for s in results["shapes"] for name, a in s.get("allocator_ab", {}).items()]
  if ab:
    lines += ["", "The allocators, alternated in one run:", *ab]
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
  p.add_argument("--max_spread", type=float, default=0.10)
  p.add_argument("--max_load", type=float, default=0.5)
  p.add_argument("--force", action="store_true", help="measure on a busy machine (never into docs/)")
  p.add_argument("--allocators", default="system",
                 help="comma-separated: 'system', 'tcmalloc' (andrea_jax/allocator.py finds it) or a "
                      "library path; each round runs both sides under each (in LD_PRELOAD), rotating "
                      "the order, and the table has a row per allocator")
  p.add_argument("--settings", default="", help="the configs' overrides for this run, e.g. "
                 "'model.remat_policy=full' (benchmarks/shapes.py: load_config)")
  p.add_argument("--out", default="")
  p.add_argument("--limit", action=argparse.BooleanOptionalAction, default=True,
                 help="measure the FMA peak and each library's ceiling (--no-limit: skip them)")
  p.add_argument("--child", choices=SIDES + CEILINGS, default=None, help=argparse.SUPPRESS)
  args = p.parse_args(argv)
  for name in ("rounds", "steps"):
    if getattr(args, name) < 1:
      p.error(f"--{name}={getattr(args, name)}: expected at least 1")
  return args


def main(argv=None, sleep=time.sleep) -> int:
  args = parse_args(argv)
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
    allocators = allocator_paths(args.allocators)
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  import jax  # pylint: disable=import-outside-toplevel
  out = {"cpu": cpu_model(), "cores": os.cpu_count(), "load_at_start": load, "allocators": allocators,
         "versions": f"jax {jax.__version__}, python {platform.python_version()}",
         "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
         "command": "python -m benchmarks.separate " + " ".join(argv if argv is not None else sys.argv[1:]),
         "shapes": []}
  if args.limit:
    from benchmarks import matmul_limit  # pylint: disable=import-outside-toplevel
    out["fma"] = matmul_limit.fma_peak()
  for name in args.shapes.split(","):
    batch, seq = shapes.SHAPE_DEFAULTS.get(name, (16, 128))
    batch, seq = args.batch or batch, args.seq or seq
    rounds = {a: [] for a in allocators}
    runs = tuple((a, side) for a in allocators for side in SIDES)
    for i in range(args.rounds):
      rnd = {a: {} for a in allocators}
      for a, side in order(i, runs):
        rnd[a][side] = run_child(side, name, batch, seq, args.warmup, args.steps, allocators[a],
                                 args.settings)
        sleep(args.settle_s)
      for a in allocators:
        rounds[a].append(rnd[a])
      print(f"{name} round {i + 1}/{args.rounds}: " + ", ".join(
          f"{s}/{a} {rnd[a][s]['step_s']:.3f} s" if "step_s" in rnd[a][s] else f"{s}/{a} {rnd[a][s]}"
          for a, s in runs), flush=True)
    limits = shape_limits(name, batch, seq, out["fma"]) if args.limit else None
    ab = allocator_ab(rounds)
    for a in allocators:
      row = {"shape": name, "allocator": a, "batch": batch, "seq": seq, "per_round": rounds[a],
             **summarise(rounds[a], batch * seq, args.max_spread),
             **({"allocator_ab": {a: ab[a]}} if a in ab else {})}
      out["shapes"].append(with_limits(row, limits) if limits else row)
  out["load_at_end"] = os.getloadavg()[0]
  text = markdown(out)
  print(text)
  if args.out:
    with open(args.out, "w", encoding="utf-8") as f:
      json.dump(out, f, indent=2)
    with open(os.path.splitext(args.out)[0] + "_tables.md", "w", encoding="utf-8") as f:
      f.write(text)
  return 0


if __name__ == "__main__":
  sys.exit(main())
