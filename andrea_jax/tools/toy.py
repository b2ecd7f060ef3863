"""The seed's 4-dimensional toy residual block (brief, section 3), as a test vector.

``y = x + F(LN(x))`` with gamma = 1, beta = 0, eps = 1e-5 and the fixed branch
``F(v)_i = s * tanh(0.6 v_i + 0.3 v_{(i+1) mod 4})``, s = 0.8, on x = (1, -1, 2, 0).
The tests and notebook 1 both build the table from these functions.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from andrea_jax import norms

X = np.array([1.0, -1.0, 2.0, 0.0])
STRENGTH = 0.8
LN_PARAMS = {"scale": np.ones(4), "bias": np.zeros(4)}
EPS = 1e-5

# The seed's published table, to 3 decimals.
SEED_TABLE = {
    "residual input x": [1.000, -1.000, 2.000, 0.000],
    "input to F (LayerNorm(x))": [0.447, -1.342, 1.342, -0.447],
    "branch update F": [-0.107, -0.306, 0.468, -0.107],
    "block output (pre-norm)": [0.893, -1.306, 2.468, -0.107],
}


def branch(v, strength: float = STRENGTH):
  """The seed's fixed branch: ``s * tanh(0.6 v_i + 0.3 v_{(i+1) mod 4})``."""
  return strength * jnp.tanh(0.6 * v + 0.3 * jnp.roll(v, -1))


def table(x=X, strength: float = STRENGTH) -> dict[str, np.ndarray]:
  """The seed's rows computed with the project's ``layer_norm`` and ``residual_sublayer``."""
  x = jnp.asarray(x, jnp.float32)
  normed = norms.layer_norm(x, LN_PARAMS["scale"], LN_PARAMS["bias"], EPS)
  f = lambda v: branch(v, strength)
  return {
      "residual input x": np.asarray(x),
      "input to F (LayerNorm(x))": np.asarray(normed),
      "branch update F": np.asarray(f(normed)),
      "block output (pre-norm)": np.asarray(norms.residual_sublayer(x, f, LN_PARAMS, "pre", EPS)),
      "block output (post-norm)": np.asarray(norms.residual_sublayer(x, f, LN_PARAMS, "post", EPS)),
  }


def format_table(rows: dict[str, np.ndarray]) -> str:
  width = max(map(len, rows))
  head = " " * width + "".join(f"{i:>9}" for i in range(4))
  return "\n".join([head] + [f"{name:<{width}}" + "".join(f"{v:9.3f}" for v in values)
                             for name, values in rows.items()])
