"""The README's quick start, run as a newcomer runs it, with what it printed and took.

  python -m benchmarks.quickstart                       # writes docs/quickstart.json
  python -m benchmarks.quickstart --out=/tmp/qs.json    # anywhere else

Runs ``python -m experiments.run --config=tiny`` in a fresh, empty directory (so the data
cache is cold: corpus reading, tokenizer training and token shards are in the time), with
stdout a pipe, as the README's command runs. Records the command's wall time, the 1-minute
load average before and after, the machine, everything it printed and its
``summary.json``. The README's quick-start figures and printed lines are checked against
this file (``tests/test_cli.py``); rerun it on an idle machine to refresh them.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

from benchmarks.train_step import machine

REPO = pathlib.Path(__file__).resolve().parents[1]
COMMAND = ["python", "-m", "experiments.run", "--config=tiny"]


def run_quickstart(cwd: str) -> dict:
  """The README's command in ``cwd``: its output, wall time, load and summary."""
  env = {**os.environ, "PYTHONPATH": str(REPO)}
  load_before, start = os.getloadavg()[0], time.perf_counter()
  done = subprocess.run([sys.executable, *COMMAND[1:]], cwd=cwd, env=env, text=True,
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
  wall = time.perf_counter() - start
  if done.returncode:
    raise SystemExit(f"error: the quick start exited with {done.returncode}:\n{done.stdout}")
  summary = json.loads((pathlib.Path(cwd) / "runs" / "tiny" / "summary.json").read_text())
  return {"command": " ".join(COMMAND), "machine": machine(),
          "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
          "load_before": load_before, "load_after": os.getloadavg()[0], "wall_s": wall,
          "output": done.stdout, "summary": summary}


def main(argv=None) -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--out", default=str(REPO / "docs" / "quickstart.json"))
  args = p.parse_args(argv)
  with tempfile.TemporaryDirectory() as tmp:
    result = run_quickstart(tmp)
  with open(args.out, "w", encoding="utf-8") as f:
    json.dump(result, f, indent=2)
  print(f"{result['wall_s']:.0f} s (load {result['load_before']:.2f} -> "
        f"{result['load_after']:.2f}); wrote {args.out}")


if __name__ == "__main__":
  main()
