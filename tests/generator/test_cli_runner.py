"""The tests' way of running the generator's command line (tests/support.run_generator: a forked child with the
generator already imported) answers as `python -m generator` does, and sees the files as they are now."""
import pytest

from generator import charts
from tests.support import run_generator, run_generator_process


@pytest.mark.parametrize("args", [
    ["environments"],
    ["values", "--env", "minikube", "--app", "ray-cluster"],
    ["render", "--env", "nope"],
    ["render", "--no-such-option"],
    ["values"],
], ids=["listing", "values", "unknown-environment", "unknown-option", "missing-argument"])
def test_the_forked_command_line_answers_as_python_dash_m_generator(repo_root, args):
    forked, process = run_generator(repo_root, *args), run_generator_process(repo_root, *args)
    assert (forked.returncode, forked.stdout, forked.stderr) == (process.returncode, process.stdout, process.stderr)
    assert forked.stdout or forked.stderr


def test_a_file_edited_after_an_earlier_read_is_read_anew(repo_copy, tmp_path):
    """The generator caches what it reads by path (the charts found, their schemas); a read in this process fills
    those caches, which the child inherits and empties, so an edit made after that read is seen."""
    assert charts.available(repo_copy)["ray-cluster"].version != "9.9.9"  # this process's cache, as it was
    chart_yaml = repo_copy / "charts" / "ray-cluster" / "Chart.yaml"
    text = chart_yaml.read_text()
    version = next(line for line in text.splitlines() if line.startswith("version:"))
    chart_yaml.write_text(text.replace(version, "version: 9.9.9"))
    proc = run_generator(repo_copy, "render", "--env", "minikube", "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    cluster = next((tmp_path / "out" / "apps" / "minikube" / "ray-cluster").glob("raycluster-*.yaml"))
    assert "charts/ray-cluster (9.9.9)" in cluster.read_text().splitlines()[1]
