"""Finding plaintext secret values in YAML data (environment files and rendered manifests).

A finding is a *literal value* under something that names a secret value:

* a mapping key whose last word names a secret: ``password``, ``token``, ``clientSecret``, ``apiKey``,
  ``AWS_SECRET_ACCESS_KEY``, ``hf_token``..., e.g. ``password: hunter2``. Keys with a ``/`` (qualified
  annotation/label names such as ``argocd-image-updater.argoproj.io/pull-secret``) are only checked for
  credential-looking values. Argo CD ``helm.values`` strings are parsed and scanned too;
* a ``{name: ..., value: ...}`` entry (container env, Argo CD Helm parameters, HTTP headers) whose *name* names
  a secret, e.g. ``{name: HF_TOKEN, value: "hf_..."}``;
* a command-line flag in ``command``/``args``/RayJob ``entrypoint``, e.g. ``--hf_token hf_abc`` or ``--password=x``;
* a string that looks like a credential whatever its key: known token formats (Hugging Face, GitHub, AWS access
  key id, Slack, OpenAI-style ``sk-``), PEM private keys, and URLs with ``user:password@``.

Not findings (references are the way to pass secrets): ``valueFrom``/``secretKeyRef``/``secretName``/
``existingSecret``/``*SecretName``/``*Ref``/``*Path``/``*File`` keys; ``key:`` on its own (secretKeyRef key,
toleration key, label selector key, topologyKey...); values that are empty, booleans, mappings or lists;
Kubernetes/shell variable references (``$(HF_TOKEN)``, ``${HF_TOKEN}``) and templates (``{{ ... }}``).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import yaml

Path = list

# Last word(s) of a key that name a secret VALUE.
_SECRET_NOUNS = {
    "token", "tokens", "password", "passwd", "pwd", "passphrase", "secret", "credential", "credentials",
    "apikey", "apitoken", "accesskey", "secretkey", "privatekey", "authtoken", "authorization", "bearer",
}
# ``<qualifier> key`` names a secret (``api key``, ``access key``, ``private key``); ``key`` alone does not.
_KEY_QUALIFIERS = {"api", "access", "private", "secret", "signing", "encryption", "ssh", "auth", "client",
                   "master", "license", "account", "session"}
# Whole keys (words joined) that hold secret material though no word says so: Argo CD cluster secrets'
# ``tlsClientConfig.keyData`` (a private key).
_SECRET_KEYS = {"keydata"}
# ``existingSecret: my-secret`` names a Secret; it does not hold one.
_REFERENCE_FIRST_WORDS = {"existing"}

_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
_REFERENCE_VALUE = re.compile(r"^\s*(\$\([A-Za-z_][A-Za-z0-9_]*\)|\$\{[^}]*\}|\{\{.*\}\})\s*$")
_CREDENTIAL_PATTERNS = [
    ("a Hugging Face token", re.compile(r"\bhf_[A-Za-z0-9]{30,}\b")),
    ("a GitHub token", re.compile(r"\b(gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})\b")),
    ("an AWS access key id", re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("a Slack token", re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}\b")),
    ("an API key (sk-...)", re.compile(r"\bsk-[A-Za-z0-9_-]{20,}\b")),
    ("a PEM private key", re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")),
    ("a password in a URL (user:password@host)", re.compile(r"[a-z][a-z0-9+.-]*://[^/\s:@]+:[^/\s@]+@", re.I)),
]
_FLAG = re.compile(r"^--?([A-Za-z0-9][A-Za-z0-9_.-]*)(?:=(.*))?$", re.S)
_COMMAND_KEYS = {"command", "args", "entrypoint"}


@dataclass(frozen=True)
class SecretFinding:
    path: Path
    message: str


def key_words(key: str) -> list[str]:
    """``AWS_SECRET_ACCESS_KEY`` -> ``[aws, secret, access, key]``; ``clientSecret`` -> ``[client, secret]``."""
    return [w.lower() for w in _WORD.findall(str(key))]


def _ends_with_secret_noun(words: list[str]) -> int:
    """How many trailing words name a secret value (0 = none): ``token`` -> 1, ``api key`` -> 2."""
    if not words:
        return 0
    if words[-1] in _SECRET_NOUNS:
        return 1
    if words[-1] == "key" and len(words) >= 2 and words[-2] in _KEY_QUALIFIERS:
        return 2
    return 0


def names_a_secret(key: str) -> bool:
    """Whether a key / env var name names a secret *value* (as opposed to a reference to one, or ``key``).

    ``passwordSecret``, ``hfTokenSecret``, ``apiKeySecretKey`` name the Secret (or the key in it) where a
    password/token/API key is kept: references, not values.
    """
    words = key_words(key)
    if not words or words[0] in _REFERENCE_FIRST_WORDS:
        return False
    if "".join(words) in _SECRET_KEYS:
        return True
    tail = _ends_with_secret_noun(words)
    if not tail:
        return False
    pointer = words[-tail:] in (["secret"], ["secret", "key"], ["secretkey"])
    return not (pointer and _ends_with_secret_noun(words[:-tail]))


def is_literal(value: Any) -> bool:
    """A value that would be a plaintext secret: a non-empty string (not a variable reference) or a number."""
    if isinstance(value, bool) or value is None:
        return False
    if isinstance(value, (int, float)):
        return True
    if isinstance(value, str):
        return bool(value.strip()) and not _REFERENCE_VALUE.match(value)
    return False


def credential_in(text: str) -> str | None:
    for what, pattern in _CREDENTIAL_PATTERNS:
        if pattern.search(text):
            return what
    return None


def _command_tokens(value: Any) -> list[str]:
    items = value if isinstance(value, list) else [value]
    tokens: list[str] = []
    for item in items:
        if not isinstance(item, str):
            continue
        if any(ch.isspace() for ch in item.strip()):
            try:
                tokens += shlex.split(item)
            except ValueError:
                tokens += item.split()
        else:
            tokens.append(item)
    return tokens


def _scan_command(value: Any, path: Path) -> Iterator[SecretFinding]:
    tokens = _command_tokens(value)
    for index, token in enumerate(tokens):
        match = _FLAG.match(token)
        if not match or not names_a_secret(match.group(1)):
            continue
        literal = match.group(2)
        if literal is None and index + 1 < len(tokens) and not tokens[index + 1].startswith("-"):
            literal = tokens[index + 1]
        if literal is not None and is_literal(literal):
            yield SecretFinding(path, f"command-line flag --{match.group(1)} is given a literal value; pass it "
                                      f"from a Secret via an env var (valueFrom.secretKeyRef) and reference "
                                      f"it as $(VAR)")


def _scan_embedded_yaml(text: str, path: Path, skip: tuple[tuple, ...] = ()) -> Iterator[SecretFinding]:
    if "\n" not in text and ":" not in text:
        return
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return
    if isinstance(data, (dict, list)):
        for finding in scan(data, [], skip=()):
            yield SecretFinding(path, f"(embedded YAML/JSON, at {_format(finding.path)}) {finding.message}")


def scan_text(text: str, path: Path) -> Iterator[SecretFinding]:
    """Findings in a string value that may itself be a YAML/JSON document (a Secret's ``config``, Helm values)."""
    findings = list(_scan_embedded_yaml(text, path))
    if findings:
        yield from findings
        return
    what = credential_in(text)
    if what:
        yield SecretFinding(path, f"looks like {what}; never commit credentials, reference a Secret")


def _format(path: Path) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else ("." if out else "") + str(part)
    return out or "(root)"


def scan(node: Any, path: Path | None = None, skip: tuple[tuple, ...] = ()) -> Iterator[SecretFinding]:
    """All plaintext secret findings in ``node``; ``skip`` lists paths (as tuples) not to descend into."""
    path = path or []
    if tuple(path) in skip:
        return
    if isinstance(node, dict):
        name = node.get("name")
        pair_flagged = (isinstance(name, str) and "value" in node and names_a_secret(name)
                        and is_literal(node["value"]))
        if pair_flagged:
            yield SecretFinding(path + ["value"], f"{name!r} is set to a literal value; reference a Secret instead "
                                                  f"(valueFrom.secretKeyRef, or a Secret the chart mounts)")
        for key, value in node.items():
            child = path + [key]
            if isinstance(key, str) and "/" not in key and names_a_secret(key) and is_literal(value):
                yield SecretFinding(child, f"{key!r} holds a literal value; reference a Secret instead "
                                           f"(e.g. a secretName/existingSecret/secretKeyRef pointing to a Secret "
                                           f"created outside git)")
            elif key in _COMMAND_KEYS:
                yield from _scan_command(value, child)
            elif key == "values" and isinstance(value, str):
                yield from _scan_embedded_yaml(value, child, skip)  # Argo CD spec.source.helm.values
            if isinstance(value, (dict, list)):
                yield from scan(value, child, skip)
            elif (isinstance(value, str) and not (isinstance(key, str) and names_a_secret(key))
                  and not (pair_flagged and key == "value")):
                what = credential_in(value)
                if what:
                    yield SecretFinding(child, f"looks like {what}; never commit credentials, reference a Secret")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            child = path + [index]
            if isinstance(value, str):
                what = credential_in(value)
                if what:
                    yield SecretFinding(child, f"looks like {what}; never commit credentials, reference a Secret")
            else:
                yield from scan(value, child, skip)
