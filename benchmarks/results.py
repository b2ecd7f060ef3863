"""Where the step benchmark's results go: the machine and commit they were measured on
(``run_record``), the JSON and its Markdown tables (one per mode of ``benchmarks/step.py``),
and the guard that keeps figures from a busy machine (or a ``--force`` run) out of
``results/benchmarks/``, where the published figures live (``refusal``).
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time

import jax

from benchmarks import matmul_limit
from benchmarks import timing

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The benchmarks' published outputs: JSON and tables that docs/ quotes and links to.
PUBLISHED_DIR = os.path.join(ROOT, "results", "benchmarks")


def machine() -> str:
  d = jax.devices()[0]
  cpu = platform.processor() or platform.machine()
  return (f"{d.platform} ({d.device_kind}), {os.cpu_count()} cores ({cpu}, {timing.cpu_class()}), jax {jax.__version__}, "
          f"python {platform.python_version()}")


def _f(row: dict, key: str, fmt: str, suffix: str = "") -> str:
  return format(row[key], fmt) + suffix if key in row else "n/a"


def markdown(results: dict) -> str:
  """The one-process results (``--processes=one``: the whole step, compile times,
  generation) as Markdown tables, with the machine, the command and the load beside them."""
  lines = [f"Machine: {results['machine']}", "", f"Command: `{results['command']}`", "",
           *([code_line(results["code"]), ""] if "code" in results else []),
           f"Date: {results.get('date', 'n/a')}; 1-minute load average before starting: "
           f"{results.get('load_at_start', float('nan')):.2f}", ""]
  if results["train"]:
    lines += ["| shape | batch x seq | params | andrea_jax tokens/s | model-only tokens/s | "
              "step overhead | peer tokens/s | ratio | % of matmul limit ours / peer | "
              "matmul limit XLA / PyTorch (GFLOP/s) | load before / after | CPU s per s | "
              "peak RSS ours / peer (MB) |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results["train"]:
      gflops = {k: v / 1e9 for k, v in r.items() if k.endswith("_matmul_flops_per_s")}
      lines.append(
          f"| {r['shape']} | {r['batch']} x {r['seq']} | {r['params']:,} | "
          f"{_f(r, 'andrea_jax_tokens_per_s', ',.0f')} | {_f(r, 'model_only_tokens_per_s', ',.0f')} | "
          f"{_f(r, 'step_overhead', '+.1%')} | {_f(r, 'peer_tokens_per_s', ',.0f')} | "
          f"{_f(r, 'ratio', '.2f', 'x')} | "
          f"{_f(r, 'ours_pct_of_limit', '.0%')} / {_f(r, 'peer_pct_of_limit', '.0%')} | "
          f"{_f(gflops, 'xla_matmul_flops_per_s', '.0f')} / "
          f"{_f(gflops, 'torch_matmul_flops_per_s', '.0f')} | "
          f"{_f(r, 'load_before', '.2f')} / {_f(r, 'load_after', '.2f')} | "
          f"{_f(r, 'cpu_per_wall', '.2f')} | "
          f"{_f(r, 'andrea_jax_rss_mb', '.0f')} / {_f(r, 'peer_rss_mb', '.0f')} |")
    lines += ["", "% of matmul limit: each side's step FLOP/s (" + matmul_limit.PCT_COUNTS
              + ") over the "
              "faster side's float32 FLOP/s on the step's own matmuls, measured in the same run."]
  if results.get("compile"):
    lines += ["", "| layers | compile, lax.scan (s) | compile, unrolled (s) |", "|---|---|---|"]
    lines += [f"| {r['n_layer']} | {r['scan_s']:.1f} | {r['unrolled_s']:.1f} |" for r in results["compile"]]
  if results.get("generate"):
    lines += ["", "| shape | prompt + new | andrea_jax tokens/s | peer tokens/s | ratio |", "|---|---|---|---|---|"]
    lines += [f"| {r['shape']} | {r['prompt']} + {r['new_tokens']} | {r['andrea_jax_tokens_per_s']:,.0f} | "
              f"{_f(r, 'peer_tokens_per_s', ',.0f')} | {_f(r, 'ratio', '.2f', 'x')} |"
              for r in results["generate"]]
  return "\n".join(lines) + "\n"


def published(path: str) -> bool:
  """Whether ``path`` lies in ``results/benchmarks/`` (where published figures live)."""
  return bool(path) and os.path.abspath(path).startswith(os.path.abspath(PUBLISHED_DIR) + os.sep)


def refusal(out: str, load_at_start: float, max_load: float, force: bool) -> str | None:
  """Why results may not go to ``out``, or None: results/benchmarks/ takes figures from idle
  machines only."""
  if not published(out):
    return None
  if force:
    return (f"--force never writes into results/benchmarks/: {out} is left as it is (write the "
            f"results elsewhere with --out, e.g. --out=/tmp/bench.json)")
  if load_at_start > max_load:
    return (f"the machine was busy before starting (1-minute load average {load_at_start:.2f} > "
            f"--max_load={max_load}): figures for results/benchmarks/ must come from an idle "
            f"machine; stop the other jobs and wait for the load to fall, or pass --force to "
            f"measure anyway without writing results/benchmarks/")
  return None


def write_results(results: dict, out: str, tables: str | None = None) -> None:
  """The JSON results, and their Markdown tables beside them (``<name>_tables.md``):
  ``tables``, or this module's ``markdown`` of them (the other modes pass their own)."""
  with open(out, "w", encoding="utf-8") as f:
    json.dump(results, f, indent=2)
  with open(os.path.splitext(out)[0] + "_tables.md", "w", encoding="utf-8") as f:
    f.write(markdown(results) if tables is None else tables)


