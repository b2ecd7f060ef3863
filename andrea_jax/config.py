"""The run config below the boundary: one frozen, typed tree built once from the ConfigDict.

An experiment's ``ml_collections`` ConfigDict (``experiments/configs/*.py``; every field's
default and meaning are in ``experiments/configs/common.py``, their one home) becomes a
``RunConfig`` at the entry points (``train.train_and_evaluate``, ``multi.train_members``,
the commands under ``experiments/``): ``RunConfig.from_configdict(config)``. Below them
the library reads only this tree, one typed group per group of the config:

    model        ModelConfig         (the model's shape and variant, with its checks)
    data         DataConfig          (corpus, split, tokenizer, cache)
    train        step.TrainConfig    (optimizer, schedule, batches, logging, with its checks)
    checkpoint   CheckpointConfig    sample        SampleConfig
    diagnostics  DiagnosticsConfig   mesh          MeshConfig
    distributed  DistributedConfig

``ModelConfig`` and ``TrainConfig`` keep their homes (``model_config.py`` and ``step.py``,
their first readers); this module adds the other groups and the tree. The groups hold the
values as the ConfigDict has them (``"auto"`` settings unresolved:
``model_config.resolve_auto`` does that where the platform is known). ``to_dict()`` is the
ConfigDict's JSON exactly (``json.loads(config.to_json_best_effort())``): what a workdir
records in ``config.json`` and ``config_history.json`` and what the resume rules compare
(``resume.py``), so workdirs written before this module resume as they did.

The new groups declare no defaults (the defaults live in ``common.py`` alone): a field
they name that the config lacks is refused, and so is a field or group they do not name,
with a line that names it and the fix. ``ModelConfig`` (and ``TrainConfig``'s
``init_from``) keep the defaults they have always had, equal to ``common.py``'s
(``tests/test_config.py`` checks), so a hand-built model group may leave them out.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import re
from typing import Any, Mapping

from andrea_jax import errors
from andrea_jax import step as step_lib
from andrea_jax.model_config import ModelConfig

# Where each field's default and meaning are written (the fix a refusal points to).
DEFAULTS = "experiments/configs/common.py"


@dataclasses.dataclass(frozen=True)
class DataConfig:
  """The ``data`` group: where the text comes from and how it is tokenized and split."""
  path: str
  hf_dataset: str
  hf_config: str
  hf_split: str
  text_field: str
  shards: str
  extensions: str
  max_docs: int
  val_fraction: float
  val_max_bytes: int
  split_seed: int
  shuffle_seed: int
  tokenizer_path: str
  tokenizer_sample_bytes: int
  vocab_size: int
  shard_tokens: int
  workers: int
  cache_dir: str
  utf8_errors: str
  doc_separator: str
  prefetch: int


@dataclasses.dataclass(frozen=True)
class CheckpointConfig:
  """The ``checkpoint`` group: when orbax saves and how many it keeps."""
  every: int
  every_seconds: int
  keep: int
  keep_steps: str

  def __post_init__(self):
    for name, what in (("every", "steps"), ("keep", "checkpoints")):
      if not getattr(self, name) > 0:
        raise errors.ConfigError(f"checkpoint.{name}={getattr(self, name)!r}: expected a "
                                 f"positive number of {what}")
    if not self.every_seconds >= 0:
      raise errors.ConfigError(f"checkpoint.every_seconds={self.every_seconds!r}: expected "
                               f"seconds >= 0 (0 turns the saves by wall time off)")
    self.kept_steps  # pylint: disable=pointless-statement  (its own checks)

  @property
  def kept_steps(self) -> tuple[int, ...]:
    """The steps of ``keep_steps`` (``"96,192"``; ``""``: none): saved and kept beside the
    newest ``keep``, e.g. where cooldowns branch off a run (``cooldown.py``)."""
    text = str(self.keep_steps).replace(" ", "")
    steps = [int(s) for s in text.split(",")] if re.fullmatch(r"\d+(,\d+)*", text) else []
    if text and not (steps and min(steps) > 0):
      raise errors.ConfigError(f"checkpoint.keep_steps={self.keep_steps!r}: expected steps to save "
                               f"and keep as 'a,b,...' (positive integers, e.g. '96,192'), or '' for none")
    return tuple(sorted(set(steps)))


@dataclasses.dataclass(frozen=True)
class SampleConfig:
  """The ``sample`` group: what the end of a run generates."""
  num_samples: int
  prompt: str
  max_new_tokens: int
  temperature: float
  top_k: int
  top_p: float


@dataclasses.dataclass(frozen=True)
class DiagnosticsConfig:
  """The ``diagnostics`` group: per-layer norms written to ``diagnostics.jsonl``."""
  enabled: bool
  every: int
  early_steps: int


@dataclasses.dataclass(frozen=True)
class MeshConfig:
  """The ``mesh`` group: the ("data", "fsdp") device grid (``sharding.make_mesh``)."""
  data: int
  fsdp: int


@dataclasses.dataclass(frozen=True)
class DistributedConfig:
  """The ``distributed`` group: ``jax.distributed.initialize`` (``sharding.initialize``)."""
  enabled: bool
  coordinator_address: str
  num_processes: int
  process_id: int


@dataclasses.dataclass(frozen=True)
class RunConfig:
  """A whole run's settings, typed, frozen and hashable (the module docstring)."""
  model: ModelConfig
  data: DataConfig
  train: step_lib.TrainConfig
  checkpoint: CheckpointConfig
  sample: SampleConfig
  diagnostics: DiagnosticsConfig
  mesh: MeshConfig
  distributed: DistributedConfig

  @classmethod
  def from_configdict(cls, config) -> RunConfig:
    """The typed tree of an ``ml_collections`` ConfigDict (references resolved)."""
    return cls.from_dict(json.loads(config.to_json_best_effort()))

  @classmethod
  def from_dict(cls, config: Mapping[str, Any]) -> RunConfig:
    """The typed tree of nested dicts (a ConfigDict's JSON, a workdir's ``config.json``);
    a group or field it does not know, or a field it needs and lacks, is a ConfigError."""
    groups = {f.name: f.type for f in dataclasses.fields(cls)}
    for name in config:
      if name not in groups:
        raise errors.ConfigError(f"config group {name!r} is not one of the run config's "
                                 f"({', '.join(groups)}): remove it or rename it"
                                 f"{_did_you_mean(name, groups)}")
    missing = [name for name in groups if name not in config]
    if missing:
      raise errors.ConfigError(f"the config has no {missing[0]!r} group: build configs with "
                               f"{DEFAULTS}'s base_config, which gives every group")
    return cls(**{name: _group(name, GROUP_TYPES[name], config[name]) for name in groups})

  def to_dict(self) -> dict:
    """Nested dicts of plain values: the ConfigDict's JSON, field for field."""
    return dataclasses.asdict(self)


