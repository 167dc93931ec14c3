"""no-plaintext-secrets: both directions (literal values are findings, references are not)."""

from __future__ import annotations

import pytest

from validation.secrets_scan import is_literal, names_a_secret, scan


@pytest.mark.parametrize("key", [
    "password", "DB_PASSWORD", "HF_TOKEN", "hf_token", "hfToken", "token", "apiKey", "APIKey", "apikey",
    "WANDB_API_KEY", "AWS_SECRET_ACCESS_KEY", "clientSecret", "secret", "secretKey", "privateKey",
    "ssh-privatekey", "Authorization", "passphrase", "credentials",
])
def test_names_a_secret(key):
    assert names_a_secret(key)


@pytest.mark.parametrize("key", [
    "key", "topologyKey", "secretKeyRef", "secretName", "existingSecret", "secretRef", "passwordSecretName",
    "hfTokenSecretName", "HF_TOKEN_SECRET_NAME", "apiKeySecretKey", "passwordSecret", "tokenTTL", "imagePullSecrets",
    "AWS_ACCESS_KEY_ID", "HF_TOKEN_FILE", "tokenPath", "name", "value", "tls.crt", "keyFile", "serviceAccountName",
])
def test_does_not_name_a_secret(key):
    assert not names_a_secret(key)


@pytest.mark.parametrize("value, literal", [
    ("hunter2", True), (123456, True), ("", False), ("  ", False), (None, False), (True, False),
    ("$(HF_TOKEN)", False), ("${HF_TOKEN}", False), ("{{ .Values.token }}", False), ({"a": 1}, False),
])
def test_is_literal(value, literal):
    assert is_literal(value) == literal


def _paths(doc):
    return [".".join(map(str, f.path)) for f in scan(doc)]


def test_references_are_not_findings():
    doc = {
        "env": [
            {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}},
            {"name": "WANDB_API_KEY", "value": "$(WANDB_KEY_FROM_FILE)"},
            {"name": "MLFLOW_TRACKING_TOKEN", "value": ""},
        ],
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
        "volumes": [{"name": "s", "secret": {"secretName": "hf-token", "items": [{"key": "token", "path": "t"}]}}],
        "selector": {"matchExpressions": [{"key": "token", "operator": "In", "values": ["a"]}]},
        "auth": {"existingSecret": "db", "passwordSecretName": "db", "enabled": True, "tokenTTL": 3600},
        "annotations": {"argocd-image-updater.argoproj.io/pull-secret": "pullsecret:argocd/regcred"},
        "args": ["--token-file", "/var/run/secrets/token", "--hf_token", "$(HF_TOKEN)"],
    }
    assert _paths(doc) == []


def test_literals_are_findings():
    doc = {
        "env": [{"name": "HF_TOKEN", "value": "abc"}],
        "config": {"password": "hunter2", "nested": [{"clientSecret": "s3cr3t"}]},
        "args": ["--password=hunter2"],
        "entrypoint": "python train.py --hf-token abc123 --epochs 1",
        "repo": "https://user:pass@git.example.com/x.git",
        "notes": ["-----BEGIN RSA PRIVATE KEY-----\nMIIE..."],
        "misc": {"anything": "ghp_" + "a" * 36, "aws": "AKIA" + "ABCDEFGHIJKLMNOP"},
    }
    # Credential-shaped strings are built at run time so that no secret scanner trips over this file.
    assert sorted(_paths(doc)) == sorted([
        "env.0.value", "config.password", "config.nested.0.clientSecret", "args", "entrypoint", "repo",
        "notes.0", "misc.anything", "misc.aws",
    ])


def test_one_finding_per_literal_env_value():
    assert len(list(scan({"env": [{"name": "HF_TOKEN", "value": "hf_" + "x" * 34}]}))) == 1
