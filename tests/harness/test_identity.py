"""The e2e's single sign-on, without a cluster: who the people are (from the committed argocd-rbac-cm), what the
directory, Dex and the API servers are told, and how the world map points Argo CD's oidc.config at it. The e2e
(tests/e2e/test_13_access.py) logs them in for real."""
from __future__ import annotations

import base64
import hashlib

import yaml

from e2e import identity, world
from tests.support import REPO, load_yaml


def _committed(name: str) -> dict:
    return world.argocd_configmap(REPO, name)


def test_one_person_per_group_of_the_committed_rbac_each_in_that_group_only():
    people = identity.people(_committed("argocd-rbac-cm"))
    by_name = {p.username: p for p in people}
    assert by_name["platform-admin"].role == "role:admin" and by_name["viewer"].role == "role:readonly"
    assert by_name["ml-eks"].group == "ml-engineers-eks" and by_name["ml-minikube"].group == "ml-engineers"
    assert len({p.password for p in people}) == len(people) and all(len(p.password) >= 20 for p in people)


def test_the_directory_holds_each_person_in_their_group_and_a_salted_password():
    people = [identity.Person("ml-eks", "ml-engineers-eks", "role:ml-eks", "pw-1"),
              identity.Person("viewer", "ml-viewers", "role:readonly", "pw-2")]
    ldif = identity.directory_ldif(people, "dex-pw")
    blocks = {b.splitlines()[0]: b for b in ldif.strip().split("\n\n")}
    group = blocks[f"dn: cn=ml-engineers-eks,{identity.GROUPS_OU}"]
    assert f"member: uid=ml-eks,{identity.PEOPLE_OU}" in group and "viewer" not in group
    assert "pw-1" not in ldif and "dex-pw" not in ldif
    stored = next(line for line in blocks[f"dn: uid=ml-eks,{identity.PEOPLE_OU}"].splitlines()
                  if line.startswith("userPassword: ")).split(": ", 1)[1]
    raw = base64.b64decode(stored.removeprefix("{SSHA}"))
    assert hashlib.sha1(b"pw-1" + raw[20:]).digest() == raw[:20]


def test_dex_uses_the_directory_for_the_password_grant_and_the_api_servers_map_email_and_groups():
    config = identity.dex_config("https://127.0.0.1:1/dex", "127.0.0.1:1", identity.pki.KeyPair("c", "k"), 389,
                                 "dex-pw", [{"id": "argocd"}])
    assert config["oauth2"]["passwordConnector"] == config["connectors"][0]["id"] == "ldap"
    assert config["connectors"][0]["config"]["groupSearch"]["userMatchers"] == [{"userAttr": "DN",
                                                                                   "groupAttr": "member"}]
    authn = identity.authentication_config("https://127.0.0.1:1/dex", "PEM")
    jwt = authn["jwt"][0]
    assert jwt["issuer"]["audiences"] == [identity.KUBERNETES_CLIENT]
    # no prefixes: the platform chart's RoleBindings name the groups as the environments write them
    assert jwt["claimMappings"] == {"username": {"claim": "email", "prefix": ""},
                                    "groups": {"claim": "groups", "prefix": ""}}


def test_the_world_points_argocds_single_sign_on_at_the_e2e_issuer(tmp_path):
    argocd_cm = _committed("argocd-cm")
    issuer = identity.oidc_config(argocd_cm)["issuer"]
    w = world.World(urls={issuer: "https://127.0.0.1:5556/dex", argocd_cm["data"]["url"]: "http://127.0.0.1:8080"},
                    sso_ca="-----BEGIN CERTIFICATE-----\nSSO\n")
    doc = w.rewrite_doc(load_yaml(yaml.safe_dump(argocd_cm)), "argocd/managed/configmap-argocd-cm.yaml")
    oidc = load_yaml(doc["data"]["oidc.config"])
    assert oidc["issuer"] == "https://127.0.0.1:5556/dex" and oidc["rootCA"].startswith("-----BEGIN")
    assert oidc["clientSecret"] == "$oidc.clientSecret" and oidc["clientID"] == "argocd"
    assert doc["data"]["url"] == "http://127.0.0.1:8080"
    assert w.rewrite_doc(load_yaml(yaml.safe_dump(argocd_cm)), "x") == doc
    w.save(tmp_path / "world.json")
    assert world.World.load(tmp_path / "world.json").sso_ca == w.sso_ca
