"""An LDAP directory for the login and policy tests: Debian's slapd on the host.

`SlurmCluster.spec.login.ldap` and `AllocationSource.spec.directory` point at a
directory the cluster does not run. Here that is slapd (Debian's `slapd`
package, no service: the test starts it) bound to one address only (the pod
network's bridge address, or loopback for the operator's reader alone), over
ldaps:// with a CA made for the run, so sssd and the operator verify the server
as they would in production. Groups come as RFC 2307 `posixGroup`s (memberUid)
and RFC 2307bis `groupOfNames` (member DNs, nested groups too); the admin DN
edits them live.
The directory is loaded offline (slapadd) from an LDIF; data, keys and
certificates live in a temporary folder and go with the process, stopped by PID.
"""

from __future__ import annotations

import secrets
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from ldap3 import Connection, Server, Tls
from slurmkube_runtime.layout import BRIDGE_IP, SLOT

from slurmkube_e2e.processes import terminate

# Away from 636, one per slot like the control plane's ports.
PORT = 23636 + 100 * SLOT
SUFFIX = "dc=slurmkube,dc=test"
SLAPD = Path("/usr/sbin/slapd")
SCHEMAS = ("core", "cosine", "nis", "inetorgperson")


class LdapError(RuntimeError):
    """slapd did not come up; the message says why."""


@dataclass(frozen=True)
class LdapUser:
    name: str
    uid: int
    gid: int
    password: str


@dataclass(frozen=True)
class Directory:
    uri: str
    base_dn: str
    ca_pem: str
    # The DN sssd binds as to search (anonymous searches see nothing) and its password.
    bind_dn: str
    bind_password: str
    # The DN that may write (the tests' live edits) and its password.
    admin_dn: str = ""
    admin_password: str = ""


BIND_DN = f"cn=sssd,ou=services,{SUFFIX}"
ADMIN_DN = f"cn=admin,{SUFFIX}"


def user_dn(name: str) -> str:
    return f"uid={name},ou=people,{SUFFIX}"


def group_dn(name: str) -> str:
    return f"cn={name},ou=groups,{SUFFIX}"


def _run(argv: list[str], **kwargs: object) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False, **kwargs)  # type: ignore[call-overload]
    if done.returncode != 0:
        raise LdapError(f"{argv[0]} failed: {done.stderr.strip()[-2000:]}")
    return str(done.stdout)


def _certificates(root: Path, host: str) -> tuple[Path, Path, Path]:
    """A CA for the run and slapd's certificate for `host`, signed by it."""
    ca_key, ca, key, csr, cert = (
        root / n for n in ("ca.key", "ca.crt", "server.key", "server.csr", "server.crt")
    )
    _run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key),
          "-out", str(ca), "-days", "2", "-subj", "/CN=slurmkube e2e LDAP CA"])  # fmt: skip
    _run(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
          str(csr), "-subj", f"/CN={host}"])  # fmt: skip
    ext = root / "san.ext"
    ext.write_text(f"subjectAltName=IP:{host}\nextendedKeyUsage=serverAuth\n")
    _run(["openssl", "x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
          "-CAcreateserial", "-out", str(cert), "-days", "2", "-extfile", str(ext)])  # fmt: skip
    return ca, cert, key


def _ldif(
    users: tuple[LdapUser, ...],
    groups: dict[str, tuple[int, tuple[str, ...]]],
    named_groups: dict[str, tuple[str, ...]],
    bind_password: str,
) -> str:
    org = SUFFIX.split(",", maxsplit=1)[0].split("=")[1]
    service = _run(["/usr/sbin/slappasswd", "-s", bind_password]).strip()
    entries = [
        f"dn: {SUFFIX}\nobjectClass: dcObject\nobjectClass: organization\no: {org}\ndc: {org}",
        f"dn: ou=people,{SUFFIX}\nobjectClass: organizationalUnit\nou: people",
        f"dn: ou=groups,{SUFFIX}\nobjectClass: organizationalUnit\nou: groups",
        f"dn: ou=services,{SUFFIX}\nobjectClass: organizationalUnit\nou: services",
        f"dn: {BIND_DN}\nobjectClass: organizationalRole\nobjectClass: simpleSecurityObject\n"
        f"cn: sssd\nuserPassword: {service}",
    ]
    for u in users:
        hashed = _run(["/usr/sbin/slappasswd", "-s", u.password]).strip()
        entries.append(
            f"dn: uid={u.name},ou=people,{SUFFIX}\nobjectClass: inetOrgPerson\n"
            f"objectClass: posixAccount\nuid: {u.name}\ncn: {u.name}\nsn: {u.name}\n"
            f"uidNumber: {u.uid}\ngidNumber: {u.gid}\nhomeDirectory: /home/{u.name}\n"
            f"loginShell: /bin/bash\nuserPassword: {hashed}"
        )
        entries.append(
            f"dn: cn={u.name},ou=groups,{SUFFIX}\nobjectClass: posixGroup\ncn: {u.name}\n"
            f"gidNumber: {u.gid}"
        )
    for name, (gid, members) in groups.items():
        lines = [f"dn: cn={name},ou=groups,{SUFFIX}", "objectClass: posixGroup", f"cn: {name}"]
        lines += [f"gidNumber: {gid}", *(f"memberUid: {m}" for m in members)]
        entries.append("\n".join(lines))
    for name, member_dns in named_groups.items():
        lines = [f"dn: {group_dn(name)}", "objectClass: groupOfNames", f"cn: {name}"]
        entries.append("\n".join([*lines, *(f"member: {dn}" for dn in member_dns)]))
    return "\n\n".join(entries) + "\n"


