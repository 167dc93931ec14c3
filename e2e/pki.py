"""Certificates and keys of the e2e cluster: one CA per cluster, the API server's serving certificate, client
certificates (admin, the controllers) and the service-account signing key. Short-lived, written under the run
directory, never committed."""
from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=2)


@dataclass(frozen=True)
class KeyPair:
    cert: Path
    key: Path

    @property
    def cert_pem(self) -> bytes:
        return self.cert.read_bytes()


def _key():
    return ec.generate_private_key(ec.SECP256R1())


def _write(path: Path, data: bytes, private: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    if private:
        path.chmod(0o600)
    return path


def _key_pem(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attrs)


class CertificateAuthority:
    """A CA that signs the serving and client certificates of one cluster."""

    def __init__(self, directory: Path, name: str):
        self.directory = directory
        self.key = _key()
        now = datetime.datetime.now(datetime.UTC)
        subject = _name(f"{name}-ca")
        self.certificate = (
            x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False),
                           critical=True)
            .sign(self.key, hashes.SHA256()))
        self.pair = KeyPair(_write(directory / "ca.crt", self.certificate.public_bytes(serialization.Encoding.PEM)),
                            _write(directory / "ca.key", _key_pem(self.key), private=True))

    def issue(self, stem: str, common_name: str, *, organization: str | None = None, server: bool = False,
              hosts: tuple[str, ...] = ()) -> KeyPair:
        key = _key()
        now = datetime.datetime.now(datetime.UTC)
        usage = [ExtendedKeyUsageOID.SERVER_AUTH] if server else [ExtendedKeyUsageOID.CLIENT_AUTH]
        builder = (
            x509.CertificateBuilder().subject_name(_name(common_name, organization))
            .issuer_name(self.certificate.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usage), critical=False))
        if hosts:
            names = []
            for host in hosts:
                try:
                    names.append(x509.IPAddress(ipaddress.ip_address(host)))
                except ValueError:
                    names.append(x509.DNSName(host))
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        return KeyPair(_write(self.directory / f"{stem}.crt", cert.public_bytes(serialization.Encoding.PEM)),
                       _write(self.directory / f"{stem}.key", _key_pem(key), private=True))


def service_account_keys(directory: Path) -> KeyPair:
    """The key pair the API server signs service-account tokens with (cert = the public key, PEM)."""
    key = _key()
    public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo)
    return KeyPair(_write(directory / "sa.pub", public), _write(directory / "sa.key", _key_pem(key), private=True))
