"""The training step's benchmark: andrea_jax's step against the Hugging Face GPT-2 peer, one
command, its modes as flags.

  pip install -r requirements-bench.txt
  # The whole step, each side in its own fresh process, alternating (what docs/ publishes):
  python -m benchmarks.step --shapes=andrea120m --rounds=25 --warmup=1 --steps=3 \\
      --out=results/benchmarks/performance_separate_120m25.json
  # The same in one process, beside the bare model step, with the matmul limit and memory:
  python -m benchmarks.step --processes=one --shapes=tiny,andrea12m,andrea120m --memory
  # Where the step's time goes: each component of a block and the step's two parts:
  python -m benchmarks.step --measure=parts --shapes=tiny,andrea12m,andrea120m --rounds=8 --steps=3
  python -m benchmarks.step --measure=ops --shapes=andrea12m --batch=4   # XLA's own ops, ranked
  python -m benchmarks.step --measure=unit_axis --shapes=andrea120m       # reductions on (1, T, D)
  python -m benchmarks.step --measure=compile --shapes=andrea12m --seq=256 --compile_depths=6,12,24
  python -m benchmarks.step --measure=generate --shapes=tiny              # KV-cache generation
  python -m benchmarks.step --shapes=tiny --norm_variants   # each norm switch against pre-LN
  # On a GPU (python -m benchmarks.gpu_check runs its check through this module):
  python -m benchmarks.step --device=gpu --shapes=andrea120m --batch=64 --rounds=1

The sides: ours is ``step.train_step`` with ``step.make_optimizer``, compiled, donated state
(``ours.py``); the peer is ``transformers.GPT2LMHeadModel`` of the same shape with
``torch.optim.AdamW`` and ``clip_grad_norm_`` (``peer.py``): eager float32 on a CPU,
``torch.compile`` (``--peer_backend``) with bf16 autocast on a GPU, or wherever our compute
dtype is bf16. The shapes are ``shapes.py``'s; ``--settings`` and ``--variant`` add config
settings.

The modes:

- ``--processes=separate`` (the default): per shape, ``--rounds`` rounds, each starting one
  fresh Python process per side (this module's ``--child`` mode), alternating which goes
  first, the rounds summarised with their spread and the ratio paired by round, with its 95 %
  t interval (``rounds.py``); ``--allocators``, ``--variant`` and ``--interleave=steps`` add
  arms and the lockstep order, ``--limit`` the FMA peak and each library's matmul ceiling.
- ``--processes=one``: both sides in this process, taking turns after warm-up, in two passes
  (ours against the bare model step, whose ratio is the step's overhead, then ours against
  the peer), with the matmul limit measured in the same run (``matmul_limit.py``) and, with
  ``--memory``, each side's peak memory from a fresh process. PyTorch's spinning threads and
  the shared heap slow whichever side runs next (issue 31): use it to look, not to publish.
- ``--measure=step`` (the default) times the whole step; ``parts`` each component of one
  block and the step's two parts (``parts.py``), in either process mode; ``ops``,
  ``unit_axis``, ``compile`` and ``generate`` run in this process (``--processes`` aside).
- ``--device``: ``cpu`` keeps JAX (and the peer) on the CPU, ``gpu`` asks for a GPU and
  refuses without one, ``auto`` takes what JAX finds.

Honest figures: the 1-minute load average before starting is recorded, and a run whose load
exceeds ``--max_load`` refuses to write into ``results/benchmarks/`` (``--force`` measures
anyway, never into it; ``results.refusal``); results name the commit that ran.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import sys
import time

# JAX grows its GPU memory as needed instead of taking 75 % at start: on a GPU the peer's
# process must not find the device full, nor a failed variant starve the next one.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

from absl import app  # pylint: disable=wrong-import-position
from absl import flags  # pylint: disable=wrong-import-position
from absl import logging  # pylint: disable=wrong-import-position

from benchmarks import rounds  # pylint: disable=wrong-import-position

SIDES, CEILINGS = rounds.SIDES, rounds.CEILINGS
MEASURES = ("step", "parts", "ops", "unit_axis", "compile", "generate")
IN_THIS_PROCESS = ("ops", "unit_axis", "compile", "generate")
GENERATE = (16, 96)  # prompt and new tokens of --measure=generate


def define_flags(fv: flags.FlagValues = flags.FLAGS) -> None:
  """The command's flags: defined when it runs (or by ``flag_values``), so that importing
  the module defines none."""
  d = dict(flag_values=fv)
  flags.DEFINE_enum("processes", "separate", ["separate", "one"], "separate: each side in "
                    "its own fresh process, alternating, --rounds rounds; one: both in this "
                    "process, taking turns (to look, not to publish)", **d)
  flags.DEFINE_enum("measure", "step", list(MEASURES), "step: the whole training step; parts: "
                    "each component of one block and the step's two parts; ops: XLA's ops of "
                    "our forward + backward, ranked; unit_axis: reductions on (1, T, D) against "
                    "(T, D); compile: compile seconds against --compile_depths; generate: "
                    "KV-cache generation", **d)
  flags.DEFINE_enum("device", "auto", ["auto", "cpu", "gpu"], "cpu: JAX and the peer on the "
                    "CPU; gpu: on the GPU (refused without one); auto: what JAX finds", **d)
  flags.DEFINE_list("shapes", ["tiny", "andrea12m", "andrea120m"], "named configs to time", **d)
  flags.DEFINE_integer("batch", 0, "sequences per step (0: the shape's own, benchmarks/shapes.py)",
                       lower_bound=0, **d)
  flags.DEFINE_integer("seq", 0, "tokens per sequence (0: the shape's own)", lower_bound=0, **d)
  flags.DEFINE_integer("warmup", 2, "untimed steps (or calls) before the timed ones, per side "
                       "and process", lower_bound=0, **d)
  flags.DEFINE_integer("steps", 5, "timed steps per side and round (one process: per side; "
                       "parts: timed calls per row)", lower_bound=1, **d)
  flags.DEFINE_integer("rounds", 7, "with --processes=separate: rounds per shape", lower_bound=1, **d)
  flags.DEFINE_string("settings", "", "config settings for both sides, e.g. "
                      "'model.remat_policy=full' (benchmarks/shapes.py: load_config)", **d)
  flags.DEFINE_multi_string("variant", [], "NAME:SETTINGS, e.g. noremat:model.remat_policy=none "
                            "(repeatable; --processes=separate): an arm per allocator in which "
                            "only ours runs, with these settings added, its ratio paired with "
                            "that allocator's peer and its time with the default arm's", **d)
  flags.DEFINE_bool("norm_variants", False, "add a --variant per norm type and placement "
                    "(NORM_VARIANTS: rmsnorm, dyt, post, peri, reordered, deepnorm, mix, lns), "
                    "each timed beside the shape's own pre-LN LayerNorm in the same run", **d)
  flags.DEFINE_list("allocators", ["system"], "with --processes=separate: 'system', 'auto' (the "
                    "default a command preloads), 'tcmalloc', 'mimalloc' (the wheel's) or a "
                    "library path; each round runs both sides under each (LD_PRELOAD), rotating the "
                    "order, a row per allocator", **d)
  flags.DEFINE_enum("interleave", "processes", ["processes", "steps"], "with --processes="
                    "separate: processes: one side's whole round after the other's; steps: "
                    "every side's process alive at once, their timed steps taking turns", **d)
  flags.DEFINE_float("settle_s", 2.0, "pause between two processes", lower_bound=0, **d)
  flags.DEFINE_float("step_settle_s", None, "pause before each timed step where the sides take "
                     "turns step by step (default: 0.5 s in one process, 0.2 s with "
                     "--interleave=steps)", lower_bound=0, **d)
  flags.DEFINE_bool("limit", True, "measure the machine's limits in the same run (CPU only): "
                    "separate: the FMA peak and each library's ceiling in its own process; one: "
                    "the step's matmuls in both libraries (--nolimit: skip them)", **d)
  flags.DEFINE_bool("memory", False, "with --processes=one: each side's peak memory, from a "
                    "fresh process (separate processes always report it)", **d)
  flags.DEFINE_list("compile_depths", ["6", "12", "24"], "with --measure=compile: layer counts", **d)
  flags.DEFINE_integer("top", 25, "with --measure=ops: ops listed", lower_bound=1, **d)
  flags.DEFINE_string("peer_backend", "auto", "the peer's torch.compile backend: auto (inductor "
                      "on a GPU, none on a CPU), none (eager), or a backend (inductor, eager)", **d)
  flags.DEFINE_float("max_spread", 0.10, "an interval (or rounds' spread) wider than this share "
                     "of its mean is 'too wide' (or 'over the limit')", **d)
  flags.DEFINE_float("max_load", 0.5, "refuse to write into results/benchmarks/ when the "
                     "1-minute load average before starting is above this", **d)
  flags.DEFINE_bool("force", False, "measure on a busy machine (never into results/benchmarks/)", **d)
  flags.DEFINE_string("out", "", "write the results JSON here and its tables beside it "
                      "(<name>_tables.md)", **d)
  flags.DEFINE_enum("child", None, list(SIDES + CEILINGS), "internal: time one side in this "
                    "process and print RESULT <json> (what --processes=separate starts)", **d)
  flags.DEFINE_bool("serve", False, "internal, with --child: one timed step per 'step' line on "
                    "stdin (--interleave=steps)", **d)


def flag_values(args: list[str]) -> flags.FlagValues:
  """The command's flags parsed from ``args`` (the command line without the program) into
  fresh FlagValues, for ``main(..., fv)`` (the tests call it so)."""
  fv = flags.FlagValues()
  define_flags(fv)
  fv(["benchmarks.step", *args])
  return fv


# The norm switches of issue 59 as variants of ours, each against the default pre-LN LayerNorm.
NORM_VARIANTS = {"rmsnorm": "model.norm_type=rmsnorm", "dyt": "model.norm_type=dyt",
                 "post": "model.norm=post", "peri": "model.norm=peri",
                 "reordered": "model.norm=reordered", "deepnorm": "model.norm=deepnorm",
                 "mix": "model.norm=mix", "lns": "model.norm_depth_scaling=True"}


def variants(fv: flags.FlagValues) -> list[str]:
  """``--variant``'s NAME:SETTINGS, then ``NORM_VARIANTS`` under ``--norm_variants``."""
  extra = [f"{name}:{settings}" for name, settings in NORM_VARIANTS.items()] if fv.norm_variants else []
  return list(fv.variant) + extra


