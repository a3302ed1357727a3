"""slurmrestd's certificate when the operator issues it: a CA of the cluster's own
signs one server certificate for the slurmrestd Service's names.

The CA's key is dropped once it has signed, so nothing can issue a second
certificate that clients of this cluster would trust. A renewal (30 days before
the end, plan/cluster.py) comes with a new CA; the Secret's `ca.crt` then holds
the new CA and the one before it, so clients trust both while the slurmrestd
pods roll onto the new certificate. A team with cert-manager names its own
Secret instead (spec.restApi.tls.secretName).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# About two years: clients pin the CA, so a renewal is a deliberate step.
VALIDITY: Final = dt.timedelta(days=730)
# A clock a little behind the operator's still accepts the certificate.
BACKDATE: Final = dt.timedelta(minutes=5)


@dataclass(frozen=True, slots=True)
class IssuedCertificate:
    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes


def _name(common_name: str) -> x509.Name:
    # X.509 caps a common name at 64 characters; the SANs carry the full names.
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name[:64])])


def _key_usage(*, signs_certificates: bool) -> x509.KeyUsage:
    """A CA signs certificates only; a server signs its TLS handshakes (ECDSA) only."""
    return x509.KeyUsage(
        digital_signature=not signs_certificates,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=signs_certificates,
        crl_sign=signs_certificates,
        encipher_only=False,
        decipher_only=False,
    )


def issue_server_certificate(
    dns_names: Sequence[str], now: dt.datetime | None = None
) -> IssuedCertificate:
    """A CA and a server certificate for `dns_names` (the first is its subject), ECDSA P-256."""
    if not dns_names:
        raise ValueError("a server certificate needs at least one DNS name")
    start = (now or dt.datetime.now(dt.UTC)) - BACKDATE
    end = start + VALIDITY
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name(f"slurmkube CA for {dns_names[0]}")
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(signs_certificates=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(dns_names[0]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(signs_certificates=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in dns_names]), False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return IssuedCertificate(
        ca.public_bytes(serialization.Encoding.PEM),
        cert.public_bytes(serialization.Encoding.PEM),
        key_pem,
    )


def expires_at(cert_pem: bytes) -> float | None:
    """When the first certificate in `cert_pem` expires (epoch seconds); None when
    it holds none."""
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError:
        return None
    return cert.not_valid_after_utc.timestamp()


def first_certificate(pem: bytes) -> bytes:
    """The first PEM certificate of a bundle, b"" when there is none."""
    end = b"-----END CERTIFICATE-----"
    head, found, _ = pem.partition(end)
    return head + found + b"\n" if found else b""
