"""The research framework: what a study is, how its sweep runs, how its claims are judged and reported.

``andrea_jax`` is the model and its training; ``experiments`` holds the commands and
configs (and the study definitions); this package is what runs and judges studies on them:
``sweep`` (a study's cells), ``runner`` (training them), ``cells`` (their records),
``curves``, ``stats``, ``power`` and ``claims`` (the maths of claims), ``identity`` (the
rules' hash, fixed before a run), ``report`` (the report skeleton) and ``provenance``.
"""
