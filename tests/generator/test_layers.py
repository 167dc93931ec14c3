"""Merge semantics: maps merge, lists and scalars replace, null deletes; provenance follows the winner."""
from pathlib import Path

import pytest

from generator.errors import RenderError
from generator.layers import Layer, load_yaml, merge


def write(tmp_path: Path, name: str, text: str) -> Layer:
    path = tmp_path / name
    path.write_text(text)
    return load_yaml(path, name)


def test_maps_merge_recursively(tmp_path):
    base = write(tmp_path, "base.yaml", "a:\n  b: 1\n  c: {d: 2, e: 3}\n")
    over = write(tmp_path, "env.yaml", "a:\n  c: {e: 4, f: 5}\n")
    assert merge(base, over).data == {"a": {"b": 1, "c": {"d": 2, "e": 4, "f": 5}}}


def test_lists_are_replaced_whole(tmp_path):
    base = write(tmp_path, "base.yaml", "tolerations: [a, b, c]\n")
    over = write(tmp_path, "env.yaml", "tolerations: [z]\n")
    assert merge(base, over).data == {"tolerations": ["z"]}


def test_null_deletes_a_key(tmp_path):
    base = write(tmp_path, "base.yaml", "groups:\n  cpu: {replicas: 2}\n  gpu: {replicas: 1}\n")
    over = write(tmp_path, "env.yaml", "groups:\n  cpu: null\n")
    merged = merge(base, over)
    assert merged.data == {"groups": {"gpu": {"replicas": 1}}}
    assert ("groups", "cpu") not in merged.origins


def test_scalar_replaces_map_and_map_replaces_scalar(tmp_path):
    base = write(tmp_path, "base.yaml", "a: {b: 1}\nc: 2\n")
    over = write(tmp_path, "env.yaml", "a: 3\nc: {d: 4}\n")
    assert merge(base, over).data == {"a": 3, "c": {"d": 4}}


def test_origins_point_at_the_layer_that_won(tmp_path):
    base = write(tmp_path, "base.yaml", "a:\n  b: 1\n  c: 2\n")
    over = write(tmp_path, "env.yaml", "# comment\na:\n  c: 9\n")
    merged = merge(base, over)
    assert (merged.locate(("a", "b")).file, merged.locate(("a", "b")).line) == ("base.yaml", 2)
    assert (merged.locate(("a", "c")).file, merged.locate(("a", "c")).line) == ("env.yaml", 3)
    # a path below a known key is located at that key, with the full path
    assert merged.locate(("a", "c", "x")).path == ("a", "c", "x")


def test_merge_does_not_mutate_its_inputs(tmp_path):
    base = write(tmp_path, "base.yaml", "a: {b: 1}\n")
    over = write(tmp_path, "env.yaml", "a: {c: 2}\n")
    merge(base, over)
    assert base.data == {"a": {"b": 1}}


def test_sub_and_under_rekey_origins(tmp_path):
    layer = write(tmp_path, "x.yaml", "jobs:\n  one:\n    job: {entrypoint: run}\n")
    job = layer.sub("jobs", "one", "job").under("job")
    assert job.data == {"job": {"entrypoint": "run"}}
    assert job.locate(("job", "entrypoint")).path == ("jobs", "one", "job", "entrypoint")


def test_yaml_syntax_error_names_file_and_line(tmp_path):
    with pytest.raises(RenderError) as err:
        write(tmp_path, "bad.yaml", "a: 1\nb: [unclosed\nc: 3\n")
    assert str(err.value).startswith("bad.yaml:")
    assert "YAML syntax error" in str(err.value)