def check(fv: flags.FlagValues) -> None:
  """Refuse, before anything runs, flags the chosen mode would ignore and values that name
  nothing (``app.UsageError`` or the config's error: one line)."""
  from benchmarks import shapes  # pylint: disable=import-outside-toplevel
  separate_only = [name for name in ("variant", "norm_variants", "allocators", "interleave")
                   if fv[name].present]
  if separate_only and (fv.processes != "separate" or fv.measure != "step"):
    raise app.UsageError(f"--{separate_only[0]} arms the whole step in separate processes: "
                         f"use it with --processes=separate --measure=step")
  if fv.memory and (fv.processes != "one" or fv.measure != "step"):
    raise app.UsageError("--memory is for --processes=one --measure=step (separate processes "
                         "report each side's peak memory anyway)")
  if fv.out and fv.measure in ("ops", "unit_axis"):
    raise app.UsageError(f"--measure={fv.measure} prints its table and writes nothing: drop --out")
  if not fv.shapes:
    raise app.UsageError("--shapes is empty: name one or more configs, e.g. --shapes=tiny")
  try:
    rounds.allocator_paths(",".join(fv.allocators))
    arms = rounds.variant_settings(variants(fv))
  except ValueError as e:
    raise app.UsageError(str(e)) from None
  for name in fv.shapes:  # a bad name or setting fails now, not an hour in
    for extra in arms.values():
      shapes.model_config(shapes.load_config(name, ",".join(filter(None, (fv.settings, extra)))), 1)


