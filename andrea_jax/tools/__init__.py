"""Tools that read or check the model and are not the model: nothing in the core imports them.

    lens.py         the residual stream of the scanned model: capture, logit lens,
                    direct logit attribution, head ablation (``experiments.inspect``)
    coord_check.py  the coordinate check of Tensor Programs V across widths
                    (``experiments.coord_check``; its fast-compile flags serve the tests)
    flax_model.py   ``AndreaLM``, the same model as a Flax Linen module tree (the tests
                    check that it agrees with ``andrea_jax.model``)
    toy.py          the seed's 4-dimensional toy residual block, a test vector (notebook 1)

The core (``andrea_jax/*.py``: the model, its training, data and checkpoints) never imports
from here; ``tests/test_imports.py`` checks it. ``forecast.py`` stays in the core: the
training loop compiles its programs ahead of time and prints the run's estimate through it.
"""
