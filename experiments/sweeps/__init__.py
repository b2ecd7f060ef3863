"""Sweep definitions: each module has ``get_sweep(scale) -> Sweep`` (see ``base.py``)."""
