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

The code: the flags, their checks and the command are here; each mode's measurement is in
``modes.py``, one side built and timed (and the ``--child`` process) in ``sides.py``, the
rounds and their summary in ``rounds.py``.
"""

from __future__ import annotations

import os
import sys
import time

# JAX grows its GPU memory as needed instead of taking 75 % at start: on a GPU the peer's
# process must not find the device full, nor a failed variant starve the next one.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

from absl import app  # pylint: disable=wrong-import-position
from absl import flags  # pylint: disable=wrong-import-position
from absl import logging  # pylint: disable=wrong-import-position

from benchmarks import rounds  # pylint: disable=wrong-import-position
from benchmarks.modes import (  # pylint: disable=wrong-import-position
    in_this_process, one_process_parts, one_process_step, separate_parts, separate_step, variants)
from benchmarks.sides import child  # pylint: disable=wrong-import-position
# Re-exported: what callers of ``step.X`` used before these moved to modes.py and sides.py.
from benchmarks.modes import (  # pylint: disable=wrong-import-position
    NORM_VARIANTS as NORM_VARIANTS, bench_shape as bench_shape)
from benchmarks.sides import (  # pylint: disable=wrong-import-position
    child_argv as child_argv, measure_side as measure_side, run_child as run_child)

SIDES, CEILINGS = rounds.SIDES, rounds.CEILINGS
MEASURES = ("step", "parts", "ops", "unit_axis", "compile", "generate")
IN_THIS_PROCESS = ("ops", "unit_axis", "compile", "generate")


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
