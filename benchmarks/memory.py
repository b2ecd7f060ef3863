"""Peak memory of one side of the training-step benchmark, each in a fresh process."""

from __future__ import annotations

import os
import subprocess
import sys


def peak_rss(name: str, batch: int, seq: int, who: str) -> float:
  """Peak resident memory (MB) of a fresh process running three steps of one side (Linux)."""
  code = ("from benchmarks import ours, peer, shapes; "
          f"c = shapes.load_config({name!r}); ")
  code += (f"run, cfg = ours.ours_step(c, {batch}, {seq}); " if who == "andrea_jax" else
           f"cfg = shapes.model_config(c, {seq}); "
           f"run = peer.peer_step(cfg, c.train, {batch}, {seq}, False); ")
  # VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the (large) parent across exec.
  code += ("[run() for _ in range(3)]; "
           "print([l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')][0])")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  return int(out.stdout.strip().splitlines()[-1]) / 1024
