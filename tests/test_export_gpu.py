"""andrea120m's training step lowered for NVIDIA GPUs on a machine without one (``jax.export``).

No GPU has run this code. ``jax.export(..., platforms=("cuda",))`` lowers a jitted function
to StableHLO for a platform that is not present (it only lowers: nothing is compiled or
run), so the run's own jitted step (``train.single_run``'s step: its shardings and donation
included) is lowered here with ``benchmarks/gpu_check.py``'s GPU settings (``model_cfg``:
bfloat16 compute, the vocabulary padded to a multiple of 128, a remat policy) at
andrea120m's 64 x 1024 tokens on an 8-device ("data", "fsdp") = 2 x 4 mesh. The mesh is
abstract (``sharding.abstract_mesh``): lowering needs no devices. Both XLA attention
paths are lowered, ``xla_flash`` and ``xla``.

cuDNN's attention (``attention_impl="cudnn"``, the default on NVIDIA GPUs) cannot be
lowered without a GPU: its lowering asks the cuDNN library for its version and raises
"cuDNN is not detected" (the last test pins that). ``python -m benchmarks.gpu_check`` runs
it, and compiles and times everything here, on a GPU.
"""

import functools
import re

import jax
import jax.numpy as jnp
import pytest
from jax import export
from jax.sharding import PartitionSpec as P

from andrea_jax import attention
from andrea_jax import config as config_lib
from andrea_jax import sharding
from andrea_jax import train
from benchmarks import gpu_check
from benchmarks import shapes

MESH = {"data": 2, "fsdp": 4}
DEVICES = 8
IMPLS = ("xla_flash", "xla")
MATRICES = ("['w_qkv']", "['w_out']", "['w_in']", "['wte']", "['wpe']")
REMAT = "dots_saveable"  # gpu_check's remat variant; "none" is lowered to compare against

# One operation of the StableHLO text: `%3 = stablehlo.dot_general %1, %2, ... : (tensor<AxBxbf16>,
# tensor<...>) -> tensor<...>`.
DOT = re.compile(r"= stablehlo\.dot_general .* : \(tensor<([^>]*)>, tensor<([^>]*)>\) "
                 r"-> tensor<([^>]*)>")
# An argument of @main with its Shardy sharding: `%arg4: tensor<12x768x768xf32> {sdy.sharding =
# #sdy.sharding<@mesh, [{}, {}, {"fsdp"}]>, ...`.
ARG = re.compile(r"%arg(\d+): tensor<([^>]*)> \{sdy\.sharding = #sdy\.sharding<@mesh, \[([^\]]*)\]>")


@functools.lru_cache(maxsize=None)
def lowered(impl: str, remat: str):
  """(model config, abstract mesh, sharded abstract state, Exported, StableHLO text)."""
  config = shapes.load_config(gpu_check.FULL["config"])
  config.mesh.update(MESH)
  cfg = gpu_check.model_cfg(config, gpu_check.FULL["seq"], impl, remat, "bfloat16")
  run_config = config_lib.RunConfig.from_configdict(config)
  t = run_config.train
  mesh = sharding.abstract_mesh(run_config.mesh, DEVICES)
  sharding.check_batch(t.batch_size, t.grad_accum_steps, mesh)
  models = train.single_run(run_config, cfg, t, mesh, workdir="unused")  # builds, runs nothing
  state, step_fn = models.abstract, models.step
  train_batch = sharding.batch_sharding(mesh, batch_dim=1, ndim=3)
  A = t.grad_accum_steps
  batch = jax.ShapeDtypeStruct((A, t.batch_size // A, cfg.block_size + 1), jnp.int32,
                               sharding=train_batch)
  exp = export.export(step_fn, platforms=("cuda",))(state, batch)
  return cfg, mesh, state, exp, exp.mlir_module()


def dtype_of(tensor_type: str) -> str:
  return tensor_type.split("x")[-1]  # "64x1024x768xbf16" -> "bf16"


def arg_specs(text: str) -> list[tuple[str, P]]:
  """(shape, PartitionSpec) of every argument of @main, in order, from its Shardy sharding."""
  main = next(line for line in text.splitlines() if "func.func public @main(" in line)
  out = []
  for i, (n, shape, dims) in enumerate(ARG.findall(main)):
    assert int(n) == i, main[:2000]
    axes = [tuple(re.findall(r'"(\w+)"', d)) for d in re.findall(r"\{[^}]*\}", dims)]
    out.append((shape, P(*[a if len(a) > 1 else (a[0] if a else None) for a in axes])))
  return out


@pytest.mark.parametrize("impl", IMPLS)
def test_the_step_lowers_for_cuda_on_eight_devices(impl):
  cfg, _, state, exp, text = lowered(impl, REMAT)
  assert cfg.attention_impl == impl and cfg.compute_dtype == "bfloat16"
  assert exp.platforms == ("cuda",) and exp.nr_devices == DEVICES
  assert "func.func public @main(" in text
  # The padded vocabulary: 8449 -> 8576 rows of the embedding, and logits of that width.
  assert cfg.vocab_size == 8449 and cfg.padded_vocab == 8576
  names = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_leaves_with_path(state)]
  assert exp.in_avals[names.index("['params']['wte']")].shape == (8576, cfg.d_model)
  assert any(out.endswith("x8576xbf16") for *_, out in DOT.findall(text))


