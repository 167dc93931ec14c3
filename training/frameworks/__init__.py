"""Stage three: one module per framework (``pytorch``, ``tensorflow``, ``xgboost``; ``user`` loads a user's trainer),
each with its loop, its model and its :class:`~training.frameworks.registry.Framework` entry, and ``trainer``, which
builds the Ray Train trainer of a job. The rest of the package asks :mod:`training.frameworks.registry`; it names
no framework itself."""
