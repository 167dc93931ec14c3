"""Values that are jinja2 expressions over other values; undefined names are errors."""
import pytest

from generator.errors import RenderError
from generator.layers import Layer
from generator.templating import resolve


def layer(data):
    return Layer(data, {})


def test_string_template_over_other_values():
    out = resolve(layer({"cluster": {"name": "ray"}, "svc": "{{ cluster.name }}-head"}), {})
    assert out.data["svc"] == "ray-head"


def test_single_expression_keeps_its_type():
    out = resolve(layer({"n": 3, "m": "{{ n * 2 }}", "labels": "{{ {'a': 'b'} }}"}), {})
    assert out.data["m"] == 6
    assert out.data["labels"] == {"a": "b"}


def test_templates_may_refer_to_templates():
    out = resolve(layer({"a": "{{ env }}", "b": "{{ a }}-x", "c": ["{{ b }}-y"]}), {"env": "eks"})
    assert out.data == {"a": "eks", "b": "eks-x", "c": ["eks-x-y"]}


def test_undefined_name_is_an_error_naming_it():
    with pytest.raises(RenderError) as err:
        resolve(layer({"a": "{{ nope }}-x"}), {"env": "eks"})
    assert "'nope' is undefined" in str(err.value)
    assert "env" in str(err.value)  # lists the names that exist


def test_undefined_single_expression_is_an_error():
    with pytest.raises(RenderError, match="'nope' is undefined"):
        resolve(layer({"a": "{{ nope }}"}), {})


def test_undefined_attribute_is_an_error():
    with pytest.raises(RenderError, match="has no attribute 'missing'"):
        resolve(layer({"cluster": {}, "a": "{{ cluster.missing }}-x"}), {})


def test_self_reference_is_reported_not_looped_forever():
    with pytest.raises(RenderError, match="does not settle"):
        resolve(layer({"a": "{{ a }}x"}), {})