# ----------------------------------------------------------------------------- separate processes, parts


def allocator_name(name: str) -> str:
  """An arm as the table names it: ``system``, ``tcmalloc``, a library's file name, each with
  ``+variant`` if it is one."""
  return os.path.basename(name) if os.sep in name else name


def code_line(code: dict | None) -> str:
  """The commit that ran (``research.provenance.code_version``), and whether its tree was clean."""
  if not code or not code.get("commit"):
    return "Code: not known (not a git checkout)"
  return f"Code: commit {code['commit'][:12]}" + ("" if code.get("clean") else ", with uncommitted changes")


INTERLEAVE_LINES = {
    "steps": "Interleaved by step: every side's process alive at once, one timed step of each in "
             "turn (the order rotating).",
    "processes": "Interleaved by process: each side's round in a fresh process after the other's."}


def run_record(module: str, argv, load: float) -> dict:
  """What a run's results open with (``header_lines`` prints it): the CPU, the commit
  (``research.provenance.code_version``), the versions, the date, the command and the load
  at the start."""
  from research import provenance  # pylint: disable=import-outside-toplevel
  return {"cpu": timing.cpu_model(), "cpu_class": timing.cpu_class(), "code": provenance.code_version(ROOT), "cores": os.cpu_count(),
          "load_at_start": load, "versions": f"jax {jax.__version__}, python {platform.python_version()}",
          "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
          "command": f"python -m {module} " + " ".join(argv if argv is not None else sys.argv[1:]),
          "shapes": []}


def finish_run(results: dict, text: str, out: str) -> int:
  """The end of a run: the load then, the tables printed, and the JSON and tables written
  to ``out`` (if given, ``write_results``)."""
  results["load_at_end"] = os.getloadavg()[0]
  print(text)
  if out:
    write_results(results, out, text)
  return 0


def header_lines(results: dict) -> list[str]:
  """What a results table opens with: the CPU, the command, the commit and the load at the
  start."""
  klass = f", {results['cpu_class']}" if results.get("cpu_class") else ""  # older results record none
  return [f"CPU: {results['cpu']} ({results['cores']} cores{klass}); {results['versions']}", "",
          f"Command: `{results['command']}`", "", code_line(results.get("code")), "",
          f"Date: {results['date']}; 1-minute load average before starting: {results['load_at_start']:.2f}"]


def rounds_markdown(results: dict) -> str:
  """The whole step in separate processes (``--processes=separate``): a row per shape and arm."""
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
           for s in results["shapes"] for side in ("andrea_jax", "peer")
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


def parts_markdown(results: dict) -> str:
  """The parts in separate processes (``--measure=parts --processes=separate``) as a table per
  shape, the machine and command beside it."""
  lines = header_lines(results)
  for s in results["shapes"]:
    lines += ["", f"{s['shape']} ({s['batch']} x {s['seq']}), {s['rounds']} rounds "
              f"({s['good_rounds']} with both sides), each side in its own process, medians of "
              f"{s['reps']} reps a round:", "",
              "| row | ours (ms) | peer (ms) | peer / ours, median [range] | geometric mean [95 % CI] "
              "| runs per step | ours - peer per step (ms) |", "|---" * 7 + "|"]
    for r in s["rows"]:
      ci = (f"{r['ratio_mean']:.2f} [{r['ratio_ci95'][0]:.2f}, {r['ratio_ci95'][1]:.2f}]"
            + ("" if r["ratio_decided"] else ", too wide") if "ratio_ci95" in r else "n/a")
      lines.append(f"| {r['row']} | {r['ours_ms']:,.1f} | {r['peer_ms']:,.1f} | {r['ratio']:.2f} "
                   f"[{r['ratio_range'][0]:.2f}, {r['ratio_range'][1]:.2f}] | {ci} | {r['per_step']} "
                   f"| {r['gap_ms_per_step']:+,.0f} |")
    errors = {side: r[side] for r in s["per_round"] for side in ("ours", "peer") if "ms" not in r.get(side, {})}
    if errors:
      lines += ["", "Rounds without a side: " + "; ".join(f"{k}: {v}" for k, v in errors.items())]
  return "\n".join(lines) + "\n"

def parts_in_process_markdown(results: dict) -> str:
  """The parts in one process (``--measure=parts --processes=one``): a table per shape."""
  lines = header_lines(results)
  for s in results["shapes"]:
    lines += ["", f"{s['shape']} ({s['batch']} x {s['seq']}), both sides in this one process, "
              f"medians of {s['reps']} reps:", "",
              "| row | ours (ms) | peer (ms) | peer / ours |", "|---|---|---|---|"]
    lines += [f"| {r['row']} | {r['ours_ms']:,.1f} | {r['peer_ms']:,.1f} | {r['ratio']:.2f} |"
              for r in s["rows"]]
  return "\n".join(lines) + "\n"
