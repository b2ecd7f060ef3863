"""The run config: its schema, and the frozen, typed tree the library reads below the boundary.

The schema is a frozen dataclass per group of the config, the one place each field, its
default and its one-line doc are written (``fields.py``):

    model        ModelConfig         (model_config.py: the model's shape and variant, checked)
    data         DataConfig          (corpus, split, tokenizer, cache)
    train        step.TrainConfig    (step.py: optimizer, schedule, batches, logging, checked)
    checkpoint   CheckpointConfig    sample        SampleConfig
    diagnostics  DiagnosticsConfig   mesh          MeshConfig
    distributed  DistributedConfig

Everything else is read from it: the ``ml_collections`` ConfigDict an experiment starts
from and overrides (``configdict.py``: ``--config.GROUP.FIELD``), and the values a run saved
before a field existed trained with (``run_record.ADDED_FIELDS``). ``ModelConfig`` and
``TrainConfig`` live with their first readers; this module adds the other groups and the tree.

An experiment's ConfigDict becomes a ``RunConfig`` at the entry points
(``train.train_and_evaluate``, ``multi.train_members``, the commands under ``experiments/``):
``RunConfig.from_configdict(config)``. Below them the library reads only this tree. The
groups hold the values as the ConfigDict has them (``"auto"`` settings unresolved:
``model_config.resolve_auto`` does that where the platform is known). ``to_dict()`` is the
ConfigDict's JSON exactly (``json.loads(config.to_json_best_effort())``): what a workdir
records in ``config.json`` and ``config_history.json`` and what the resume rules compare
(``resume.py``).

``from_dict`` reads a whole record: a field or group it does not know is refused, and so is
a field the record lacks (a saved run's record is completed first, with the values it trained
with: ``run_record.with_added_fields``), with a line that names it and the fix.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import re
from typing import Any, Mapping

from andrea_jax import errors
from andrea_jax import fields
from andrea_jax import file_formats
from andrea_jax import step as step_lib
from andrea_jax.model_config import ModelConfig


@dataclasses.dataclass(frozen=True)
class DataConfig:
  """The ``data`` group: where the text comes from and how it is tokenized and split."""
  path: str = fields.default(
      "", "A text, JSONL or Parquet file (also .gz/.zst), a glob or a folder of them, a "
      "save_to_disk folder; '' = built-in.")
  hf_dataset: str = fields.default(
      "", "A Hugging Face datasets name or local folder, streamed by load_dataset ('' = data.path "
      "or built-in).")
  hf_config: str = fields.default(
      "", "The datasets configuration (e.g. 'sample-10BT' of HuggingFaceFW/fineweb-edu; '' = "
      "default).")
  hf_split: str = fields.default(
      "train", "The datasets split read (and the split folder of a saved DatasetDict).")
  text_field: str = fields.default(
      "text", "The field (JSONL) or column (Parquet, Arrow, datasets) that holds a document's "
      "text.")
  shards: str = fields.default(
      "", "Existing llm.c token shards to train on (a folder or glob; names with 'val' validate); "
      "needs tokenizer_path.")
  extensions: str = fields.default(
      file_formats.EXTENSIONS, "File extensions read when data.path is a folder ('*': every file, "
      "extensionless too).")
  max_docs: int = fields.default(
      0, "At most this many documents from the built-in corpus (0 = all of them).")
  val_fraction: float = fields.default(
      0.05, "Share of the corpus held out for validation, by a hash of each block of text (about "
      "8k characters).")
  val_max_bytes: int = fields.default(
      20_000_000, "The validation side stops growing at this many bytes of text: small and fixed "
      "at any corpus size.")
  split_seed: int = fields.default(
      0, "Seed of the train/val split and the tokenizer's sample (cache key).")
  shuffle_seed: int = fields.default(
      0, "Seed of the batch order only: runs differing in it share tokenizer and validation set.")
  tokenizer_path: str = fields.default(
      "", "A tokenizer.json to use; empty = train one of model.vocab_size on a sample of the "
      "training split.")
  tokenizer_sample_bytes: int = fields.default(
      200_000_000, "The tokenizer trains on at most this many bytes of training text, a seeded "
      "sample.")
  vocab_size: int = fields.required("Tokenizer vocabulary size; must equal model.vocab_size.")
  shard_tokens: int = fields.default(
      100_000_000, "Tokens per shard file (llm.c's 100 M: no header count overflows, whatever the "
      "corpus).")
  workers: int = fields.default(
      0, "Encoding processes (0 = this process, the tokenizer's threads on every core).")
  cache_dir: str = fields.default(
      "runs/cache", "Prepared tokenizer and token shards are cached here, keyed by the corpus's "
      "fingerprint.")
  utf8_errors: str = fields.default(
      "error", "What to do with bytes that are not UTF-8: 'error' (name file and offset) or "
      "'replace'.")
  doc_separator: str = fields.default(
      "", "Split a data.path text file into documents at this string ('' = one file, one "
      "document).")
  prefetch: int = fields.default(2, "Batches the loader prepares ahead in a background thread.")


@dataclasses.dataclass(frozen=True)
class CheckpointConfig:
  """The ``checkpoint`` group: when orbax saves and how many it keeps."""
  every: int = fields.default(
      500, "Save every this many updates, at the end and on SIGTERM/SIGINT (may change on a "
      "resume).")
  every_seconds: int = fields.default(
      1800, "Also save once this many seconds passed since the newest save or this run's start: a "
      "kill loses at most this much work (Levanter's save_interval; 0 = by steps alone).")
  keep: int = fields.default(3, "Keep the newest this many checkpoints.")
  keep_steps: str = fields.default(
      "", "Also save and keep these steps, \"a,b,...\" (\"\" none): where cooldowns branch off the "
      "run (docs/training.md, \"Cooldown\").")

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
  num_samples: int = fields.default(
      3, "Samples printed (and saved to samples.txt) at the end of a run (0 = none).")
  prompt: str = fields.default(
      "def ", "The prompt the samples continue ('' = start from the end-of-text token).")
  max_new_tokens: int = fields.default(64, "New tokens per sample.")
  temperature: float = fields.default(0.8, "Softmax temperature (0 = greedy).")
  top_k: int = fields.default(50, "Keep only the k most likely tokens (0 = all).")
  top_p: float = fields.default(
      0.95, "Nucleus sampling: keep the smallest set of tokens with this much probability.")


@dataclasses.dataclass(frozen=True)
class DiagnosticsConfig:
  """The ``diagnostics`` group: per-layer norms written to ``diagnostics.jsonl``."""
  enabled: bool = fields.default(
      False, "Record diagnostics at all (off by default: each probe costs a forward and backward "
      "pass).")
  every: int = fields.default(
      50, "Probe norms, attention-logit maxima, output log Z and RMS at step 0, every this many "
      "steps, the last.")
  early_steps: int = fields.default(
      10, "Record |delta W| / |W| per layer for each of the first this many updates.")


@dataclasses.dataclass(frozen=True)
class MeshConfig:
  """The ``mesh`` group: the ("data", "fsdp") device grid (``sharding.make_mesh``)."""
  data: int = fields.default(
      -1, "Data-parallel replicas; -1 = all devices left over by the other axis.")
  fsdp: int = fields.default(
      1, "Devices that shard the parameters and optimizer state (FSDP); 1 = replicate them.")


@dataclasses.dataclass(frozen=True)
class DistributedConfig:
  """The ``distributed`` group: ``jax.distributed.initialize`` (``sharding.initialize``)."""
  enabled: bool = fields.default(
      False, "Call jax.distributed.initialize before training (one process per host or per GPU).")
  coordinator_address: str = fields.default(
      "", "host:port of process 0; empty = let JAX detect the cluster (SLURM, Open MPI, TPU).")
  num_processes: int = fields.default(
      1, "Number of processes, with an explicit coordinator_address.")
  process_id: int = fields.default(
      0, "This process's index in 0..num_processes-1, with an explicit coordinator_address.")


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
    a group or field it does not know, or a field it lacks, is a ConfigError."""
    groups = {f.name: f.type for f in dataclasses.fields(cls)}
    for name in config:
      if name not in groups:
        raise errors.ConfigError(f"config group {name!r} is not one of the run config's "
                                 f"({', '.join(groups)}): remove it or rename it"
                                 f"{_did_you_mean(name, groups)}")
    missing = [name for name in groups if name not in config]
    if missing:
      raise errors.ConfigError(f"the config has no {missing[0]!r} group: build configs with "
                               f"andrea_jax/configdict.py's default_config, which gives every "
                               f"group")
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


