"""Named configs: one Python file per config, each with ``get_config(arg=None)``."""