@pytest.mark.parametrize("impl", IMPLS)
def test_every_matmul_takes_bfloat16_operands(impl):
  cfg, _, state, _, text = lowered(impl, REMAT)
  dots = DOT.findall(text)
  # Per layer (one scan body): 4 projections forward and 8 backward, plus attention's blocks.
  assert len(dots) >= 12 + 3, len(dots)
  assert [d for d in dots if (dtype_of(d[0]), dtype_of(d[1])) != ("bf16", "bf16")] == []
  # Mixed precision: the parameters (and Adam's moments) stay float32; only compute is bf16.
  assert {l.dtype for l in jax.tree.leaves(state["params"])} == {jnp.dtype("float32")}
  assert cfg.param_dtype == "float32"


@pytest.mark.parametrize("impl", IMPLS)
def test_the_remat_policy_recomputes_the_blocks(impl):
  # jax.checkpoint lowers the recomputed forward as named rematerialised computations in the
  # scan's backward (no CSE barriers: under lax.scan none are needed, model.remat); without
  # a policy only the "xla" kernel's own rematerialised query blocks remain.
  remats = lambda remat: lowered(impl, remat)[4].count("rematted_computation")
  assert remats(REMAT) > remats("none") + 50


@pytest.mark.parametrize("impl", IMPLS)
def test_shardings_are_what_sharding_py_asks_for(impl):
  cfg, mesh, state, exp, text = lowered(impl, REMAT)
  leaves = jax.tree_util.tree_leaves_with_path(state)
  specs = arg_specs(text)
  assert len(specs) == len(leaves) + 1  # the state's leaves, then the batch
  want = sharding.state_specs(state, dict(mesh.shape))
  for (path, leaf), (shape, spec), asked in zip(leaves, specs, jax.tree.leaves(
      want, is_leaf=lambda x: isinstance(x, P))):
    name = jax.tree_util.keystr(path)
    assert shape.split("x")[:-1] == [str(d) for d in leaf.shape], (name, shape)
    assert spec == P(*asked, *[None] * (len(spec) - len(asked))), (name, spec, asked)
    # FSDP: every matrix and embedding (and its Adam moments) is split 4 ways on its d_model
    # axis; biases, norms and scalars are replicated; nothing is split over "data".
    if name.endswith(MATRICES):
      assert [d for d, a in zip(leaf.shape, spec) if a] == [cfg.d_model], (name, spec)
      assert list(spec).count("fsdp") == 1, (name, spec)
    else:
      assert all(a is None for a in spec), (name, spec)
  # The batch [A, B/A, T+1]: rows over data x fsdp (every device sees 64 / 8 = 8 sequences).
  assert specs[-1][1] == P(None, ("data", "fsdp"), None)
  # The updated state leaves on the shardings it came in on (it is donated); metrics replicated.
  outs = exp.out_shardings_jax(mesh)
  ins = exp.in_shardings_jax(mesh)
  assert [s.spec for s in outs[:len(leaves)]] == [s.spec for s in ins[:len(leaves)]]
  assert all(s.spec == P() for s in outs[len(leaves):])


@pytest.mark.skipif(jax.default_backend() == "gpu", reason="a GPU has cuDNN")
def test_cudnn_attention_cannot_lower_without_a_gpu():
  qkv = jax.ShapeDtypeStruct((2, 128, 4, 64), jnp.bfloat16)
  fn = jax.jit(attention.cudnn_causal_attention)
  with pytest.raises(RuntimeError, match="cuDNN is not detected"):
    export.export(fn, platforms=("cuda",))(qkv, qkv, qkv)
