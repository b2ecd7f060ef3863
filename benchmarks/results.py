"""Where the training-step benchmark's results go: the machine they were measured on, the
JSON and its Markdown tables, and the guard that keeps figures from a busy machine (or a
``--force`` run) out of ``docs/``.
"""

from __future__ import annotations

import json
import os
import platform

import jax

from benchmarks import matmul_limit


def machine() -> str:
  d = jax.devices()[0]
  cpu = platform.processor() or platform.machine()
  return (f"{d.platform} ({d.device_kind}), {os.cpu_count()} cores ({cpu}), jax {jax.__version__}, "
          f"python {platform.python_version()}")


def _f(row: dict, key: str, fmt: str, suffix: str = "") -> str:
  return format(row[key], fmt) + suffix if key in row else "n/a"


def markdown(results: dict) -> str:
  """The results as Markdown tables, with the machine, the command and the load beside them."""
  lines = [f"Machine: {results['machine']}", "", f"Command: `{results['command']}`", "",
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


DOCS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs")


def writes_docs(path: str) -> bool:
  """Whether ``path`` lies in the repository's ``docs/`` folder (where published figures live)."""
  return bool(path) and os.path.abspath(path).startswith(os.path.abspath(DOCS_DIR) + os.sep)


def refusal(out: str, load_at_start: float, max_load: float, force: bool) -> str | None:
  """Why results may not go to ``out``, or None: docs/ takes figures from idle machines only."""
  if not writes_docs(out):
    return None
  if force:
    return (f"--force never writes into docs/: {out} is left as it is (write the results "
            f"elsewhere with --out, e.g. --out=/tmp/bench.json)")
  if load_at_start > max_load:
    return (f"the machine was busy before starting (1-minute load average {load_at_start:.2f} > "
            f"--max_load={max_load}): figures for docs/ must come from an idle machine; stop "
            f"the other jobs and wait for the load to fall, or pass --force to measure anyway "
            f"without writing docs/")
  return None


def write_results(results: dict, out: str, tables: str | None = None) -> None:
  """The JSON results, and their Markdown tables beside them (``<name>_tables.md``):
  ``tables``, or this module's ``markdown`` of them (``separate.py`` and ``components.py``
  pass their own)."""
  with open(out, "w", encoding="utf-8") as f:
    json.dump(results, f, indent=2)
  with open(os.path.splitext(out)[0] + "_tables.md", "w", encoding="utf-8") as f:
    f.write(markdown(results) if tables is None else tables)