def command(fv: flags.FlagValues) -> list[str]:
  """The command's own flags this run was given, as a command line (what its results record)."""
  module = fv.find_module_defining_flag("processes")
  return [arg for flag in fv.get_flags_for_module(module) if flag.present
          for arg in flag.serialize().split("\n")]


def size(name: str, batch: int, seq: int) -> tuple[int, int]:
  """A shape's batch and sequence length: the flags' where given, else the shape's own."""
  from benchmarks import shapes  # pylint: disable=import-outside-toplevel
  b, t = shapes.SHAPE_DEFAULTS.get(name, (16, 128))
  return batch or b, seq or t


def use_device(device: str) -> str:
  """Put JAX on ``device`` (``cpu`` before any computation; ``gpu`` checked): its platform."""
  import jax  # pylint: disable=import-outside-toplevel
  if device == "cpu":
    jax.config.update("jax_platforms", "cpu")
  platform = jax.devices()[0].platform
  if device == "gpu" and platform != "gpu":
    raise app.UsageError(f"--device=gpu: JAX sees no GPU here (it sees {platform}); run on the GPU "
                         f"machine with jax[cuda12] installed, or use --device=cpu")
  return platform


# ----------------------------------------------------------------------------- one side


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


# ----------------------------------------------------------------------------- separate processes


