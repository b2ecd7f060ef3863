"""Subprocess entry point of tests/test_sharding.py: real training runs on a multi-device CPU.

Run with ``XLA_FLAGS=--xla_force_host_platform_device_count=N`` (so the test process keeps
its one device) and one argument, a JSON spec:

  {"runs": [{"workdir": ..., "overrides": {"mesh.data": 4, ...}, "resume_from": ...}],
   "memory": {"overrides": {"mesh.fsdp": 8, ...}},
   "distributed": {"coordinator_address": "localhost:1234", "num_processes": 2, "process_id": 0}}

Prints one line ``RESULT {json}`` with each run's losses and per-device memory.
"""

import json
import os
import shutil
import signal
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import jax  # pylint: disable=wrong-import-position  (importing is no JAX call: initialize still works)
from andrea_jax import config as config_lib  # pylint: disable=wrong-import-position
from andrea_jax import configdict  # pylint: disable=wrong-import-position
from andrea_jax import metrics as metrics_lib  # pylint: disable=wrong-import-position
from andrea_jax import model  # pylint: disable=wrong-import-position
from andrea_jax import sharding  # pylint: disable=wrong-import-position
from andrea_jax import signals as signals_lib  # pylint: disable=wrong-import-position
from andrea_jax import step as step_lib  # pylint: disable=wrong-import-position
from andrea_jax import train  # pylint: disable=wrong-import-position
from experiments.configs import tiny  # pylint: disable=wrong-import-position


def make_config(overrides: dict):
  return configdict.apply_overrides(tiny.get_config(), overrides)


def copy_at_step(src: str, dst: str, step: int) -> None:
  """A copy of run ``src`` that stopped after ``step``: later checkpoints and metrics dropped."""
  shutil.copytree(src, dst)
  for name in os.listdir(os.path.join(dst, "checkpoints")):
    if name.isdigit() and int(name) > step:
      shutil.rmtree(os.path.join(dst, "checkpoints", name))
  os.remove(os.path.join(dst, "metrics.jsonl"))


def memory(tree) -> dict:
  per_device = sharding.device_bytes(tree)
  return {"total": sum(a.nbytes for a in jax.tree.leaves(tree)),
          "max_per_device": max(per_device.values()), "devices": len(per_device)}


def signal_at(step: int, process: int) -> None:
  """Process ``process`` sends itself a real SIGTERM just before the loop asks, after ``step``,
  whether to stop: the others must learn of it and stop at the same step."""
  real = signals_lib.stop_requested

  def stop_requested(signals, at, every):
    if at == step and jax.process_index() == process:
      os.kill(os.getpid(), signal.SIGTERM)  # handled (a flag) before the next line runs
    return real(signals, at, every)

  signals_lib.stop_requested = stop_requested


def run(spec: dict) -> dict:
  config = make_config(spec["overrides"])
  if spec.get("signal_at"):
    signal_at(**spec["signal_at"])
  if spec.get("resume_from"):
    copy_at_step(spec["resume_from"], spec["workdir"], spec["resume_step"])
  result = train.train_and_evaluate(config, spec["workdir"])
  metrics = metrics_lib.read_metrics(spec["workdir"]) if sharding.is_lead() else []
  return {"status": result.status, "summary": result.summary,
          "losses": {r["step"]: r["loss"] for r in metrics if "loss" in r},
          "val_losses": {r["step"]: r["val_loss"] for r in metrics if "val_loss" in r},
          "params": memory(result.state["params"]), "opt_state": memory(result.state["opt_state"])}


def init_memory(spec: dict) -> dict:
  """Parameter and Adam memory per device of a freshly initialised, sharded state."""
  config = make_config(spec["overrides"])
  cfg = model.ModelConfig(**config.model)
  optimizer = step_lib.make_optimizer(step_lib.TrainConfig(**config.train), cfg)
  mesh = sharding.make_mesh(config_lib.MeshConfig(**config.mesh))
  shardings = sharding.state_shardings(step_lib.abstract_state(cfg, optimizer, 0), mesh)
  state = jax.jit(step_lib.init_state, static_argnums=(0, 1), out_shardings=shardings)(
      cfg, optimizer, jax.random.key(0))
  return {"params": memory(state["params"]), "opt_state": memory(state["opt_state"])}


def main(spec: dict) -> dict:
  if spec.get("distributed"):
    d = make_config({}).distributed
    d.update(enabled=True, **spec["distributed"])
    sharding.initialize(config_lib.DistributedConfig(**d))  # before any other JAX call
  out = {"process_index": jax.process_index(), "process_count": jax.process_count(),
         "device_count": jax.device_count(), "local_device_count": jax.local_device_count()}
  out["runs"] = [run(r) for r in spec.get("runs", [])]
  if spec.get("memory"):
    out["memory"] = init_memory(spec["memory"])
  return out


if __name__ == "__main__":
  print("RESULT " + json.dumps(main(json.loads(sys.argv[1]))), flush=True)