def _slapd_conf(root: Path, cert: Path, key: Path, ca: Path, admin_hash: str) -> str:
    schemas = "\n".join(f"include /etc/ldap/schema/{s}.schema" for s in SCHEMAS)
    return f"""{schemas}
pidfile {root}/slapd.pid
modulepath /usr/lib/ldap
moduleload back_mdb
TLSCACertificateFile {ca}
TLSCertificateFile {cert}
TLSCertificateKeyFile {key}
database mdb
maxsize 104857600
suffix "{SUFFIX}"
rootdn "{ADMIN_DN}"
rootpw {admin_hash}
directory {root}/data
# Passwords: a bind may check one, nobody reads one. Everything else only sssd's
# service DN reads: its bind password must reach sssd for any user to resolve.
access to attrs=userPassword by anonymous auth by self read by * none
access to * by dn.exact="{BIND_DN}" read by self read by anonymous auth by * none
"""


def _wait_for_tls(ca: Path, host: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    context = ssl.create_default_context(cafile=str(ca))
    deadline = time.monotonic() + 30
    while True:
        try:
            with (
                socket.create_connection((host, PORT), timeout=2) as raw,
                context.wrap_socket(raw, server_hostname=host),
            ):
                return
        except OSError as err:
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
                raise LdapError(
                    f"slapd not serving ldaps ({err}; exit {proc.poll()}):\n{tail}"
                ) from err
            time.sleep(0.3)


@contextmanager
def admin(directory: Directory) -> Iterator[Connection]:
    """A connection bound as the directory's admin, for the tests' live edits."""
    uri = urlsplit(directory.uri)
    server = Server(uri.hostname or "", port=uri.port, use_ssl=True,
                    tls=Tls(ca_certs_data=directory.ca_pem))  # fmt: skip
    with Connection(
        server, directory.admin_dn, directory.admin_password, auto_bind=True
    ) as connection:
        yield connection


@contextmanager
def running_slapd(
    root: Path,
    users: tuple[LdapUser, ...],
    groups: dict[str, tuple[int, tuple[str, ...]]] | None = None,
    *,
    named_groups: dict[str, tuple[str, ...]] | None = None,
    host: str | None = None,
) -> Iterator[Directory]:
    """slapd serving `users` (each with a group of its name), `groups` (name ->
    gid, member names) and `named_groups` (name -> member DNs) on
    ldaps://<host>:PORT (default: the bridge address)."""
    if not SLAPD.exists():
        raise LdapError("slapd not found: `apt-get install slapd` (Debian's OpenLDAP server)")
    host = host or str(BRIDGE_IP)
    (root / "data").mkdir(parents=True, exist_ok=True)
    ca, cert, key = _certificates(root, host)
    admin_password = secrets.token_urlsafe(18)
    admin_hash = _run(["/usr/sbin/slappasswd", "-s", admin_password]).strip()
    conf = root / "slapd.conf"
    conf.write_text(_slapd_conf(root, cert, key, ca, admin_hash))
    ldif = root / "directory.ldif"
    bind_password = secrets.token_urlsafe(18)
    ldif.write_text(_ldif(users, groups or {}, named_groups or {}, bind_password))
    _run(["/usr/sbin/slapadd", "-f", str(conf), "-l", str(ldif)])
    log = root / "slapd.log"
    with log.open("wb") as out:
        # -d 0: foreground (stopped by PID), no debug output; -h: that address only.
        proc = subprocess.Popen(
            [str(SLAPD), "-d", "0", "-f", str(conf), "-h", f"ldaps://{host}:{PORT}/"],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        _wait_for_tls(ca, host, proc, log)
        yield Directory(
            f"ldaps://{host}:{PORT}",
            SUFFIX,
            ca.read_text(),
            BIND_DN,
            bind_password,
            ADMIN_DN,
            admin_password,
        )
    finally:
        terminate(proc)