def separate_step(fv: flags.FlagValues, out: dict, sleep=time.sleep) -> dict:
  """``--processes=separate --measure=step``: per shape ``--rounds`` rounds of every arm's
  sides, each in a fresh process; a row per shape and arm (``rounds.summarise``)."""
  from benchmarks import matmul_limit  # pylint: disable=import-outside-toplevel
  setup = rounds.arms(rounds.allocator_paths(",".join(fv.allocators)),
                      rounds.variant_settings(variants(fv)), fv.settings)
  out.update({"arms": {a: arm._asdict() for a, arm in setup.items()}, "interleave": fv.interleave})
  limit = fv.limit and out["platform"] == "cpu"
  if limit:
    out["fma"] = matmul_limit.fma_peak()
  for name in fv.shapes:
    batch, seq = size(name, fv.batch, fv.seq)
    got = arm_rounds(fv, setup, name, batch, seq, sleep)
    limits = (rounds.shape_limits(name, batch, seq, out["fma"], run=lambda kind, *a: run_child(
        kind, *a, device=fv.device)) if limit else None)
    ab = rounds.arm_ab(got, base=next(iter(setup)))
    for a in setup:
      row = {"shape": name, "arm": a, "batch": batch, "seq": seq, "per_round": got[a],
             **rounds.summarise(got[a], batch * seq, fv.max_spread),
             **({"arm_ab": {a: ab[a]}} if a in ab else {})}
      out["shapes"].append(rounds.with_limits(row, limits) if limits else row)
  return out


def arm_rounds(fv, setup: dict, name: str, batch: int, seq: int, sleep) -> dict[str, list[dict]]:
  """Every arm's rounds at one shape: {arm: [{side: its result}, ...]}; a variant of ours
  shares its allocator's peer of the same round."""
  runs = tuple((a, side) for a in setup for side in SIDES if side != "peer" or setup[a].peer)
  one = lambda r: run_child(r[1], name, batch, seq, fv.warmup, fv.steps, setup[r[0]].preload,
                            setup[r[0]].settings, fv.device, fv.peer_backend)
  say = lambda i, rnd: print(f"{name} round {i + 1}/{fv.rounds}: " + ", ".join(
      f"{s}/{a} {rnd[a, s]['step_s']:.3f} s" if "step_s" in rnd[a, s] else f"{s}/{a} {rnd[a, s]}"
      for a, s in runs), flush=True)
  if fv.interleave == "processes":
    got = rounds.process_rounds(runs, one, fv.rounds, fv.settle_s, sleep, say)
  else:
    start = lambda r: rounds.Live(child_argv(r[1], name, batch, seq, fv.warmup, 1, setup[r[0]].settings,
                                             fv.device, fv.peer_backend) + ["--serve"], setup[r[0]].preload)
    step_settle = 0.2 if fv.step_settle_s is None else fv.step_settle_s
    got = []
    for i in range(fv.rounds):
      got.append(rounds.lockstep_round(runs, start, fv.steps, i, step_settle, sleep))
      sleep(fv.settle_s)
      say(i, got[-1])
  out = {a: [] for a in setup}
  for rnd in got:
    by_arm = {a: {s: rnd[a, s] for (arm, s) in runs if arm == a} for a in setup}
    for a in setup:
      if not setup[a].peer:  # a variant of ours: paired with its allocator's peer, same round
        base = a.rsplit("+", 1)[0]
        by_arm[a]["peer"] = {**by_arm[base]["peer"], "shared_with": base}
      out[a].append(by_arm[a])
  return out


