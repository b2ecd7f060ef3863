"""Data-parallel and FSDP training over devices and hosts with ``jax.sharding``.

JAX's SPMD partitioner does the work: we only say where each array lives, and XLA
inserts the all-gathers, reduce-scatters and all-reduces. Nothing here is a collective.

    mesh        ("data", "fsdp") device grid from the config's ``mesh`` group
    params      each leaf has logical axes (``PARAM_AXES``); ``RULES`` maps a logical
                axis to a mesh axis; FSDP shards every large matrix on its ``embed`` axis
    opt state   Adam's mu/nu have the params' paths, so they get the params' shardings
    batch       rows split over ("data", "fsdp"): every device sees different sequences

Everything is replicated over ``data``. On one device every sharding is trivial and the
training step computes exactly what it did before this module existed.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import AbstractMesh, AxisType, Mesh, NamedSharding, PartitionSpec as P

from andrea_jax import config as config_lib
from andrea_jax import errors

MESH_AXES = ("data", "fsdp")
# Auto axes: the partitioner propagates shardings through the model's einsums itself.
AXIS_TYPES = (AxisType.Auto,) * len(MESH_AXES)
# The batch dimension is split over both axes: FSDP is data parallel for activations.
BATCH_AXES = ("data", "fsdp")

# Logical axes of every parameter leaf, keyed by the leaf's path (its last dict keys).
# Per-layer leaves lead with "layers", the stacked axis that lax.scan walks.
PARAM_AXES = {
    "wte": ("vocab", "embed"),
    "wpe": (None, "embed"),
    "lm_head": ("embed", "vocab"),
    "ln_f/scale": (None,), "ln_f/bias": (None,), "ln_f/alpha": (),  # alpha: DyT's scalar
    "ln_emb/scale": (None,), "ln_emb/bias": (None,), "ln_emb/alpha": (),  # embedding_norm
    "ln_1/scale": ("layers", None), "ln_1/bias": ("layers", None), "ln_1/alpha": ("layers",),
    "ln_2/scale": ("layers", None), "ln_2/bias": ("layers", None), "ln_2/alpha": ("layers",),
    **{f"ln_{i}_out/{leaf}": ("layers",) + ((None,) if leaf != "alpha" else ())  # peri
       for i in (1, 2) for leaf in ("scale", "bias", "alpha")},
    "attn/w_qkv": ("layers", "embed", "heads"), "attn/b_qkv": ("layers", None),
    "attn/w_out": ("layers", "heads", "embed"), "attn/b_out": ("layers", None),
    "q_norm/scale": ("layers", None), "q_norm/bias": ("layers", None),  # qk_norm, over head_dim
    "k_norm/scale": ("layers", None), "k_norm/bias": ("layers", None),
    "mlp/w_in": ("layers", "embed", "mlp"), "mlp/b_in": ("layers", None),
    "mlp/w_out": ("layers", "mlp", "embed"), "mlp/b_out": ("layers", None),
}

# Logical axis -> mesh axis; a logical axis not listed is replicated. Sharding "embed"
# alone splits every matrix and both embeddings (all but the biases and norms, which are
# tiny). "layers" must never appear: lax.scan slices it, one layer per iteration.
RULES = {"embed": "fsdp"}


# ----------------------------------------------------------------------------- mesh


def mesh_shape(data: int, fsdp: int, n_devices: int) -> tuple[int, int]:
  """Resolve ``-1`` (all remaining devices) and check that the grid uses every device."""
  sizes = {"mesh.data": data, "mesh.fsdp": fsdp}
  for name, size in sizes.items():
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or not (size > 0 or size == -1):
      raise errors.ConfigError(f"{name}={size!r}: expected a positive number of devices or -1 "
                               f"(all remaining)")
  if data == -1 and fsdp == -1:
    raise errors.ConfigError("mesh.data=-1 and mesh.fsdp=-1: at most one axis can take all "
                             "remaining devices; give the other one a size")
  known = math.prod(s for s in sizes.values() if s != -1)
  if -1 in (data, fsdp):
    if n_devices % known:
      raise errors.ConfigError(f"mesh.data={data}, mesh.fsdp={fsdp}: {known} does not divide the "
                               f"{n_devices} devices; choose sizes whose product divides {n_devices}")
    data, fsdp = (n_devices // known, fsdp) if data == -1 else (data, n_devices // known)
  if data * fsdp != n_devices:
    raise errors.ConfigError(f"mesh.data={data} x mesh.fsdp={fsdp} = {data * fsdp} devices, but "
                             f"there are {n_devices}; make the product {n_devices} or set one axis "
                             f"to -1")
  return data, fsdp


def make_mesh(mesh_config: config_lib.MeshConfig, devices=None) -> Mesh:
  """The ("data", "fsdp") mesh over all devices (of all processes) from the ``mesh`` group."""
  devices = jax.devices() if devices is None else devices
  shape = mesh_shape(mesh_config.data, mesh_config.fsdp, len(devices))
  return jax.make_mesh(shape, MESH_AXES, axis_types=AXIS_TYPES, devices=devices)


def abstract_mesh(mesh_config: config_lib.MeshConfig, n_devices: int) -> AbstractMesh:
  """``make_mesh``'s grid for ``n_devices`` devices, without the devices: shardings for a
  step lowered here for another machine (``jax.export``, tests/test_export_gpu.py)."""
  shape = mesh_shape(mesh_config.data, mesh_config.fsdp, n_devices)
  return AbstractMesh(shape, MESH_AXES, axis_types=AXIS_TYPES)


# ----------------------------------------------------------------------------- parameters


def _path_keys(path) -> tuple[str, ...]:
  return tuple(str(getattr(k, "key", getattr(k, "name", k))) for k in path)


def logical_axes(path) -> tuple | None:
  """The logical axes of the leaf at ``path`` (any tree holding params), or None if unknown."""
  keys = _path_keys(path)
  for n in (2, 1):
    if len(keys) >= n and "/".join(keys[-n:]) in PARAM_AXES:
      return PARAM_AXES["/".join(keys[-n:])]
  return None


def partition_spec(axes: tuple | None, shape: tuple, axis_sizes: dict) -> P:
  """Map logical ``axes`` through ``RULES``; replicate a dimension that does not divide.

  A leaf that is not a parameter (step, rng, Adam's count) or whose rank does not match
  its logical axes is replicated. Falling back to replication instead of failing keeps
  odd shapes (a vocabulary of 50257, an fsdp size that does not divide d_model) trainable:
  only that leaf costs full memory on every device.
  """
  if axes is None or len(axes) != len(shape):
    return P()
  spec = []
  for name, dim in zip(axes, shape):
    mesh_axis = RULES.get(name)
    size = axis_sizes.get(mesh_axis, 1)
    spec.append(mesh_axis if mesh_axis and size > 1 and dim % size == 0 else None)
  return P(*spec)


def _shape(leaf) -> tuple:
  return tuple(leaf.shape) if hasattr(leaf, "shape") else np.shape(leaf)


def state_specs(abstract_state: Any, axis_sizes: dict) -> Any:
  """A PartitionSpec per leaf of any tree that holds params (params, opt state, train state).

  Optimizer state is covered by the same paths: optax keeps Adam's mu and nu as trees with
  the params' structure, so ``.../mu/blocks/attn/w_qkv`` shards like ``blocks/attn/w_qkv``.
  """
  return jax.tree_util.tree_map_with_path(
      lambda path, leaf: partition_spec(logical_axes(path), _shape(leaf), axis_sizes),
      abstract_state)


def state_shardings(abstract_state: Any, mesh: Mesh) -> Any:
  """A NamedSharding per leaf of ``abstract_state`` (see ``state_specs``)."""
  specs = state_specs(abstract_state, dict(mesh.shape))
  return jax.tree.map(lambda spec: NamedSharding(mesh, spec), specs,
                      is_leaf=lambda x: isinstance(x, P))


def with_shardings(abstract_state: Any, shardings: Any) -> Any:
  """``jax.ShapeDtypeStruct``s carrying the target shardings: restore straight onto them."""
  return jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                      abstract_state, shardings)


def put(tree: Any, shardings: Any) -> Any:
  """Place host values (numpy, or the same values on every process) onto ``shardings``."""
  def one(x, sharding):
    x = np.asarray(x)
    return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])
  return jax.tree.map(one, tree, shardings)


# ----------------------------------------------------------------------------- batches


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def batch_sharding(mesh: Mesh, batch_dim: int, ndim: int) -> NamedSharding:
  """Split dimension ``batch_dim`` of an ``ndim`` array over ("data", "fsdp")."""
  spec = [None] * ndim
  spec[batch_dim] = BATCH_AXES
  return NamedSharding(mesh, P(*spec))


def batch_devices(mesh: Mesh) -> int:
  """How many devices share each microbatch's rows (``mesh.data x mesh.fsdp``)."""
  return math.prod(mesh.shape[a] for a in BATCH_AXES)


def check_batch(batch_size: int, grad_accum_steps: int, mesh: Mesh) -> None:
  """Every microbatch must split evenly over the devices that share the batch."""
  n = batch_devices(mesh)
  rows = batch_size // grad_accum_steps
  if rows % n:
    raise errors.ConfigError(f"train.batch_size={batch_size} / train.grad_accum_steps="
                             f"{grad_accum_steps} = {rows} sequences per microbatch do not split "
                             f"over mesh.data x mesh.fsdp = {n} devices; make batch_size a multiple "
                             f"of {n * grad_accum_steps}")


def global_batch(local: np.ndarray, sharding: NamedSharding, batch_dim: int) -> jax.Array:
  """The global batch from this process's rows (the loader already split it by process)."""
  shape = list(local.shape)
  shape[batch_dim] *= jax.process_count()
  return jax.make_array_from_process_local_data(sharding, local, tuple(shape))


# ----------------------------------------------------------------------------- processes


def initialize(d: config_lib.DistributedConfig) -> None:
  """``jax.distributed.initialize`` from the ``distributed`` group; call before any JAX use.

  Without a coordinator address JAX detects the cluster itself (SLURM, Open MPI, Cloud TPU).
  """
  if not d.enabled:
    return
  if not d.coordinator_address:
    jax.distributed.initialize()
    return
  if d.num_processes < 1 or not 0 <= d.process_id < d.num_processes:
    raise errors.ConfigError(f"distributed.coordinator_address={d.coordinator_address!r} needs "
                             f"distributed.num_processes >= 1 and 0 <= distributed.process_id < "
                             f"num_processes; got num_processes={d.num_processes}, "
                             f"process_id={d.process_id}")
  jax.distributed.initialize(d.coordinator_address, d.num_processes, d.process_id)


def is_lead() -> bool:
  """Process 0 writes the run's files (config, metrics, plots, summary, samples)."""
  return jax.process_index() == 0


def barrier(name: str) -> None:
  """Wait until every process gets here (a no-op with one process)."""
  if jax.process_count() > 1:
    multihost_utils.sync_global_devices(name)


def any_process(flag: bool) -> bool:
  """True on every process if ``flag`` is True on any (so all take the same branch)."""
  if jax.process_count() == 1:
    return bool(flag)
  return bool(np.any(multihost_utils.process_allgather(np.asarray(flag, np.int32))))


def gather(tree: Any) -> Any:
  """Arrays every process can use on its own (numpy when several processes share them).

  A collective with several processes: every process must call it. With one process the
  arrays are returned as they are (they are already addressable).
  """
  if jax.process_count() == 1:
    return tree
  return multihost_utils.process_allgather(tree, tiled=True)


def device_bytes(tree: Any) -> dict:
  """Bytes of ``tree``'s shards held by each addressable device."""
  out = {}
  for a in jax.tree.leaves(tree):
    for shard in a.addressable_shards:
      out[shard.device] = out.get(shard.device, 0) + shard.data.nbytes
  return out
