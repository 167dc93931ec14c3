"""The e2e's single sign-on: people in groups, in an LDAP directory (Debian's slapd), behind Dex (built from its Go
module, e2e.components), which Argo CD's server and every e2e API server trust.

Who the people are comes from the rendered Argo CD RBAC (argocd/managed/configmap-argocd-rbac-cm.yaml): each group
the environments' `access` names (`g, <group>, <role>`) gets one person, named after the role it holds
(`role:admin` -> platform-admin, `role:readonly` -> viewer, `role:ml-<env>` -> ml-<env>), a member of that group
only. Their passwords are random, in a file of the run (0600). An ID token comes from Dex's password grant (the
resource owner password flow: no browser), with the groups the directory gives (Dex's LDAP connector, group search).

Two clients are registered with Dex: Argo CD's (the `clientID` of argocd-cm's oidc.config, its secret set into
argocd-secret as `oidc.clientSecret`, where the generated oidc.config points), and `kubernetes`, the audience the
API servers accept (`AuthenticationConfiguration`: username the `email` claim, groups the `groups` claim, no
prefixes, so the RoleBindings the platform chart renders for the groups bind them). A token for Argo CD is not
one for the clusters.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import shutil
import ssl
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

from . import pki
from .procs import Supervisor, free_port, port_open, wait_until

SUFFIX = "dc=e2e,dc=example"
PEOPLE_OU = f"ou=people,{SUFFIX}"
GROUPS_OU = f"ou=groups,{SUFFIX}"
DEX_BIND = f"cn=dex,{SUFFIX}"
KUBERNETES_CLIENT = "kubernetes"
SCOPES = "openid profile email groups"
SLAPD = "/usr/sbin/slapd"
SLAPADD = "/usr/sbin/slapadd"  # the same program, loading a directory offline
SCHEMAS = ("core", "cosine", "inetorgperson")


@dataclass(frozen=True)
class Person:
    username: str
    group: str
    role: str      # the Argo CD role the group holds
    password: str

    @property
    def email(self) -> str:
        return f"{self.username}@e2e.example"

    @property
    def dn(self) -> str:
        return f"uid={self.username},{PEOPLE_OU}"


def person_name(role: str) -> str:
    if role == "role:admin":
        return "platform-admin"
    if role == "role:readonly":
        return "viewer"
    return role.removeprefix("role:")


def group_roles(rbac_cm: dict) -> dict[str, str]:
    """{group: role} from argocd-rbac-cm's policy.csv `g` lines."""
    out = {}
    for line in (rbac_cm.get("data") or {}).get("policy.csv", "").splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 3 and fields[0] == "g":
            out[fields[1]] = fields[2]
    return out


def people(rbac_cm: dict) -> list[Person]:
    return [Person(person_name(role), group, role, secrets.token_urlsafe(18))
            for group, role in sorted(group_roles(rbac_cm).items())]


def oidc_config(argocd_cm: dict) -> dict:
    return yaml.safe_load((argocd_cm.get("data") or {}).get("oidc.config") or "") or {}


def ssha(password: str) -> str:
    """An LDAP {SSHA} password value (salted SHA-1, what slappasswd writes by default)."""
    salt = secrets.token_bytes(8)
    return "{SSHA}" + base64.b64encode(hashlib.sha1(password.encode() + salt).digest() + salt).decode()


def directory_ldif(people_: list[Person], dex_password: str) -> str:
    entries = [
        {"dn": SUFFIX, "objectClass": ["dcObject", "organization"], "dc": "e2e", "o": "e2e"},
        {"dn": PEOPLE_OU, "objectClass": ["organizationalUnit"], "ou": "people"},
        {"dn": GROUPS_OU, "objectClass": ["organizationalUnit"], "ou": "groups"},
        {"dn": DEX_BIND, "objectClass": ["organizationalRole", "simpleSecurityObject"], "cn": "dex",
         "userPassword": ssha(dex_password)},
    ]
    for p in people_:
        entries.append({"dn": p.dn, "objectClass": ["inetOrgPerson"], "uid": p.username, "cn": p.username,
                        "sn": p.username, "mail": p.email, "userPassword": ssha(p.password)})
    for group in sorted({p.group for p in people_}):
        entries.append({"dn": f"cn={group},{GROUPS_OU}", "objectClass": ["groupOfNames"], "cn": group,
                        "member": [p.dn for p in people_ if p.group == group]})
    blocks = []
    for entry in entries:
        lines = [f"dn: {entry.pop('dn')}"]
        for key, value in entry.items():
            lines += [f"{key}: {v}" for v in (value if isinstance(value, list) else [value])]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