def separate_parts(fv: flags.FlagValues, out: dict, sleep=time.sleep) -> dict:
  """``--processes=separate --measure=parts``: per shape, each side's rows in a fresh process
  of its own, alternating; per row the ratio paired by round (``parts.summary``)."""
  from benchmarks import parts, shapes  # pylint: disable=import-outside-toplevel
  for name in fv.shapes:
    batch, seq = size(name, fv.batch, fv.seq)
    cfg = shapes.model_config(shapes.load_config(name, fv.settings), seq)
    one = lambda side, name=name, batch=batch, seq=seq: run_child(
        SIDES[parts.SIDES.index(side)], name, batch, seq, fv.warmup, fv.steps, settings=fv.settings,
        device=fv.device, measure="parts")
    say = lambda i, rnd, name=name: print(f"{name} round {i + 1}/{fv.rounds}: " + ", ".join(
        f"{side} {sum(rnd[side]['ms'].values()):,.0f} ms over all rows" if "ms" in rnd[side]
        else f"{side} {rnd[side]}" for side in parts.SIDES), flush=True)
    got = rounds.process_rounds(parts.SIDES, one, fv.rounds, fv.settle_s, sleep, say)
    out["shapes"].append({"shape": name, "batch": batch, "seq": seq, "reps": fv.steps,
                          "rounds": len(got), "per_round": got,
                          "good_rounds": sum(all("ms" in r.get(s, {}) for s in parts.SIDES) for r in got),
                          "rows": parts.summary(got, cfg, fv.max_spread)})
  return out


# ----------------------------------------------------------------------------- one process


def one_process_step(fv: flags.FlagValues, out: dict, loadavg=os.getloadavg,
                     clock=time.perf_counter, sleep=time.sleep) -> dict:
  """``--processes=one --measure=step``: per shape, ``bench_shape``, and with ``--memory``
  each side's peak memory from a fresh process (``run_child``)."""
  out.update({"machine": _machine(), "train": []})
  for name in fv.shapes:
    batch, seq = size(name, fv.batch, fv.seq)
    settle = 0.5 if fv.step_settle_s is None else fv.step_settle_s
    row = bench_shape(name, batch, seq, fv.steps, fv.warmup, fv.settings, fv.device,
                      fv.peer_backend, fv.limit and out["platform"] == "cpu", settle, loadavg,
                      clock, sleep)
    if fv.memory:
      for side, key in (("andrea_jax", "andrea_jax_rss_mb"), ("peer", "peer_rss_mb")):
        got = run_child(side, name, batch, seq, 1, 2, settings=fv.settings, device=fv.device,
                        peer_backend=fv.peer_backend)
        if "peak_rss_mb" in got:
          row[key] = got["peak_rss_mb"]
    out["train"].append(row)
    print(json.dumps(row), flush=True)
  return out


