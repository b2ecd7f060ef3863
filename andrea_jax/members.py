"""What a run trains: ``Models``, one model (a single run) or a group's members, as the
functions and directories the training loop works with; ``per_member`` reads a value of all
of them on the host.

``train.single_run`` and ``multi.group`` build it; ``loop.train_loop`` steps it, and the
loop's evaluation (``validation``) and rows (``logger``) read it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import numpy as np


@dataclasses.dataclass
class Models:
  """What a run trains: one model (a single run) or a group's members.

  Its functions take and return the state of all of them; with ``stacked`` every leaf of
  the state (and the metrics, evaluations and probes) carries a leading member axis.
  """
  dirs: list[str]  # each member's directory for its metrics and summary (single: the workdir)
  batch_seeds: list[int]  # each member's batch order (``loader.batch_at``'s seed)
  stacked: bool
  abstract: Any  # the state's shapes, dtypes (and shardings): the target of a restore
  init: Callable[[], Any]  # a fresh state
  step: Callable  # jitted, donating: (state, batch) -> (state, {"loss", "grad_norm", "good"})
  eval_loss: Callable  # jitted: (params, [B, T+1] batch) -> mean loss (of each member)
  learning_rate: Callable[[int], np.ndarray]  # the rate of update k (0-based) of each member
  place: Callable[[np.ndarray], jax.Array]  # this process's rows -> the step's batch
  summary_fields: list[dict]  # what each member's summary adds (a group: its rate and seeds)
  tensorboard: bool = True  # TensorBoard event files beside metrics.jsonl
  n_devices: int = 1  # the devices the program runs on (a group: one; a run: its mesh)

  @property
  def n(self) -> int:
    return len(self.dirs)


def per_member(value) -> np.ndarray:
  """A host array with a leading member axis, whether ``value`` is stacked or not."""
  return np.atleast_1d(np.asarray(jax.device_get(value)))
