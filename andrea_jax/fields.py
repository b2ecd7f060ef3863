"""How a config field is declared: once, in its group's frozen dataclass, with its default
and its one-line doc.

    mlp_ratio: float = fields.default(4.0, "MLP hidden width = round(mlp_ratio * d_model).")
    d_model: int = fields.required("Width of the residual stream.")

The groups (``ModelConfig`` in ``model_config.py``, ``TrainConfig`` in ``step.py``, the
others in ``config.py``) are the schema's one home: the ConfigDict an experiment starts
from (``configdict.py``), the defaults a saved run lacks (``run_record.ADDED_FIELDS``) and
the docs (``doc``) are all read from them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

# The metadata key of a field's doc.
DOC = "doc"


def default(value: Any, doc: str) -> Any:
  """A field whose default is ``value`` (immutable: a number, a string, a bool)."""
  return dataclasses.field(default=value, metadata={DOC: doc})


def required(doc: str) -> Any:
  """A field with no default: each config gives it (the model's shape), by name (so it may
  stand among fields with defaults)."""
  return dataclasses.field(kw_only=True, metadata={DOC: doc})


def doc(cls: type, name: str) -> str:
  """The one-line doc of field ``name`` of group ``cls``."""
  return next(f.metadata[DOC] for f in dataclasses.fields(cls) if f.name == name)


def defaults(cls: type) -> dict[str, Any]:
  """``{field: default}`` of the fields of ``cls`` that have one, in declaration order."""
  return {f.name: f.default for f in dataclasses.fields(cls)
          if f.default is not dataclasses.MISSING}