def slapd_conf(directory: Path, root_password: str) -> str:
    includes = "".join(f"include /etc/ldap/schema/{s}.schema\n" for s in SCHEMAS)
    return (f"{includes}pidfile {directory / 'slapd.pid'}\nargsfile {directory / 'slapd.args'}\n"
            "modulepath /usr/lib/ldap\nmoduleload back_mdb\n"
            f"database mdb\nmaxsize 67108864\nsuffix \"{SUFFIX}\"\nrootdn \"cn=admin,{SUFFIX}\"\n"
            f"rootpw {ssha(root_password)}\ndirectory {directory / 'data'}\n"
            # people may only bind; Dex's account reads the rest (it searches, then binds as the person)
            "access to attrs=userPassword by anonymous auth by * none\n"
            f"access to * by dn.exact=\"{DEX_BIND}\" read by * none\n")


def dex_config(issuer: str, listen: str, tls: pki.KeyPair, ldap_port: int, dex_password: str,
               clients: list[dict]) -> dict:
    return {
        "issuer": issuer,
        "storage": {"type": "memory"},
        "web": {"https": listen, "tlsCert": str(tls.cert), "tlsKey": str(tls.key)},
        "logger": {"level": "info", "format": "text"},
        "oauth2": {"passwordConnector": "ldap", "skipApprovalScreen": True},
        "expiry": {"idTokens": "2h"},
        "staticClients": clients,
        "connectors": [{
            "type": "ldap", "id": "ldap", "name": "LDAP",
            "config": {
                "host": f"127.0.0.1:{ldap_port}", "insecureNoSSL": True,
                "bindDN": DEX_BIND, "bindPW": dex_password,
                "usernamePrompt": "Username",
                "userSearch": {"baseDN": PEOPLE_OU, "filter": "(objectClass=inetOrgPerson)", "username": "uid",
                               "idAttr": "uid", "emailAttr": "mail", "nameAttr": "cn",
                               "preferredUsernameAttr": "uid"},
                "groupSearch": {"baseDN": GROUPS_OU, "filter": "(objectClass=groupOfNames)",
                                "userMatchers": [{"userAttr": "DN", "groupAttr": "member"}], "nameAttr": "cn"},
            }}],
    }


def authentication_config(issuer: str, ca_pem: str) -> dict:
    """What an API server that trusts the single sign-on reads (--authentication-config)."""
    return {
        "apiVersion": "apiserver.config.k8s.io/v1beta1", "kind": "AuthenticationConfiguration",
        "jwt": [{
            "issuer": {"url": issuer, "audiences": [KUBERNETES_CLIENT], "certificateAuthority": ca_pem},
            "claimMappings": {"username": {"claim": "email", "prefix": ""},
                              "groups": {"claim": "groups", "prefix": ""}},
        }],
    }


