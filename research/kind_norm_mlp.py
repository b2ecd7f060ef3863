"""Empty: the norm x MLP study's kinds (``ProfilePair``, ``Diminishing``) are ``Contrast``s now
(research/kind_contrast.py: ``flat`` and ``holm="first"``). The file stays while research/identity.py's
``KINDS`` names it."""
