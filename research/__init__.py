"""The research framework: what a study is, how its sweep runs, how its claims are judged and reported.

``andrea_jax`` is the model and training; ``experiments`` the commands, configs and study
definitions; this package runs and judges studies (see ``docs/study.md``).
"""