def bench_shape(name: str, batch: int, seq: int, reps: int, warmup: int, settings: str = "",
                device: str = "auto", peer_backend: str = "auto", limit: bool = True,
                settle_s: float = 0.5, loadavg=os.getloadavg, clock=time.perf_counter,
                sleep=time.sleep) -> dict:
  """One shape in two interleaved passes: our step against the model-only step (the step's
  overhead, peer not running), then our step against the peer (the ratio); then the
  matmul limit of this shape on this machine (``matmul_limit``)."""
  import jax  # pylint: disable=import-outside-toplevel
  from andrea_jax import metrics, model  # pylint: disable=import-outside-toplevel
  from benchmarks import matmul_limit as limit_lib  # pylint: disable=import-outside-toplevel
  from benchmarks import ours, shapes, timing  # pylint: disable=import-outside-toplevel
  config = shapes.load_config(name, settings)
  mine = ours.ours_step(config, batch, seq)
  bare = ours.ours_step(config, batch, seq, bare=True)
  cfg = mine.cfg
  before = timing.load_snapshot(loadavg)
  own = timing.interleave({"andrea_jax": mine.run, "model_only": bare.run}, reps, warmup,
                          settle_s=settle_s, clock=clock, sleep=sleep)
  del bare  # its state (parameters and both moments) is not needed any more
  times = {"model_only": own["model_only"], "andrea_jax_beside_model_only": own["andrea_jax"]}
  theirs, _ = build_side("peer", config, batch, seq, device, peer_backend)
  if not isinstance(theirs, dict):
    times.update(timing.interleave({"andrea_jax": mine.run, "peer": theirs.run}, reps, warmup,
                                   settle_s=settle_s, clock=clock, sleep=sleep))
  else:
    times["andrea_jax"] = own["andrea_jax"]
  del mine
  row = {"shape": name, "batch": batch, "seq": seq, "params": model.count_params(cfg),
         "compute_dtype": cfg.compute_dtype, "attention_impl": cfg.attention_impl,
         **timing.load_between(before, timing.load_snapshot(loadavg)),
         **timing.speed_fields(times, batch * seq)}
  if limit:
    got = limit_lib.matmul_limit(cfg, batch, seq, reps, warmup, torch_too="peer" in times,
                                 clock=clock, sleep=sleep)
    row.update({**got, **limit_lib.limit_fields(times, batch * seq, got, model.flops_per_token(cfg, seq),
                                                model.flops_per_token(cfg, seq, causal=True))})
  if isinstance(theirs, dict):
    row["peer_missing"] = theirs["skipped"]
  peak = metrics.peak_flops(jax.devices()[0], model.compute_dtype(cfg))
  for who in ("andrea_jax", "model_only", "peer"):
    if peak and f"{who}_tokens_per_s" in row:
      row[f"{who}_mfu"] = row[f"{who}_tokens_per_s"] * model.flops_per_token(cfg, seq) / peak
  return row


def one_process_parts(fv: flags.FlagValues, out: dict) -> dict:
  """``--processes=one --measure=parts``: every row, both sides in this process."""
  from andrea_jax import step as step_lib  # pylint: disable=import-outside-toplevel
  from benchmarks import parts, shapes  # pylint: disable=import-outside-toplevel
  settle = 0.5 if fv.step_settle_s is None else fv.step_settle_s
  for name in fv.shapes:
    batch, seq = size(name, fv.batch, fv.seq)
    config = shapes.load_config(name, fv.settings)
    rows = parts.in_process(shapes.model_config(config, seq), batch, seq,
                            step_lib.TrainConfig(**config.train), fv.steps, settle)
    out["shapes"].append({"shape": name, "batch": batch, "seq": seq, "reps": fv.steps, "rows": rows})
  return out


def bench_generate(name: str, prompt_len: int, new_tokens: int, reps: int) -> dict:
  """KV-cache generation of ``new_tokens`` after a ``prompt_len`` prompt: ours against
  ``transformers``' ``generate``, greedy, tokens/s."""
  import jax  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel
  from andrea_jax import model, sample  # pylint: disable=import-outside-toplevel
  from benchmarks import peer, shapes, timing  # pylint: disable=import-outside-toplevel
  cfg = shapes.model_config(shapes.load_config(name), prompt_len + new_tokens)
  params = model.init_params(cfg, jax.random.key(0))
  prompt = np.random.default_rng(0).integers(0, cfg.vocab_size, (1, prompt_len), np.int32)
  fns = {"andrea_jax": lambda: np.asarray(sample.generate(params, cfg, prompt, new_tokens,
                                                          jax.random.key(0), temperature=0.0))}
  if peer.peer_available() is None:
    import torch  # pylint: disable=import-outside-toplevel
    net = peer.peer_model(cfg).eval()
    ids = torch.from_numpy(prompt).long()

    def theirs():
      with torch.no_grad():
        return net.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                            do_sample=False, use_cache=True, pad_token_id=0)

    fns["peer"] = theirs
  times = timing.interleave(fns, reps, 1)
  row = {"shape": name, "prompt": prompt_len, "new_tokens": new_tokens}
  for who, ts in times.items():
    row[f"{who}_tokens_per_s"] = new_tokens / statistics.median(ts)
  if "peer" in times:
    row["ratio"] = row["andrea_jax_tokens_per_s"] / row["peer_tokens_per_s"]
  return row


