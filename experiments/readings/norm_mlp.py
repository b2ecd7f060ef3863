"""The norm x MLP study's report item: the per-layer profiles at initialisation (`InitProfiles`)."""

from __future__ import annotations

import dataclasses

from research import kinds
from research.kind_choice import plot_profiles


@dataclasses.dataclass(frozen=True)
class InitProfiles:
  """A report item: ``arms``' per-layer attention gradient norms and residual stream at initialisation (the
  MLP's gradient norms are the gradient claim's own figure, ``Contrast.figures``)."""
  arms: tuple[str, ...] = ()

  def section(self, data: kinds.Data, out: str) -> kinds.Section:
    panels = tuple((p, "init") for p in ("grad_attn", "residual_norm"))
    return kinds.Section([], [plot_profiles(data, self.arms, panels, out, "init_profiles.png")])