# The dataclass of each group (the annotations above are strings under ``annotations``).
GROUP_TYPES = {"model": ModelConfig, "data": DataConfig, "train": step_lib.TrainConfig,
               "checkpoint": CheckpointConfig, "sample": SampleConfig,
               "diagnostics": DiagnosticsConfig, "mesh": MeshConfig,
               "distributed": DistributedConfig}


def run_config(config) -> RunConfig:
  """``config`` as a ``RunConfig``: one as it is, a ConfigDict converted (at the boundary)."""
  return config if isinstance(config, RunConfig) else RunConfig.from_configdict(config)


def data_config(config) -> DataConfig:
  """The ``data`` group of a ConfigDict alone, typed: read before the rest of the config is
  settled (``experiments.run`` sniffs the corpus before it fits the run to its data)."""
  return _group("data", DataConfig, json.loads(config.data.to_json_best_effort()))


def _group(name: str, cls: type, values) -> Any:
  """``cls(**values)``, refusing unknown fields and missing ones that have no default."""
  if not isinstance(values, Mapping):
    raise errors.ConfigError(f"config.{name} is {values!r}, not a group of fields: set it to "
                             f"the group {DEFAULTS} gives")
  fields = {f.name: f for f in dataclasses.fields(cls)}
  for field in values:
    if field not in fields:
      raise errors.ConfigError(f"{name}.{field} is not a field of the {name} group ({DEFAULTS} "
                               f"lists them): remove it or rename it"
                               f"{_did_you_mean(field, fields)}")
  for field, f in fields.items():
    if (field not in values and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING):
      raise errors.ConfigError(f"the config has no {name}.{field}: add it ({DEFAULTS} gives "
                               f"its default and meaning)")
  return cls(**values)


def _did_you_mean(name: str, known) -> str:
  close = difflib.get_close_matches(name, list(known), n=1)
  return f"; did you mean {close[0]!r}?" if close else ""
