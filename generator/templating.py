"""Values that are jinja2 expressions over other values, e.g. `name: "{{ env }}-ray"`.

Every string holding `{{` or `{%` is rendered with the composed environment as its context (plus `env`, the
environment's name). A string that is exactly one `{{ expression }}` keeps the expression's type (a number
stays a number, a map stays a map); any other string renders to a string. Templates may refer to values
that are templates themselves: rendering repeats until nothing is left to render. Undefined names are
errors (StrictUndefined) that name the file, line and key of the template.
"""
from __future__ import annotations

import re

import jinja2
from jinja2.sandbox import SandboxedEnvironment

from .errors import RenderError
from .layers import Layer

_SINGLE = re.compile(r"^\s*\{\{(?P<expr>(?:(?!\}\}).)*)\}\}\s*$", re.S)
_MAX_PASSES = 10

_jinja = SandboxedEnvironment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)


def is_template(value) -> bool:
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def resolve(layer: Layer, extra: dict) -> Layer:
    """Render every template string in `layer` (in place) with the layer itself plus `extra` as context."""
    context = dict(layer.data)
    context.update(extra)

    def walk(node, path):
        if isinstance(node, dict):
            for key in node:
                node[key] = walk(node[key], path + (key,))
            return node
        if isinstance(node, list):
            return [walk(item, path + (i,)) for i, item in enumerate(node)]
        if is_template(node):
            return _render(node, context, layer, path)
        return node

    walk(layer.data, ())
    return layer


def _render(text: str, context: dict, layer: Layer, path):
    value = text
    for _ in range(_MAX_PASSES):
        if not is_template(value):
            return value
        value = _render_once(value, context, layer, path, text)
    raise RenderError(f"template {text!r} does not settle after {_MAX_PASSES} passes (does it refer to itself?)",
                      layer.locate(path))


def _render_once(value: str, context: dict, layer: Layer, path, original: str):
    try:
        single = _SINGLE.match(value)
        if single:
            result = _jinja.compile_expression(single.group("expr"), undefined_to_none=False)(**context)
            if isinstance(result, jinja2.Undefined):
                result._fail_with_undefined_error()
            return result
        return _jinja.from_string(value).render(**context)
    except jinja2.UndefinedError as exc:
        known = ", ".join(sorted(context))
        raise RenderError(f"template {original!r}: {exc.message} (names you can use: {known})",
                          layer.locate(path)) from None
    except jinja2.TemplateError as exc:
        raise RenderError(f"template {original!r}: {exc}", layer.locate(path)) from None
