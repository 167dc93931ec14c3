"""The modules' old paths (the flat layout before training/ was arranged by stage) still name the moved modules:
code written against them, and what Tune and pickle stored under them, keep working."""

from __future__ import annotations

import importlib
import pickle
import subprocess
import sys

import pytest

from tests.training.support import REPO
from training.moved import MOVED

#: The names of the old ``training.spec``, ``training.job`` and ``training.tune`` modules that the faces hand on.
OLD_JOB = ("FrozenMap", "freeze", "thaw", "Workers", "Model", "MODEL_FIELDS", "TRAINING_FIELDS", "Training", "Data",
           "Checkpoint", "SearchParam", "Tune", "Job")
OLD_SPEC = ("SCHEMA_DIR", "JOB_SPEC_SCHEMA", "RESULT_SCHEMA", "STORAGE_ENV", "DEFAULT_STORAGE", "INVALID_SPEC_NAME",
            "NAME_PATTERN", "load_schema", "load_spec_file", "validate_spec", "normalize", "data_block", "load_job")
OLD_TUNE = ("DRIVER_MEMORY", "experiment_exists", "check_resume", "domain", "param_space", "make_scheduler",
            "trial_resources", "check_trial_fits", "run_experiment")


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_is_the_moved_module(old):
    assert importlib.import_module(old) is importlib.import_module(MOVED[old])
    assert sys.modules[old] is sys.modules[MOVED[old]]


def test_the_old_names_are_the_same_objects_loaded_once():
    """In a fresh process: an old path first, then the new one; one module, executed once."""
    probe = ("import sys\n"
             "from training.job import Job as old\n"
             "import training.job.parts as parts\n"
             "import training.spec as spec, training.job as job\n"
             "assert spec is job and spec.load_job is job.build.load_job\n"
             "from training.tune_events import Progress\n"
             "import training.tune.events as events\n"
             "assert old is parts.Job and Progress is events.Progress\n"
             "assert sys.modules['training.spec'] is job and parts.__name__ == 'training.job.parts'\n"
             "from training import storage, WorkerContext\n"
             "from training.runtime.worker import WorkerContext as ctx\n"
             "assert storage is sys.modules['training.runtime.storage'] and WorkerContext is ctx\n"
             "print('ok')")
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_a_pickle_naming_an_old_path_loads():
    from training.job.parts import Workers

    stored = pickle.dumps(Workers(count=2), protocol=0).replace(b"training.job.parts", b"training.job")
    assert b"training.job" in stored
    assert pickle.loads(stored) == Workers(count=2)


@pytest.mark.parametrize("package, names", [("training.spec", OLD_SPEC), ("training.job", OLD_JOB),
                                            ("training.tune", OLD_TUNE)])
def test_a_package_that_took_a_module_name_hands_on_its_names(package, names):
    face = importlib.import_module(package)
    missing = [n for n in names if not hasattr(face, n)]
    assert not missing
    with pytest.raises(AttributeError):
        face.no_such_name  # noqa: B018


def test_an_unknown_module_is_not_made_up():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("training.no_such_module")