@dataclass
class SingleSignOn:
    """slapd and Dex of one e2e run. `prepare` writes everything (so the API servers can be started trusting it);
    `start` runs both."""
    directory: Path
    client_id: str                      # Argo CD's, from argocd-cm's oidc.config
    argocd_url: str                     # the e2e argocd-server (its callback is registered)
    ldap_port: int = 0
    port: int = 0

    def __post_init__(self):
        self.ldap_port = self.ldap_port or free_port()
        self.port = self.port or free_port()

    @property
    def issuer(self) -> str:
        return f"https://127.0.0.1:{self.port}/dex"

    @property
    def record_file(self) -> Path:
        return self.directory / "people.json"

    def prepare(self, people_: list[Person]) -> None:
        if not Path(SLAPD).is_file():
            raise RuntimeError(f"{SLAPD} not found: install Debian's slapd (make setup-e2e does)")
        self.directory.mkdir(parents=True, exist_ok=True)
        ldap = self.directory / "ldap"
        if ldap.exists():
            shutil.rmtree(ldap)
        (ldap / "data").mkdir(parents=True)
        dex_password = secrets.token_urlsafe(18)
        self.conf = ldap / "slapd.conf"
        self.conf.write_text(slapd_conf(ldap, secrets.token_urlsafe(18)))
        (ldap / "people.ldif").write_text(directory_ldif(people_, dex_password))
        (ldap / "people.ldif").chmod(0o600)
        proc = subprocess.run([SLAPADD, "-f", str(self.conf), "-l",
                               str(ldap / "people.ldif")], capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"slapadd failed: {proc.stderr.strip()[-2000:]}")
        self.ca = pki.CertificateAuthority(self.directory / "pki", "e2e-sso")
        self.tls = self.ca.issue("dex", "dex", server=True, hosts=("127.0.0.1", "localhost"))
        self.argocd_secret = secrets.token_urlsafe(24)
        self.kubernetes_secret = secrets.token_urlsafe(24)
        clients = [
            {"id": self.client_id, "name": "Argo CD", "secret": self.argocd_secret,
             "redirectURIs": [f"{self.argocd_url}/auth/callback"]},
            {"id": KUBERNETES_CLIENT, "name": "Kubernetes", "secret": self.kubernetes_secret,
             "redirectURIs": ["http://localhost:8000"]},
        ]
        self.config = self.directory / "dex.yaml"
        self.config.write_text(yaml.safe_dump(dex_config(self.issuer, f"127.0.0.1:{self.port}", self.tls,
                                                         self.ldap_port, dex_password, clients), sort_keys=True))
        self.config.chmod(0o600)
        self.authn_config = self.directory / "authentication-config.yaml"
        self.authn_config.write_text(yaml.safe_dump(authentication_config(
            self.issuer, self.tls_ca_pem()), sort_keys=True))
        self.record_file.write_text(json.dumps({
            "issuer": self.issuer, "ca": str(self.ca.pair.cert),
            "clients": {self.client_id: self.argocd_secret, KUBERNETES_CLIENT: self.kubernetes_secret},
            "argocd_client": self.client_id, "kubernetes_client": KUBERNETES_CLIENT,
            "people": [asdict(p) for p in people_]}, indent=2, sort_keys=True))
        self.record_file.chmod(0o600)

    def tls_ca_pem(self) -> str:
        return self.ca.pair.cert.read_text()

    def start(self, sup: Supervisor, dex_binary: str) -> None:
        sup.start("slapd", [SLAPD, "-f", self.conf, "-h", f"ldap://127.0.0.1:{self.ldap_port}/", "-d", "0"])
        wait_until(lambda: port_open(self.ldap_port), 30, 0.2, "slapd")
        sup.start("dex", [dex_binary, "serve", self.config])
        wait_until(lambda: self._discovery_ok(), 60, 0.5, "Dex's discovery document")

    def _discovery_ok(self) -> bool:
        with urllib.request.urlopen(f"{self.issuer}/.well-known/openid-configuration",
                                    context=ssl.create_default_context(cafile=str(self.ca.pair.cert)),
                                    timeout=2) as response:
            return response.status == 200


class LoginError(Exception):
    pass


def id_token(record: dict, username: str, client: str, password: str | None = None) -> str:
    """An ID token for `username` from Dex's password grant, for `client` (its audience)."""
    person = next((p for p in record["people"] if p["username"] == username), None)
    if person is None and password is None:
        raise LoginError(f"no e2e person {username}: {', '.join(p['username'] for p in record['people'])}")
    body = urllib.parse.urlencode({
        "grant_type": "password", "username": username, "password": password or person["password"],
        "scope": SCOPES, "client_id": client, "client_secret": record["clients"][client]}).encode()
    request = urllib.request.Request(f"{record['issuer']}/token", data=body,
                                     headers={"Content-Type": "application/x-www-form-urlencoded"})
    context = ssl.create_default_context(cafile=record["ca"])
    try:
        with urllib.request.urlopen(request, context=context, timeout=15) as response:
            return json.loads(response.read())["id_token"]
    except urllib.error.HTTPError as exc:
        raise LoginError(f"Dex refused {username}'s login: HTTP {exc.code} "
                         f"{exc.read().decode(errors='replace')}") from None


def claims(token: str) -> dict:
    """The (unverified) claims of a JWT: what the servers that verify it will read."""
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def read_record(path: str | os.PathLike) -> dict:
    return json.loads(Path(path).read_text())
