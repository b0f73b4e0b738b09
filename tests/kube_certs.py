"""A throw-away PKI for the test control plane (tests/kube_cluster.py): a CA, the API server's serving
certificate, client certificates, and the service-account signing key pair.

kube-apiserver has no insecure port, so every client (the tests, kaidash, kube-controller-manager, kwok)
speaks TLS to it and authenticates with a client certificate signed by this CA, or a service-account token
signed by the key pair. ECDSA P-256 keys: quick to make, accepted by every component.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SERVER_DNS = ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
              "kubernetes.default.svc.cluster.local")


@dataclass(frozen=True)
class Pki:
    """Paths of the PEM files the components are started with."""

    ca_cert: Path
    ca_key: Path
    server_cert: Path
    server_key: Path
    sa_key: Path      # signs service-account tokens (kube-apiserver, kube-controller-manager)
    sa_pub: Path      # verifies them (kube-apiserver)
    directory: Path

    def client(self, name: str) -> tuple[Path, Path]:
        """``(cert, key)`` of the client certificate made for ``name`` by :func:`make_pki`."""
        return self.directory / f"{name}.crt", self.directory / f"{name}.key"


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                       serialization.NoEncryption()))
    path.chmod(0o600)


def _name(common_name: str, organisation: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organisation:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organisation))
    return x509.Name(attrs)


def _sign(subject: x509.Name, key, issuer: x509.Name, issuer_key, *, ca: bool = False, sans=None, usage=None):
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(hours=1))
               .not_valid_after(now + datetime.timedelta(days=2))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
            key_encipherment=False, data_encipherment=False, key_agreement=False, encipher_only=False,
            decipher_only=False), critical=True)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    if usage:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usage), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def make_pki(directory: Path, clients: dict[str, tuple[str, str | None]]) -> Pki:
    """Make the CA, serving cert (127.0.0.1 and the in-cluster names), service-account keys and one client
    certificate per ``clients`` entry ``name: (common name, organisation)`` (RBAC user and group)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = _key()
    ca_name = _name("kaidash-test-ca")
    ca_cert = _sign(ca_name, ca_key, ca_name, ca_key, ca=True)
    paths = {n: directory / n for n in ("ca.crt", "ca.key", "apiserver.crt", "apiserver.key", "sa.key", "sa.pub")}
    paths["ca.crt"].write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    _write_key(ca_key, paths["ca.key"])

    server_key = _key()
    sans = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.IPAddress(ipaddress.ip_address("10.0.0.1"))]
    sans += [x509.DNSName(d) for d in SERVER_DNS]
    server = _sign(_name("kube-apiserver"), server_key, ca_name, ca_key, sans=sans,
                   usage=[ExtendedKeyUsageOID.SERVER_AUTH])
    paths["apiserver.crt"].write_bytes(server.public_bytes(serialization.Encoding.PEM))
    _write_key(server_key, paths["apiserver.key"])

    for name, (cn, org) in clients.items():
        key = _key()
        cert = _sign(_name(cn, org), key, ca_name, ca_key, usage=[ExtendedKeyUsageOID.CLIENT_AUTH])
        (directory / f"{name}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key, directory / f"{name}.key")

    sa_key = _key()
    _write_key(sa_key, paths["sa.key"])
    paths["sa.pub"].write_bytes(sa_key.public_key().public_bytes(serialization.Encoding.PEM,
                                                                 serialization.PublicFormat.SubjectPublicKeyInfo))
    return Pki(paths["ca.crt"], paths["ca.key"], paths["apiserver.crt"], paths["apiserver.key"], paths["sa.key"],
               paths["sa.pub"], directory)
