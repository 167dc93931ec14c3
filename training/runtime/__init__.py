"""Stage two: what every run and every worker needs, whatever the framework: the Ray session and its resources
(``cluster``), the worker's context and its sessions (``worker``, ``sessions``), checkpoints, storage (the one
writer), the shared-storage check, data, preflight, failures and the test hooks (``faults``). Imports neither
``training.frameworks`` nor ``training.tune``."""