def in_this_process(fv: flags.FlagValues, out: dict) -> dict | None:
  """``--measure`` ops, unit_axis (printed), compile or generate (rows in ``out``)."""
  from benchmarks import ours, parts, shapes  # pylint: disable=import-outside-toplevel
  out.update({"machine": _machine(), "train": [], "compile": [], "generate": []})
  for name in fv.shapes:
    batch, seq = size(name, fv.batch, fv.seq)
    config = shapes.load_config(name, fv.settings)
    if fv.measure == "ops":
      print("\n".join(parts.ranked_ops(shapes.model_config(config, seq), batch, seq, fv.top)),
            flush=True)
    elif fv.measure == "unit_axis":
      d = shapes.model_config(config, seq).d_model
      print("\n".join(parts.unit_axis(batch, seq, d, max(fv.steps, 20))), flush=True)
    elif fv.measure == "compile":
      for depth in fv.compile_depths:
        out["compile"].append({"shape": name, "n_layer": int(depth),
                               "scan_s": ours.compile_seconds(config, int(depth), seq, True),
                               "unrolled_s": ours.compile_seconds(config, int(depth), seq, False)})
        print(json.dumps(out["compile"][-1]), flush=True)
    else:
      out["generate"].append(bench_generate(name, *GENERATE, fv.steps))
      print(json.dumps(out["generate"][-1]), flush=True)
  return None if fv.measure in ("ops", "unit_axis") else out


def _machine() -> str:
  from benchmarks import results  # pylint: disable=import-outside-toplevel
  return results.machine()


# ----------------------------------------------------------------------------- the command


def measure(fv: flags.FlagValues, loadavg=os.getloadavg, clock=time.perf_counter,
            sleep=time.sleep) -> int:
  """The run a parent process makes: the guard, then the mode's measurement and its tables."""
  from benchmarks import results  # pylint: disable=import-outside-toplevel
  load = loadavg()[0]
  why = results.refusal(fv.out, load, fv.max_load, fv.force)
  if why:
    raise app.UsageError(why)
  if fv.measure == "ops":  # read when the CPU backend starts, so before the first computation
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + " --xla_cpu_enable_xprof_traceme=true").strip()
  out = {**results.run_record("benchmarks.step", command(fv), load),
         "platform": use_device(fv.device), "processes": fv.processes, "measure": fv.measure}
  print(f"1-minute load average before starting: {load:.2f}", flush=True)
  if fv.measure in IN_THIS_PROCESS:
    got = in_this_process(fv, out)
    return 0 if got is None else results.finish_run(got, results.markdown(got), fv.out)
  if fv.measure == "parts":
    if fv.processes == "one":
      return results.finish_run(one_process_parts(fv, out), results.parts_in_process_markdown(out), fv.out)
    return results.finish_run(separate_parts(fv, out, sleep), results.parts_markdown(out), fv.out)
  if fv.processes == "one":
    got = one_process_step(fv, out, loadavg, clock, sleep)
    return results.finish_run(got, results.markdown(got), fv.out)
  return results.finish_run(separate_step(fv, out, sleep), results.rounds_markdown(out), fv.out)


def main(argv: list[str], fv: flags.FlagValues = flags.FLAGS, loadavg=os.getloadavg,
         clock=time.perf_counter, sleep=time.sleep) -> int:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments {argv[1:]}; every setting is a --flag")
  if "verbosity" in fv and not fv["verbosity"].present:
    logging.set_verbosity(logging.WARNING)  # JAX logs every backend it could not start at INFO
  if fv.child:
    use_device(fv.device)
    child(fv)
    return 0
  check(fv)
  try:
    return measure(fv, loadavg, clock, sleep)
  except KeyboardInterrupt:  # the children, in our process group, got the same Ctrl-C
    print("interrupted: nothing written (--out is written only when every shape is done)",
          file=sys.stderr, flush=True)
    return 130


if __name__ == "__main__":
  define_flags()
  from experiments import cli  # pylint: disable=wrong-import-position
  cli.run(main)
