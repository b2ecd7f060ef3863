"""One side of the step benchmark built and timed, and the fresh process that times it.

``build_side`` builds a side's step, ours (``ours.py``) or the peer (``peer.py``, mirroring
our model), ready to time; ``measure_side`` times it in this process (also
``benchmarks.gpu_check``'s, per variant). A parent starts ``python -m benchmarks.step
--child=SIDE`` (``child_argv``; ``run_child`` returns its ``RESULT <json>``), whose ``child``
times one side (``measure_side``), a library's matmul ceiling (``ceiling``) or the parts'
rows in that fresh process; with ``--serve``, ``serve`` answers one timed step per ``step``
line (the lockstep order: ``rounds.Live``).
"""

from __future__ import annotations

import dataclasses
import json
import sys

from absl import flags

from benchmarks import rounds
from benchmarks.rounds import CEILINGS, SIDES


def build_side(side: str, config, batch: int, seq: int, device: str = "auto",
               peer_backend: str = "auto") -> tuple:
  """One side's step, ready to time (``ours.Step``: ``run``, ``cfg``, ``compile_s``), or
  ``{"skipped": why}``; and what it ran on. The peer mirrors our model: the same shape, the
  padded vocabulary, bf16 autocast where our compute dtype is bf16, on CUDA where ``device``
  is a GPU (``auto``: where torch finds one)."""
  from benchmarks import ours, peer, shapes  # pylint: disable=import-outside-toplevel
  if side == "andrea_jax":
    return ours.ours_step(config, batch, seq), {}
  missing = peer.peer_available()
  if missing:
    return {"skipped": missing}, {}
  import torch  # pylint: disable=import-outside-toplevel
  gpu = device == "gpu" or (device == "auto" and torch.cuda.is_available())
  if gpu and not torch.cuda.is_available():
    return {"skipped": f"torch {torch.__version__} sees no CUDA device (a CPU build?)"}, {}
  cfg = shapes.model_config(config, seq, platform="gpu" if gpu else "cpu")
  cfg = dataclasses.replace(cfg, vocab_size=cfg.padded_vocab)  # the same matrix shapes as ours
  backend = peer_backend if peer_backend != "auto" else ("inductor" if gpu else "none")
  run = peer.peer_step(cfg, config.train, batch, seq, accelerator=gpu,
                       compile_backend=None if backend == "none" else backend,
                       autocast=cfg.compute_dtype in ("bfloat16", "float16"))
  return ours.Step(run, cfg, None), {"device": "cuda" if gpu else "cpu", "backend": backend,
                                     "torch": torch.__version__}


def measure_side(side: str, config, batch: int, seq: int, warmup: int, steps: int,
                 device: str = "auto", peer_backend: str = "auto") -> dict:
  """Build one side's step, run ``warmup`` untimed steps (a compile falls there), time
  ``steps`` (``timing.time_steps``): its figures (``timing.side_result``), tokens/s, the
  warm-up's seconds, the last loss and, for ours, the compile's seconds. What a child process
  of ``--processes=separate`` does, and ``benchmarks.gpu_check`` per variant."""
  from benchmarks import timing  # pylint: disable=import-outside-toplevel
  built, about = build_side(side, config, batch, seq, device, peer_backend)
  if isinstance(built, dict):
    return built
  last = {}
  warmup_s, timed = timing.time_steps(lambda: last.update(loss=built.run()), warmup, steps)
  row = {**timing.side_result(timed), **about, "warmup_s": warmup_s, **last}
  row["tokens_per_s"] = batch * seq / row["step_s"]
  if built.compile_s is not None:
    row["compile_s"] = built.compile_s
  return row


def serve(side: str, config, batch: int, seq: int, warmup: int, device: str, peer_backend: str,
          stdin=sys.stdin, stdout=sys.stdout) -> None:
  """The lockstep child: build and warm up one side's step, say ``READY``, then run one timed
  step for each ``step`` line on stdin (answering ``STEP {...}``) until ``end`` (answering
  ``RESULT {...}``, the round's figures); a skipped side answers ``RESULT`` at once."""
  from benchmarks import timing  # pylint: disable=import-outside-toplevel
  built, _ = build_side(side, config, batch, seq, device, peer_backend)
  if isinstance(built, dict):
    print("RESULT " + json.dumps(built), file=stdout, flush=True)
    return
  for _ in range(warmup):
    built.run()
  print("READY", file=stdout, flush=True)
  steps = []
  for line in stdin:
    if line.strip() == "step":
      steps.append(timing.timed(built.run))
      print("STEP " + json.dumps(steps[-1]), file=stdout, flush=True)
    elif line.strip() == "end":
      break
  print("RESULT " + json.dumps(timing.side_result(steps) if steps else {"error": "no steps timed"}),
        file=stdout, flush=True)


def ceiling(library: str, cfg, batch: int, seq: int) -> dict:
  """One library's ceiling over the step's weight matmuls (``matmul_limit.library_ceiling``)."""
  from benchmarks import matmul_limit, peer  # pylint: disable=import-outside-toplevel
  missing = peer.peer_available() if library == "torch" else None
  if missing:
    return {"skipped": missing}
  return {"flops_per_s": matmul_limit.library_ceiling(cfg, batch, seq, library)}


def child(fv: flags.FlagValues) -> None:
  """``--child``: one side (or a ceiling, or the parts' rows) timed in this fresh process,
  printed as ``RESULT <json>``; with ``--serve``, one step at a time."""
  from benchmarks import parts, shapes  # pylint: disable=import-outside-toplevel
  (name,) = fv.shapes
  config = shapes.load_config(name, fv.settings)
  if fv.serve:
    serve(fv.child, config, fv.batch, fv.seq, fv.warmup, fv.device, fv.peer_backend)
    return
  if fv.child in CEILINGS:
    got = ceiling(fv.child[len("ceiling_"):], shapes.model_config(config, fv.seq), fv.batch, fv.seq)
  elif fv.measure == "parts":
    got = parts.side_round(parts.SIDES[SIDES.index(fv.child)], config, fv.batch, fv.seq, fv.steps,
                           fv.warmup)
  else:
    got = measure_side(fv.child, config, fv.batch, fv.seq, fv.warmup, fv.steps, fv.device,
                       fv.peer_backend)
  print("RESULT " + json.dumps(got), flush=True)


def child_argv(side: str, shape: str, batch: int, seq: int, warmup: int, steps: int,
               settings: str = "", device: str = "auto", peer_backend: str = "auto",
               measure: str = "step") -> list[str]:
  """The command line of one side's fresh process (``--child``)."""
  return [sys.executable, "-m", "benchmarks.step", f"--child={side}", f"--shapes={shape}",
          f"--batch={batch}", f"--seq={seq}", f"--warmup={warmup}", f"--steps={steps}",
          f"--settings={settings}", f"--device={device}", f"--peer_backend={peer_backend}",
          f"--measure={measure}"]


def run_child(side: str, shape: str, batch: int, seq: int, warmup: int, steps: int,
              preload: str = "", settings: str = "", device: str = "auto",
              peer_backend: str = "auto", measure: str = "step") -> dict:
  """``--child`` in a fresh process (``preload`` in ``LD_PRELOAD``, if given): its result,
  or the error it ended with."""
  return rounds.result_of(child_argv(side, shape, batch, seq, warmup, steps, settings, device,
                                     peer_backend, measure), preload)