def defaults() -> dict[str, Any]:
  """``{"group.field": default}`` of every field that has a default, group by group."""
  return {f"{group}.{name}": value for group, cls in GROUP_TYPES.items()
          for name, value in fields.defaults(cls).items()}


def home(cls: type) -> str:
  """The file that declares group ``cls``, each field with its default and doc."""
  return cls.__module__.replace(".", "/") + ".py"


def _group(name: str, cls: type, values) -> Any:
  """``cls(**values)``, refusing unknown fields and missing ones (``from_dict``)."""
  if not isinstance(values, Mapping):
    raise errors.ConfigError(f"config.{name} is {values!r}, not a group of fields: set it to "
                             f"the group {home(cls)} declares")
  known = [f.name for f in dataclasses.fields(cls)]
  for field in values:
    if field not in known:
      raise errors.ConfigError(f"{name}.{field} is not a field of the {name} group ({home(cls)} "
                               f"lists them): remove it or rename it"
                               f"{_did_you_mean(field, known)}")
  for field in known:
    if field not in values:
      raise errors.ConfigError(f"the config has no {name}.{field}: add it ({home(cls)} gives "
                               f"its default and meaning)")
  return cls(**values)


def _did_you_mean(name: str, known) -> str:
  close = difflib.get_close_matches(name, list(known), n=1)
  return f"; did you mean {close[0]!r}?" if close else ""
