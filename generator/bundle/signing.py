"""Ed25519 signatures over manifest.json (``mi-certify keygen``, ``sign``, ``check --pubkey``).

The signature covers the exact bytes of ``manifest.json``, which binds every other
file of the bundle by its sha256, so one signature vouches for the whole bundle. Keys
are PEM files: PKCS#8 private keys (optionally password-protected with
``MI_CERTIFY_KEY_PASSWORD``) and SubjectPublicKeyInfo public keys, the formats
``openssl genpkey -algorithm ed25519`` writes. Library: ``cryptography`` (pyca),
Ed25519 as in RFC 8032.

``manifest.json.sig`` is JSON: {"algorithm": "Ed25519", "signature": base64,
"public_key_sha256": fingerprint of the raw 32-byte public key, "signed_file":
"manifest.json", "manifest_sha256": ...}; it is listed as not hashed in the manifest.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from mi_certify.generator.core.errors import MiCertifyError

SIGNATURE_FILE = "manifest.json.sig"


class SignatureError(MiCertifyError):
    """A key or a signature file is unusable (exit 2), or a signature does not verify."""


def _raw(pub: Ed25519PublicKey) -> bytes:
    return pub.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def fingerprint(pub: Ed25519PublicKey) -> str:
    """sha256 hex digest of the raw 32-byte public key."""
    return hashlib.sha256(_raw(pub)).hexdigest()


def key_home() -> Path:
    """Where keys go by default: ``$MI_CERTIFY_KEY_DIR``, else ``$XDG_CONFIG_HOME/mi-certify/keys``,
    else ``~/.config/mi-certify/keys``: outside any project's working tree."""
    if os.environ.get("MI_CERTIFY_KEY_DIR"):
        return Path(os.environ["MI_CERTIFY_KEY_DIR"])
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "mi-certify" / "keys"


def git_work_tree(path: str | Path) -> Path | None:
    """The top of the git working tree that would hold ``path`` (a folder above it with a ``.git``
    entry, directory or file), or None."""
    p = Path(path).absolute().parent
    for d in (p, *p.parents):
        if (d / ".git").exists():
            return d
    return None


def refuse_work_tree(path: str | Path) -> None:
    """Raise SignatureError when a key file at ``path`` would sit inside a git working tree
    (``git add .`` would commit the secret)."""
    top = git_work_tree(path)
    if top is not None:
        home = key_home()
        where = (f"the default is {home}" if git_work_tree(home / "k") is None else
                 f"the default, {home}, is inside a work tree too: set MI_CERTIFY_KEY_DIR to a folder outside it, "
                 f"or unset it for ~/.config/mi-certify/keys")
        raise SignatureError(f"inside the git working tree {top}: a key there is one `git add` away from the "
                             f"repository; write it outside ({where})", file=str(path))


def new_hmac_key(path: str | Path, nbytes: int = 32) -> None:
    """Write ``nbytes`` random bytes (``os.urandom``) as an audit-log HMAC key file (raw bytes, the
    format :func:`mi_certify.runtime.audit.load_key` reads; mode 0600, parent folders 0700).

    Raises:
        SignatureError if the file exists (never overwritten) or lies in a git working tree."""
    path = Path(path)
    refuse_work_tree(path)
    if path.exists():
        raise SignatureError("exists; refusing to overwrite a key", file=str(path))
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(os.urandom(nbytes))


def keygen(private_path: str | Path, public_path: str | Path) -> str:
    """Write a new Ed25519 key pair (PEM; private file mode 0600, parent folders 0700). Returns
    the fingerprint.

    Raises:
        SignatureError if a target file exists (never overwritten) or the private key would lie
        in a git working tree (:func:`refuse_work_tree`).
    """
    refuse_work_tree(private_path)
    for p in (private_path, public_path):
        if Path(p).exists():
            raise SignatureError("exists; refusing to overwrite a key", file=str(p))
    Path(private_path).parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    Path(public_path).parent.mkdir(parents=True, exist_ok=True)
    key = Ed25519PrivateKey.generate()
    password = os.environ.get("MI_CERTIFY_KEY_PASSWORD")
    enc = (serialization.BestAvailableEncryption(password.encode()) if password
           else serialization.NoEncryption())
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, enc))
    Path(public_path).write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                                serialization.PublicFormat.SubjectPublicKeyInfo))
    return fingerprint(key.public_key())


def load_private_key(path: str | Path) -> Ed25519PrivateKey:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise SignatureError(f"cannot read the key: {exc.strerror}", file=str(path)) from None
    password = os.environ.get("MI_CERTIFY_KEY_PASSWORD")
    try:
        key = serialization.load_pem_private_key(data, password.encode() if password else None)
    except (ValueError, TypeError) as exc:
        raise SignatureError(f"not a usable PEM private key ({exc})", file=str(path)) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise SignatureError("not an Ed25519 private key", file=str(path))
    return key


def load_public_key(path: str | Path) -> Ed25519PublicKey:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise SignatureError(f"cannot read the key: {exc.strerror}", file=str(path)) from None
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        raise SignatureError(f"not a usable PEM public key ({exc})", file=str(path)) from None
    if not isinstance(key, Ed25519PublicKey):
        raise SignatureError("not an Ed25519 public key", file=str(path))
    return key


def sign_bundle(bundle: str | Path, key_path: str | Path) -> dict:
    """Sign ``bundle/manifest.json`` with the private key; writes manifest.json.sig.

    Returns:
        The signature record written.
    Raises:
        SignatureError (bad key), MiCertifyError (no manifest.json in ``bundle``).
    """
    bundle = Path(bundle)
    manifest = bundle / "manifest.json"
    if not manifest.is_file():
        raise MiCertifyError("no manifest.json here: not an mi-certify bundle", file=str(bundle))
    key = load_private_key(key_path)
    data = manifest.read_bytes()
    rec = {"algorithm": "Ed25519", "signed_file": "manifest.json",
           "manifest_sha256": hashlib.sha256(data).hexdigest(),
           "public_key_sha256": fingerprint(key.public_key()),
           "signature": base64.b64encode(key.sign(data)).decode("ascii")}
    (bundle / SIGNATURE_FILE).write_text(json.dumps(rec, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return rec


def verify_bundle_signature(bundle: str | Path, pub: Ed25519PublicKey) -> str:
    """Check manifest.json.sig against manifest.json and ``pub``.

    Returns:
        A one-line description of the good signature.
    Raises:
        SignatureError naming what is wrong (missing file, wrong key, bad signature).
    """
    bundle = Path(bundle)
    sig_path = bundle / SIGNATURE_FILE
    if not sig_path.is_file():
        raise SignatureError("missing: the bundle is not signed", file=str(sig_path))
    try:
        rec = json.loads(sig_path.read_text(encoding="utf-8"))
        sig = base64.b64decode(rec["signature"], validate=True)
    except (ValueError, KeyError, TypeError) as exc:
        raise SignatureError(f"malformed signature file ({exc})", file=str(sig_path)) from None
    if rec.get("algorithm") != "Ed25519":
        raise SignatureError(f"algorithm {rec.get('algorithm')!r} is not Ed25519", file=str(sig_path))
    data = (bundle / "manifest.json").read_bytes()
    try:
        pub.verify(sig, data)
    except InvalidSignature:
        who = "a different key" if rec.get("public_key_sha256") != fingerprint(pub) else "this key"
        raise SignatureError(f"signature does not verify (signed by {who}, or manifest.json changed)",
                             file=str(sig_path)) from None
    return f"Ed25519 signature by key {fingerprint(pub)[:16]}… over manifest.json verifies"
