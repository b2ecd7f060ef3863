"""A smoke sweep for the tests (``grid.py``): no claims of its own, judged and reported as the norm x MLP study."""
