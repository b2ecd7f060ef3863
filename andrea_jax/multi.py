"""A group: many models of one architecture trained in one program, by the engine of ``train.py``.

The members share the config (shape, schedule shape, batch size, steps) and differ in
their peak learning rate, their initialisation seed and their batch order. Their states
are stacked on a leading member axis ``N``; one jitted program runs ``step.train_step``
over them: under ``jax.vmap`` on accelerators, ``lax.map`` (a compiled loop over them) on
CPUs, where XLA's batched matmuls are slow (``resolve_member_axis``). What sets a member
apart:

- its learning rate: the optimizer is ``step.make_optimizer`` with a peak rate of 1
  (under muP with its per-parameter factors, relative to the peak), followed by
  ``optax.inject_hyperparams(optax.scale)`` holding the member's rate in its optimizer
  state. Warmup-cosine is linear in the peak, and AdamW's decoupled decay is scaled by
  the rate, so this is the member's own schedule (up to float rounding);
- its seeds: ``jax.random.key(seed)`` initialises it, and the same seed keys its dropout
  (``step.dropout_key``; a model with ``dropout > 0``); its batches are
  ``loader.batch_at(step)`` with its own ``batch_seed`` (members sharing one share batches);
- its divergence: a member diverges as a single run does (``step.py``) and stays at its
  last finite state, bit for bit, while the others go on.

The step is a single run's: ``step.train_step`` with the config's ``train.z_loss`` (the
members' metrics report it apart, as a run's do), on the model ``cfg`` describes
(``qk_norm``, muP). Everything else is ``train.run``'s (and its ``loop.train_loop``'s): the
workdir's lock and resume rules, signals, logging, evaluation, diagnostics, checkpoints
(the stacked state; rerunning the same call resumes from the newest, e.g. after a
``kill -9``) and summaries. The group's workdir holds
``config.json``, ``members.json``, ``summary.json`` (the group's) and ``checkpoints/``,
and one directory per member with the files of a single run: ``metrics.jsonl``,
``diagnostics.jsonl``, ``summary.json`` and ``loss.png``.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from andrea_jax import config as config_lib
from andrea_jax import errors
from andrea_jax import files
from andrea_jax import members as members_lib
from andrea_jax import model
from andrea_jax import resume as resume_lib
from andrea_jax import schedule as schedule_lib
from andrea_jax import step as step_lib
from andrea_jax import train
from andrea_jax import run_record


@dataclasses.dataclass(frozen=True)
class Member:
  """One model of the group: its directory name, peak learning rate and seeds."""
  name: str
  learning_rate: float
  seed: int = 0
  # Seed of the batch order; None = the config's data.shuffle_seed (what a single run uses).
  batch_seed: int | None = None


# ----------------------------------------------------------------------------- optimizer and state


def unit_config(t: step_lib.TrainConfig) -> step_lib.TrainConfig:
  """The training config with a peak learning rate of 1 (members scale it)."""
  return dataclasses.replace(t, learning_rate=1.0)


def unit_schedule(t: step_lib.TrainConfig, segments: Sequence[tuple[int, schedule_lib.Shape]] = ()
                  ) -> optax.Schedule:
  """The members' shared schedule at a peak of 1: each member's rate scales it. ``segments``:
  the run's plans (``resume.schedule_segments``: a resumed or branched group's); none, ``t``'s."""
  return schedule_lib.learning_rate(1.0, segments or [(0, t.shape)])


def make_optimizer(t: step_lib.TrainConfig, cfg: model.ModelConfig | None = None,
                   schedule: optax.Schedule | None = None) -> optax.GradientTransformation:
  """``step.make_optimizer`` at unit rate (with muP's per-parameter rates for ``cfg``),
  then the member's rate, held in its state; ``schedule``: the unit one (``unit_schedule``)."""
  return optax.chain(step_lib.make_optimizer(unit_config(t), cfg, schedule or unit_schedule(t)),
                     optax.inject_hyperparams(optax.scale)(step_size=1.0))


def init_member(cfg: model.ModelConfig, optimizer, key: jax.Array, lr: jax.Array) -> dict:
  state = step_lib.init_state(cfg, optimizer, key)
  inner, scale = state["opt_state"]
  hyper = {**scale.hyperparams, "step_size": jnp.asarray(lr, jnp.float32)}
  return {**state, "opt_state": (inner, scale._replace(hyperparams=hyper))}


def init_state(cfg: model.ModelConfig, optimizer, seeds: jax.Array, lrs: jax.Array) -> dict:
  """The stacked state of all members: every leaf has a leading axis N."""
  keys = jax.vmap(jax.random.key)(seeds)
  return jax.vmap(functools.partial(init_member, cfg, optimizer))(keys, lrs)


MEMBER_AXES = ("auto", "vmap", "map")


def resolve_member_axis(member_axis: str) -> str:
  """``auto``: ``map`` on CPUs, ``vmap`` on accelerators.

  On a CPU, XLA runs the batched matmuls that ``vmap`` makes (one per weight, with the
  member axis as a batch dimension) much slower than the same matmuls one by one (3.6x
  for the tied unembedding at d_model 64, vocabulary 2305): measured with
  ``python -m benchmarks.vmap_members``, a vmapped step cost 0.65x, a ``lax.map`` over
  the members (one compiled loop, unbatched matmuls) 1.3x, the members' sequential steps.
  On a GPU, batching the members into each kernel is the point.
  """
  if member_axis not in MEMBER_AXES:
    raise errors.ConfigError(f"member_axis={member_axis!r}: expected one of {MEMBER_AXES}")
  if member_axis == "auto":
    return "map" if jax.default_backend() == "cpu" else "vmap"
  return member_axis


