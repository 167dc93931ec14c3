"""Loading a user's per-worker training function (``trainConfig.trainerPath``) and running it under Ray Train.

``package.module:function`` is imported normally (workers import it by name: it must be installed in the image or
importable from the working directory). ``path/to/file.py:function`` is loaded from the file on the driver and
shipped to the workers by value (cloudpickle), so the file need not exist on the worker nodes.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from training.errors import TrainerLoadError

FIELD = "trainConfig.trainerPath"


def load_function(target: str, search_dirs: Iterable[Path] = ()) -> Callable:
    """Resolve ``module:function`` or ``file.py:function`` to a callable taking one argument (the WorkerContext)."""
    if ":" not in target:
        raise TrainerLoadError(f"{FIELD} {target!r} must look like package.module:function or path/file.py:function", field=FIELD)
    where, func_name = target.rsplit(":", 1)
    if where.endswith(".py") or "/" in where or os.sep in where:
        # Relative paths: the current folder, the spec file's folder, then the folder holding the installed
        # ``training`` package (so ``training/examples/user_trainer.py:train`` works inside the image too).
        package_parent = Path(__file__).resolve().parents[2]
        candidates = ([Path(where)] if Path(where).is_absolute()
                      else [Path.cwd() / where] + [Path(d) / where for d in search_dirs] + [package_parent / where])
        path = next((p for p in candidates if p.is_file()), None)
        if path is None:
            raise TrainerLoadError(f"{FIELD}: file {where} not found (looked in {', '.join(str(c.parent) for c in candidates)})", field=FIELD)
        mod_name = "training_user_" + re.sub(r"\W", "_", path.stem) + f"_{abs(hash(str(path.resolve()))) % 10**8}"
        spec = importlib.util.spec_from_file_location(mod_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            del sys.modules[mod_name]
            raise TrainerLoadError(f"{FIELD}: importing {path} failed: {type(exc).__name__}: {exc}", field=FIELD) from None
        import ray.cloudpickle

        ray.cloudpickle.register_pickle_by_value(module)
    else:
        try:
            module = importlib.import_module(where)
        except Exception as exc:
            raise TrainerLoadError(f"{FIELD}: cannot import module {where!r}: {type(exc).__name__}: {exc}", field=FIELD) from None
    fn = getattr(module, func_name, None)
    if fn is None:
        raise TrainerLoadError(f"{FIELD}: {where} has no attribute {func_name!r}", field=FIELD)
    if not callable(fn):
        raise TrainerLoadError(f"{FIELD}: {where}:{func_name} is not callable", field=FIELD)
    try:
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.default is inspect.Parameter.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = [None]
    if len(params) != 1:
        raise TrainerLoadError(f"{FIELD}: {where}:{func_name} must take exactly one argument (the WorkerContext)", field=FIELD)
    return fn
