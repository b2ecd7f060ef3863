"""Data parallel and FSDP: axis rules, and real training runs on 8 CPU devices and 2 processes
(with qk_norm, muP and the z-loss).

The runs happen in subprocesses (tests/sharding_worker.py) with
``--xla_force_host_platform_device_count``, so this process keeps its one device. Each
is computed once per session, even under ``pytest -n 2`` (``_shared``).
"""

import fcntl
import json
import os
import shutil
import socket
import subprocess
import sys
import types

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from andrea_jax import config as config_lib
from andrea_jax import configdict
from andrea_jax import metrics as metrics_lib
from andrea_jax import model
from andrea_jax import sharding
from andrea_jax import step as step_lib
from andrea_jax import train
from experiments.configs import tiny

# Its tests share module-scoped fixtures: on one xdist worker they are computed once
# (pyproject.toml: --dist=loadgroup).
pytestmark = pytest.mark.xdist_group("test_sharding")

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sharding_worker.py")

# Two layers (lax.scan walks sharded stacks), an untied head, d_model divisible by 8; and
# issue 23's options, so every run below also shards and restores their parts: the
# per-head query/key norms (parameters with a layers axis), muP's optimizer stage, the
# z-loss term. (The standard model's parameters and optimizer state take the same axis
# rules, checked below without the options too.)
SHRINK = {
    "model.n_layer": 2, "model.d_model": 32, "model.n_head": 2, "model.block_size": 32,
    "model.vocab_size": 321, "model.tie_embeddings": False, "data.max_docs": 40,
    "train.batch_size": 16, "train.steps": 8, "train.warmup_steps": 2,
    "train.learning_rate": 3e-3, "train.log_every": 1, "train.eval_every": 4,
    "train.eval_batches": 2, "checkpoint.every": 4, "sample.num_samples": 0,
    "model.qk_norm": True, "model.parametrization": "mup", "model.base_width": 16,
    "train.z_loss": 1e-2,
}
RTOL = 1e-5


def overrides(cache_dir, **changes) -> dict:
  return {**SHRINK, "data.cache_dir": str(cache_dir), **changes}


def make_config(changes: dict):
  return configdict.apply_overrides(tiny.get_config(), changes)


def assert_close(got: dict, want: dict, steps) -> None:
  got = {int(k): v for k, v in got.items()}
  assert sorted(got) == list(steps), sorted(got)
  np.testing.assert_allclose([got[s] for s in steps], [want[s] for s in steps], rtol=RTOL)


# ----------------------------------------------------------------------------- shared runs


@pytest.fixture(scope="session")
def shared_dir(tmp_path_factory, worker_id):
  """One directory for all xdist workers of this session (its parent is shared)."""
  base = tmp_path_factory.getbasetemp()
  return base if worker_id == "master" else base.parent


def _shared(shared_dir, name: str, compute):
  """``compute(directory)`` once per session, whichever xdist worker asks first; JSON result."""
  directory, result = shared_dir / name, shared_dir / f"{name}.json"
  with open(shared_dir / f"{name}.lock", "w", encoding="utf-8") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    if not result.exists():
      shutil.rmtree(directory, ignore_errors=True)  # from a worker that failed mid-way
      directory.mkdir()
      result.write_text(json.dumps(compute(directory)))
  return directory, json.loads(result.read_text())