def over_members(fn, member_axis: str):
  """``fn`` of one member, applied to every member of stacked arguments."""
  if member_axis == "vmap":
    return jax.vmap(fn)
  return lambda *args: jax.lax.map(lambda a: fn(*a), args)


class Programs(NamedTuple):
  init: Callable  # (seeds [N], lrs [N]) -> stacked state
  step: Callable  # (state, batch [N, A, B/A, T+1]) -> (state, metrics [N])
  eval_loss: Callable  # (params, batch [B, T+1]) -> losses [N]
  schedule: Callable  # the unit learning rate of update k, the optimizer's (members scale it)


@functools.lru_cache(maxsize=8)
def programs(cfg: model.ModelConfig, t: step_lib.TrainConfig, member_axis: str = "vmap",
             seeds: tuple[int, ...] = (), segments: tuple = ()) -> Programs:
  """The jitted functions of a group; cached, so a resume in one process reuses them.

  The train step runs over the members with ``member_axis`` ("vmap" or "map"); the
  cheap ones (init, evaluation) always with vmap. ``seeds``: each member's, which keys its
  dropout (``()``: seed 0 for all; unused at ``cfg.dropout == 0``). ``segments``: the
  schedule's (``unit_schedule``), as a single run's are (a cooldown branched off a group).
  """
  schedule = unit_schedule(t, segments)
  optimizer = make_optimizer(t, cfg, schedule)
  step = over_members(lambda state, batch, seed: step_lib.train_step(
      state, batch, cfg, optimizer, z_loss=t.z_loss, seed=seed), member_axis)

  def group_step(state, batch):
    seeds_N = jnp.asarray(seeds, jnp.int32) if seeds else jnp.zeros_like(state["step"])
    return step(state, batch, seeds_N)

  return Programs(
      init=jax.jit(functools.partial(init_state, cfg, optimizer)),
      step=jax.jit(group_step, donate_argnums=0),
      eval_loss=jax.jit(jax.vmap(functools.partial(step_lib.eval_loss, cfg=cfg),
                                 in_axes=(0, None))),
      schedule=schedule)


# ----------------------------------------------------------------------------- the group


def check_members(members: Sequence[Member], workdir: str) -> None:
  if not members:
    raise errors.ConfigError("train_members: no members: pass at least one Member")
  names = [m.name for m in members]
  if len(set(names)) != len(names) or any(not n or "/" in n for n in names):
    raise errors.ConfigError(f"member names {names}: expected distinct non-empty names without '/'")
  old = files.read_json(os.path.join(workdir, "members.json"))
  if old is not None and old != [dataclasses.asdict(m) for m in members]:
    raise errors.CheckpointError(f"{workdir} holds a group of other members ({old}); resume "
                                 f"with the same members or use a fresh workdir")


def group(config: config_lib.RunConfig, cfg: model.ModelConfig, t: step_lib.TrainConfig,
          members: Sequence[Member], workdir: str, member_axis: str) -> members_lib.Models:
  """The members as ``members.Models``: stacked state, one program, a directory each."""
  prog = programs(cfg, t, resolve_member_axis(member_axis), tuple(m.seed for m in members),
                  tuple(resume_lib.schedule_segments(workdir, config)))
  seeds = jnp.asarray([m.seed for m in members], jnp.int32)
  lrs = np.asarray([m.learning_rate for m in members], np.float32)
  dirs = [os.path.join(workdir, m.name) for m in members]
  for d in dirs:
    os.makedirs(d, exist_ok=True)
  files.write_json(os.path.join(workdir, "members.json"), [dataclasses.asdict(m) for m in members])
  fields = [{"learning_rate": m.learning_rate, "seed": m.seed, "batch_seed": m.batch_seed,
             # The group's wall time is shared by its members (they trained together).
             "group": os.path.abspath(workdir), "group_size": len(members)} for m in members]
  return members_lib.Models(
      dirs=dirs, stacked=True,
      batch_seeds=[config.data.shuffle_seed if m.batch_seed is None else m.batch_seed
                   for m in members],
      abstract=jax.eval_shape(prog.init, seeds, lrs), init=lambda: prog.init(seeds, lrs),
      step=prog.step, eval_loss=prog.eval_loss,
      learning_rate=lambda k: float(prog.schedule(k)) * lrs, place=jnp.asarray,
      summary_fields=fields, tensorboard=False, n_devices=1)  # one device: MFU over its peak


def train_members(config, members: Sequence[Member], workdir: str,
                  member_axis: str = "auto") -> list[dict]:
  """Train ``members`` of ``config``'s architecture together; returns their summaries.

  ``config``: an experiment's ConfigDict (converted here, the boundary) or a ``RunConfig``.

  Resumes from ``workdir``'s newest checkpoint (a resume with other members, or other
  training settings, is refused). ``member_axis``: how one program steps all members
  (``resolve_member_axis``). A workdir whose group already finished is left untouched.
  """
  config = config_lib.run_config(config)
  check_members(members, workdir)
  if jax.process_count() > 1:
    raise errors.ConfigError(f"a group trains in one process (this program has "
                             f"{jax.process_count()}): run its members as single runs")
  build = lambda cfg, t, mesh: group(config, cfg, t, members, workdir, member_axis)
  result = train.run(config, workdir, build, devices=jax.local_devices()[:1])
  dirs = [os.path.join(workdir, m.name) for m in members]
  if result.already_complete:
    return [run_record.read_summary(d) for d in dirs]
  run_record.write_summary(workdir, result.summary)  # the group's own (``train.group_summary``)
  return result.members
