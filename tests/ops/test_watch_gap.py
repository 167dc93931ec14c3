"""make watch after its retry push: Argo CD may prune the old run before it creates the new one; the watch waits
through that gap instead of failing with 'no job' (the e2e caught it)."""
from __future__ import annotations

from types import SimpleNamespace as NS

from ops import jobs as jobs_mod
from ops import watch


def test_wait_new_run_survives_the_gap_between_prune_and_create(monkeypatch):
    answers = [NS(name="job-old00000"), None, None, NS(name="job-new11111")]

    def find_current(_clients, _target, _job):
        return answers.pop(0)
    monkeypatch.setattr(jobs_mod, "find_current", find_current)
    watch._wait_new_run(None, None, "job", "job-old00000", timeout=5, poll=0)
    assert answers == []


def test_find_current_is_none_only_when_there_is_no_run(monkeypatch):
    def no_run(*_):
        raise jobs_mod.NoRun("no job")
    monkeypatch.setattr(jobs_mod, "find", no_run)
    assert jobs_mod.find_current(None, None, "job") is None

    def two_kinds(*_):
        raise jobs_mod.OpsError("job 'x' matches two kinds")
    monkeypatch.setattr(jobs_mod, "find", two_kinds)
    try:
        jobs_mod.find_current(None, None, "job")
    except jobs_mod.OpsError as err:
        assert "two kinds" in str(err)
    else:
        raise AssertionError("a job of two kinds is still an error")