def _worker(spec: dict, n_devices: int) -> subprocess.Popen:
  # The suite's XLA flags (tests/conftest.py: fast compiles) after the device count: every
  # run, the one-device reference included, is compiled the same way.
  env = {**os.environ, "JAX_PLATFORMS": "cpu",
         "XLA_FLAGS": f"--xla_force_host_platform_device_count={n_devices} "
                      f"{os.environ.get('XLA_FLAGS', '')}".strip()}
  return subprocess.Popen([sys.executable, WORKER, json.dumps(spec)], env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _result(proc: subprocess.Popen, timeout: int) -> dict:
  out, _ = proc.communicate(timeout=timeout)
  assert proc.returncode == 0, out[-4000:]
  return json.loads(next(l for l in out.splitlines() if l.startswith("RESULT "))[len("RESULT "):])


@pytest.fixture(scope="session")
def cache_dir(shared_dir):
  return shared_dir / "cache"


@pytest.fixture(scope="session")
def reference(shared_dir, cache_dir):
  """One device: 8 steps with checkpoints at 4 and 8."""
  def compute(directory):
    return _result(_worker({"runs": [{"workdir": str(directory / "run"),
                                      "overrides": overrides(cache_dir)}]}, 1), 300)["runs"][0]
  directory, out = _shared(shared_dir, "reference", compute)
  assert out["status"] == "completed"
  return directory / "run", {int(k): v for k, v in out["losses"].items()}, out["val_losses"]


MUON = {"train.optimizer": "muon", "model.parametrization": "sp"}  # muP is for Adam


@pytest.fixture(scope="session")
def muon_runs(shared_dir, cache_dir):
  """Muon on one device and on a 4x2 data x FSDP mesh of 8: ``[one device, FSDP]``."""
  def compute(directory):
    one = _worker({"runs": [{"workdir": str(directory / "one"),
                             "overrides": overrides(cache_dir, **MUON)}]}, 1)
    fsdp = _worker({"runs": [{"workdir": str(directory / "fsdp"), "overrides": overrides(
        cache_dir, **MUON, **{"mesh.data": 4, "mesh.fsdp": 2})}]}, 8)
    return [_result(one, 300)["runs"][0], _result(fsdp, 420)["runs"][0]]
  return _shared(shared_dir, "muon", compute)[1]


@pytest.fixture(scope="session")
def eight_devices(shared_dir, cache_dir, reference):
  """One subprocess with 8 devices: a fresh 4x2 run and two resumes onto an 8x1 mesh."""
  def compute(directory):
    fsdp = str(directory / "fsdp_4x2")
    runs = [
        {"workdir": fsdp, "overrides": overrides(cache_dir, **{"mesh.data": 4, "mesh.fsdp": 2})},
        # Saved on 1 device, continued with 8-way data parallelism.
        {"workdir": str(directory / "one_to_8x1"), "resume_from": str(reference[0]),
         "resume_step": 4, "overrides": overrides(cache_dir, **{"mesh.data": 8})},
        # Saved on a 4x2 data x FSDP mesh, continued on 8x1.
        {"workdir": str(directory / "fsdp_to_8x1"), "resume_from": fsdp, "resume_step": 4,
         "overrides": overrides(cache_dir, **{"mesh.data": 8})},
    ]
    memory = {"overrides": overrides(cache_dir, **{"mesh.data": 1, "mesh.fsdp": 8})}
    return _result(_worker({"runs": runs, "memory": memory}, 8), 420)
  return _shared(shared_dir, "eight_devices", compute)


@pytest.fixture(scope="session")
def eight_to_one(shared_dir, cache_dir, eight_devices):
  """The 4x2 run's checkpoint of step 4, continued on one device."""
  def compute(directory):
    run = {"workdir": str(directory / "run"), "resume_from": str(eight_devices[0] / "fsdp_4x2"),
           "resume_step": 4, "overrides": overrides(cache_dir)}
    return _result(_worker({"runs": [run]}, 1), 300)["runs"][0]
  return _shared(shared_dir, "eight_to_one", compute)[1]


@pytest.fixture(scope="session")
def two_processes(shared_dir, cache_dir):
  """Two processes with 2 devices each (mesh 2x2), one shared workdir per run: a run with
  gradient accumulation, then (in the same two processes, so they start once) a run that
  SIGTERM reaches in process 0 only, after step 3."""
  def compute(directory):
    with socket.socket() as s:
      s.bind(("localhost", 0))
      port = s.getsockname()[1]
    run = {"workdir": str(directory / "run"), "overrides": overrides(
        cache_dir, **{"mesh.fsdp": 2, "train.grad_accum_steps": 2, "sample.num_samples": 1,
                      "sample.max_new_tokens": 4})}
    stopped = {"workdir": str(directory / "stopped"), "signal_at": {"step": 3, "process": 0},
               "overrides": overrides(cache_dir, **{"mesh.fsdp": 2, "train.log_every": 2,
                                                    "checkpoint.every": 100})}
    procs = [_worker({"runs": [run, stopped], "distributed": {
        "coordinator_address": f"localhost:{port}", "num_processes": 2, "process_id": i}}, 2)
             for i in range(2)]
    try:
      return [_result(p, 600) for p in procs]
    finally:
      for p in procs:  # a failed or hung peer must not outlive the test
        if p.poll() is None:
          p.kill()
          p.wait()
  return _shared(shared_dir, "two_processes", compute)


def test_processes_agree_on_a_stop_signal_one_of_them_received(two_processes):
  """SIGTERM reaches process 0 only, after step 3: both stop at the next log step (4),
  after saving it together, and report the run interrupted; process 1 heard no signal."""
  directory, outs = two_processes
  results = [out["runs"][1] for out in outs]
  assert [r["status"] for r in results] == ["interrupted", "interrupted"]
  assert sorted(int(k) for k in results[0]["losses"]) == [2, 4]  # rows every 2 steps
  assert sorted(p for p in os.listdir(directory / "stopped" / "checkpoints") if p.isdigit()) == ["4"]


# ----------------------------------------------------------------------------- the mesh


def test_mesh_shape_resolves_minus_one():
  assert sharding.mesh_shape(-1, 1, 8) == (8, 1)
  assert sharding.mesh_shape(-1, 2, 8) == (4, 2)
  assert sharding.mesh_shape(2, -1, 8) == (2, 4)
  assert sharding.mesh_shape(1, 1, 1) == (1, 1)


@pytest.mark.parametrize("data, fsdp, match", [
    (2, 2, r"mesh.data=2 x mesh.fsdp=2 = 4 devices, but there are 8"),
    (-1, 3, r"3 does not divide the 8 devices"),
    (-1, -1, r"at most one axis"),
    (0, 1, r"mesh.data=0"),
])
def test_mesh_shape_errors_name_the_sizes_and_the_device_count(data, fsdp, match):
  with pytest.raises(ValueError, match=match):
    sharding.mesh_shape(data, fsdp, 8)


def test_default_mesh_is_data_parallel_over_every_device():
  mesh = sharding.make_mesh(config_lib.RunConfig.from_configdict(tiny.get_config()).mesh)
  assert dict(mesh.shape) == {"data": jax.device_count(), "fsdp": 1}


def test_a_mesh_that_does_not_match_the_devices_stops_the_run(tmp_path):
  config = make_config(overrides(tmp_path, **{"mesh.data": 2}))
  with pytest.raises(ValueError, match=r"mesh.data=2 x mesh.fsdp=1 = 2 devices, but there are 1"):
    train.train_and_evaluate(config, str(tmp_path))


def test_batch_must_split_over_the_devices():
  mesh = types.SimpleNamespace(shape={"data": 4, "fsdp": 2})
  sharding.check_batch(16, 2, mesh)
  with pytest.raises(ValueError, match=r"batch_size=16 / train.grad_accum_steps=4 = 4 sequences"):
    sharding.check_batch(16, 4, mesh)


# ----------------------------------------------------------------------------- axis rules


def _abstract(**changes):
  cfg = model.ModelConfig(vocab_size=50, block_size=8, d_model=32, n_layer=3, n_head=2, **changes)
  optimizer = step_lib.make_optimizer(step_lib.TrainConfig(**tiny.get_config().train), cfg)
  return step_lib.abstract_state(cfg, optimizer, 0)


def _specs(tree, **sizes):
  specs = sharding.state_specs(tree, sizes)
  return {jax.tree_util.keystr(p): s for p, s in jax.tree_util.tree_leaves_with_path(
      specs, is_leaf=lambda x: isinstance(x, P))}


QK_MUP = {"qk_norm": True, "parametrization": "mup", "base_width": 16}


@pytest.mark.parametrize("changes", [{}, {"tie_embeddings": False, "activation": "swiglu"},
                                     {"norm": "post"}, QK_MUP])
def test_every_param_has_logical_axes_and_layers_is_never_sharded(changes):
  params = _abstract(**changes)["params"]
  for path, leaf in jax.tree_util.tree_leaves_with_path(params):
    axes = sharding.logical_axes(path)
    assert axes is not None and len(axes) == leaf.ndim, jax.tree_util.keystr(path)
    assert (axes[0] == "layers") == (path[0].key == "blocks"), jax.tree_util.keystr(path)
  assert "layers" not in sharding.RULES


def test_fsdp_shards_every_matrix_on_its_embed_dimension():
  specs = _specs(_abstract(tie_embeddings=False)["params"], data=2, fsdp=4)
  assert specs["['wte']"] == P(None, "fsdp") and specs["['lm_head']"] == P("fsdp", None)
  assert specs["['blocks']['attn']['w_qkv']"] == P(None, "fsdp", None)
  assert specs["['blocks']['attn']['w_out']"] == P(None, None, "fsdp")
  assert specs["['blocks']['mlp']['w_in']"] == P(None, "fsdp", None)
  assert specs["['blocks']['mlp']['w_out']"] == P(None, None, "fsdp")
  assert specs["['blocks']['attn']['b_qkv']"] == P(None, None)  # vectors stay replicated
  assert all("data" not in str(s) for s in specs.values())  # replicated over data


def test_a_dimension_that_does_not_divide_falls_back_to_replicated():
  specs = _specs(_abstract()["params"], data=1, fsdp=3)  # d_model=32 is not a multiple of 3
  assert all(s == P(*[None] * len(s)) for s in specs.values())


@pytest.mark.parametrize("changes", [{}, QK_MUP])  # muP's stage adds no state to shard
def test_optimizer_state_mirrors_the_params_and_scalars_are_replicated(changes):
  specs = _specs(_abstract(**changes), data=2, fsdp=4)
  params = {k[len("['params']"):]: v for k, v in specs.items() if k.startswith("['params']")}
  moments = [k for k in specs if ".mu[" in k or ".nu[" in k]
  assert len(moments) == 2 * len(params)
  for key in moments:
    assert specs[key] == params[key[key.index("u[") + 1:]], key
  assert specs["['step']"] == specs["['good']"] == P()
  assert all(s == P() for k, s in specs.items() if k.endswith(".count"))


def test_muon_state_shards_as_the_params_it_follows():
  specs = _specs(_abstract_muon(), data=2, fsdp=4)
  params = {k[len("['params']"):]: v for k, v in specs.items() if k.startswith("['params']")}
  moments = [k for k in specs if ".mu[" in k or ".nu[" in k]
  # Adam's mu and nu of its branch, Muon's momentum of the 4 matrices: one state per leaf.
  assert len(moments) == 2 * (len(params) - 4) + 4
  for key in moments:
    assert specs[key] == params[key[key.index("u[") + 1:]], key
  assert specs["['params']['blocks']['attn']['w_qkv']"] == P(None, "fsdp", None)
  assert all(s == P() for k, s in specs.items() if k.endswith((".count", ".ns_coeffs")))


def _abstract_muon():
  cfg = model.ModelConfig(vocab_size=50, block_size=8, d_model=32, n_layer=3, n_head=2)
  t = step_lib.TrainConfig(**{**tiny.get_config().train, "optimizer": "muon"})
  return step_lib.abstract_state(cfg, step_lib.make_optimizer(t, cfg), 0)


# ----------------------------------------------------------------------------- real runs


def test_data_parallel_and_fsdp_losses_equal_one_device(reference, eight_devices):
  _, ref, ref_val = reference
  _, out = eight_devices
  fsdp, dp8, _ = out["runs"]
  assert out["device_count"] == 8
  assert fsdp["status"] == "completed"
  assert_close(fsdp["losses"], ref, range(1, 9))
  np.testing.assert_allclose([fsdp["val_losses"][k] for k in ("4", "8")],
                             [ref_val[k] for k in ("4", "8")], rtol=RTOL)
  assert_close(dp8["losses"], ref, range(5, 9))  # 8-way data parallel, from step 4 on


def test_muon_under_fsdp_trains_as_on_one_device(muon_runs):
  one, fsdp = muon_runs
  assert one["status"] == fsdp["status"] == "completed"
  assert_close(fsdp["losses"], {int(k): v for k, v in one["losses"].items()}, range(1, 9))


def test_checkpoints_move_between_meshes(reference, eight_devices, eight_to_one):
  """1 device -> 8x1 (above), 4x2 -> 8x1, and 4x2 (8 devices) -> 1 device."""
  _, ref, _ = reference
  assert_close(eight_devices[1]["runs"][2]["losses"], ref, range(5, 9))
  assert eight_to_one["status"] == "completed" and eight_to_one["params"]["devices"] == 1
  assert_close(eight_to_one["losses"], ref, range(5, 9))


def test_fsdp_holds_a_fraction_of_the_parameters_per_device(eight_devices):
  _, out = eight_devices
  # Only the biases and norms (about 2% here) stay replicated.
  for run, fsdp in ((out["runs"][0], 2), (out["memory"], 8)):
    for part in ("params", "opt_state"):
      m = run[part]
      assert m["total"] / fsdp <= m["max_per_device"] <= 1.2 * m["total"] / fsdp, (fsdp, part, m)
  dp8 = out["runs"][1]["params"]
  assert dp8["max_per_device"] == dp8["total"]  # pure data parallel replicates


def test_two_processes_train_together_like_one(reference, two_processes):
  _, ref, ref_val = reference
  directory, (lead, other) = two_processes
  assert (lead["process_index"], other["process_index"]) == (0, 1)
  assert lead["process_count"] == 2 and lead["device_count"] == 4
  assert lead["runs"][0]["status"] == other["runs"][0]["status"] == "completed"
  assert_close(lead["runs"][0]["losses"], ref, range(1, 9))
  assert lead["runs"][0]["summary"]["final_val_loss"] == pytest.approx(ref_val["8"], rel=RTOL)
  assert other["runs"][0]["summary"]["final_val_loss"] == lead["runs"][0]["summary"]["final_val_loss"]
  run = directory / "run"
  assert sorted(os.listdir(run / "checkpoints")) == ["4", "8"]
  assert len((run / "samples.txt").read_text()) > 0
  rows = metrics_lib.read_metrics(str(run))  # written once, by process 0
  assert [r["step"] for r in rows if "loss" in r] == list(range(1, 9))
  for half in (lead, other):  # each process holds half of each FSDP-sharded array
    m = half["runs"][0]["params"]
    assert m["devices"] == 2 and m["max_per_device"] < 0.6 * m["total"]
