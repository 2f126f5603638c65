#!/usr/bin/env python3
"""Third-party OCI peer tooling for bx's `tool install oci://` tests.

Run with the repo venv (`.venv/bin/python`), which needs (pinned):
    oras==0.2.43  pynacl==1.6.2  cryptography (already present, 50.0.2)
and the Debian packages `skopeo` (1.9.3) and `docker-registry` (2.8.2).

Subcommands (each prints ONE JSON object on stdout; non-zero exit + stderr on failure):
    keygen DIR            -> DIR/cosign.key (ENCRYPTED SIGSTORE PRIVATE KEY), DIR/cosign.pub, DIR/passphrase
    oras-push REF FILE    -> push FILE as a CNCF Wasm OCI artifact with oras-py
    oras-pull REF OUT     -> pull a Wasm OCI artifact with oras-py, write its layer to OUT
    sign REF KEYDIR       -> sign REF's manifest with skopeo 1.9 (cosign-style sigstore attachment)
    verify REF KEYDIR     -> independent check: fetch REF's sha256-<hex>.sig and verify with cosign.pub

REF is REGISTRY/REPO:TAG or REGISTRY/REPO@sha256:HEX (optionally with an oci:// prefix);
REGISTRY must be plain http (e.g. 127.0.0.1:PORT).
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request

WASM_CONFIG_MT = "application/vnd.wasm.config.v0+json"
WASM_LAYER_MT = "application/wasm"
OCI_MANIFEST_MT = "application/vnd.oci.image.manifest.v1+json"
SIGSTORE_LAYER_MT = "application/vnd.dev.cosign.simplesigning.v1+json"
SIG_ANNOTATION = "dev.cosignproject.cosign/signature"


class PeerError(Exception):
    pass


def die(msg: str) -> None:
    raise PeerError(msg)


def emit(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj, sort_keys=True) + "\n")
    sys.stdout.flush()


# ---------------------------------------------------------------- references

REF_RE = re.compile(
    r"^(?:oci://)?(?P<registry>[^/]+)/(?P<repo>[a-z0-9]+(?:[._/-][a-z0-9]+)*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9._-]{0,127}))?"
    r"(?:@(?P<digest>sha256:[0-9a-f]{64}))?$"
)


def parse_ref(ref: str) -> dict:
    m = REF_RE.match(ref)
    if not m or not (m.group("tag") or m.group("digest")):
        die(f"bad reference {ref!r}: want REGISTRY/REPO:TAG or REGISTRY/REPO@sha256:HEX")
    d = m.groupdict()
    d["reference"] = d["digest"] or d["tag"]
    d["plain"] = ref[len("oci://"):] if ref.startswith("oci://") else ref
    return d


def http(method: str, url: str, headers: dict | None = None, data: bytes | None = None):
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        body = e.read().decode(errors="replace")
        die(f"{method} {url}: HTTP {e.code}: {body.strip()}")
    except urllib.error.URLError as e:
        die(f"{method} {url}: {e.reason}")


def get_manifest(registry: str, repo: str, reference: str) -> tuple[bytes, str]:
    accept = ",".join([
        OCI_MANIFEST_MT,
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    ])
    _, hdrs, body = http("GET", f"http://{registry}/v2/{repo}/manifests/{reference}",
                         {"Accept": accept})
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    hd = {k.lower(): v for k, v in hdrs.items()}.get("docker-content-digest")
    if hd and hd != digest:
        die(f"registry Docker-Content-Digest {hd} != sha256 of body {digest}")
    if reference.startswith("sha256:") and reference != digest:
        die(f"manifest fetched by {reference} hashes to {digest}")
    return body, digest


def get_blob(registry: str, repo: str, digest: str) -> bytes:
    _, _, body = http("GET", f"http://{registry}/v2/{repo}/blobs/{digest}")
    got = "sha256:" + hashlib.sha256(body).hexdigest()
    if got != digest:
        die(f"blob {digest} hashes to {got}")
    return body


# ---------------------------------------------------------------- keygen

def cmd_keygen(args: list[str]) -> None:
    if len(args) != 1:
        die("usage: keygen DIR")
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    import nacl.secret
    import nacl.utils

    outdir = args[0]
    os.makedirs(outdir, exist_ok=True)
    passphrase = base64.urlsafe_b64encode(os.urandom(18)).decode()
    priv = ec.generate_private_key(ec.SECP256R1())
    pkcs8 = priv.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                               serialization.NoEncryption())
    # go-securesystemslib "encrypted" envelope, as cosign/sigstore write it:
    # key = scrypt(passphrase, salt, N=32768, r=8, p=1, 32); nacl secretbox(pkcs8 DER).
    salt = os.urandom(32)
    n, r, p = 32768, 8, 1
    key = hashlib.scrypt(passphrase.encode(), salt=salt, n=n, r=r, p=p, dklen=32,
                         maxmem=64 * 1024 * 1024)
    nonce = nacl.utils.random(nacl.secret.SecretBox.NONCE_SIZE)
    ct = nacl.secret.SecretBox(key).encrypt(pkcs8, nonce).ciphertext
    envelope = {
        "kdf": {"name": "scrypt", "params": {"N": n, "r": r, "p": p},
                "salt": base64.b64encode(salt).decode()},
        "cipher": {"name": "nacl/secretbox", "nonce": base64.b64encode(nonce).decode()},
        "ciphertext": base64.b64encode(ct).decode(),
    }
    pem_type = os.environ.get("OCI_PEER_KEY_PEM_TYPE", "ENCRYPTED SIGSTORE PRIVATE KEY")
    # Compact JSON and 64-column PEM lines, as `cosign generate-key-pair` writes them.
    b64 = base64.b64encode(json.dumps(envelope, separators=(",", ":")).encode()).decode()
    body = "".join(b64[i:i + 64] + "\n" for i in range(0, len(b64), 64))
    key_pem = f"-----BEGIN {pem_type}-----\n{body}-----END {pem_type}-----\n"
    pub_pem = priv.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()

    key_path = os.path.join(outdir, "cosign.key")
    with open(key_path, "w") as f:
        f.write(key_pem)
    os.chmod(key_path, 0o600)
    with open(os.path.join(outdir, "cosign.pub"), "w") as f:
        f.write(pub_pem)
    with open(os.path.join(outdir, "passphrase"), "w") as f:
        f.write(passphrase)  # no trailing newline (skopeo strips one anyway)
    emit({"private_key": key_path, "public_key": os.path.join(outdir, "cosign.pub"),
          "passphrase_file": os.path.join(outdir, "passphrase"), "pem_type": pem_type})


def load_cosign_key(keydir: str):
    """Decrypt KEYDIR/cosign.key (cosign/sigstore encrypted PEM) -> cryptography private key."""
    from cryptography.hazmat.primitives import serialization
    import nacl.secret

    with open(os.path.join(keydir, "cosign.key")) as f:
        pem = f.read()
    m = re.search(r"-----BEGIN (ENCRYPTED (?:SIGSTORE|COSIGN) PRIVATE KEY)-----\n(.*?)-----END \1-----",
                  pem, re.S)
    if not m:
        die("cosign.key: no ENCRYPTED SIGSTORE/COSIGN PRIVATE KEY PEM block")
    env = json.loads(base64.b64decode("".join(m.group(2).split())))
    with open(os.path.join(keydir, "passphrase"), "rb") as f:
        passphrase = f.read().rstrip(b"\n")
    kdf = env["kdf"]
    if kdf["name"] != "scrypt" or env["cipher"]["name"] != "nacl/secretbox":
        die(f"cosign.key: unsupported kdf/cipher {kdf['name']}/{env['cipher']['name']}")
    prm = kdf["params"]
    key = hashlib.scrypt(passphrase, salt=base64.b64decode(kdf["salt"]), n=prm["N"], r=prm["r"],
                         p=prm["p"], dklen=32, maxmem=256 * 1024 * 1024)
    der = nacl.secret.SecretBox(key).decrypt(base64.b64decode(env["ciphertext"]),
                                             base64.b64decode(env["cipher"]["nonce"]))
    return serialization.load_der_private_key(der, password=None)


# ---------------------------------------------------------------- oras

def oras_client(registry: str):
    import logging
    import oras.client
    import oras.logger

    oras.logger.setup_logger(quiet=True)
    logging.getLogger("oras").setLevel(logging.ERROR)
    return oras.client.OrasClient(hostname=registry, insecure=True, tls_verify=False)


def cmd_oras_push(args: list[str]) -> None:
    if len(args) != 2:
        die("usage: oras-push REF FILE")
    ref, path = parse_ref(args[0]), args[1]
    if ref["digest"]:
        die("oras-push needs a tag reference (REGISTRY/REPO:TAG)")
    with open(path, "rb") as f:
        data = f.read()
    layer_digest = "sha256:" + hashlib.sha256(data).hexdigest()
    config = {
        "created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "architecture": "wasm",
        "os": "wasip2",
        "layerDigests": [layer_digest],
        "component": {"exports": [], "imports": [], "target": None},
    }
    client = oras_client(ref["registry"])
    with tempfile.TemporaryDirectory() as td:
        cfg = os.path.join(td, "config.json")
        with open(cfg, "w") as f:
            json.dump(config, f, separators=(",", ":"))
        # oras-py annotates each layer with org.opencontainers.image.title=<basename>.
        blob = os.path.join(td, os.path.basename(path) or "component.wasm")
        shutil.copyfile(path, blob)
        resp = client.push(
            target=ref["plain"],
            files=[f"{blob}:{WASM_LAYER_MT}"],
            manifest_config=f"{cfg}:{WASM_CONFIG_MT}",
            disable_path_validation=True,
            quiet=True,
        )
    if resp.status_code not in (200, 201):
        die(f"manifest PUT failed: HTTP {resp.status_code}: {resp.text}")
    manifest_digest = resp.headers.get("Docker-Content-Digest")
    # Cross-check against what the registry serves.
    _, served = get_manifest(ref["registry"], ref["repo"], ref["reference"])
    if manifest_digest and manifest_digest != served:
        die(f"PUT said {manifest_digest}, GET serves {served}")
    emit({"manifest_digest": served, "layer_digest": layer_digest,
          "config_digest": "sha256:" + hashlib.sha256(
              json.dumps(config, separators=(",", ":")).encode()).hexdigest()})


def cmd_oras_pull(args: list[str]) -> None:
    if len(args) != 2:
        die("usage: oras-pull REF OUT")
    ref, out = parse_ref(args[0]), args[1]
    client = oras_client(ref["registry"])
    manifest = client.get_manifest(ref["plain"])
    _, manifest_digest = get_manifest(ref["registry"], ref["repo"], ref["reference"])
    cfg = manifest.get("config", {})
    if cfg.get("mediaType") != WASM_CONFIG_MT:
        die(f"config mediaType is {cfg.get('mediaType')!r}, want {WASM_CONFIG_MT}")
    layers = [l for l in manifest.get("layers", []) if l.get("mediaType") == WASM_LAYER_MT]
    if len(layers) != 1:
        die(f"want exactly one {WASM_LAYER_MT} layer, manifest has "
            f"{[l.get('mediaType') for l in manifest.get('layers', [])]}")
    layer_digest = layers[0]["digest"]
    with tempfile.TemporaryDirectory() as td:
        tmp = os.path.join(td, "layer")
        client.download_blob(ref["plain"], layer_digest, tmp)
        with open(tmp, "rb") as f:
            data = f.read()
    got = "sha256:" + hashlib.sha256(data).hexdigest()
    if got != layer_digest:
        die(f"layer {layer_digest} hashes to {got}")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "wb") as f:
        f.write(data)
    emit({"layer_digest": layer_digest, "manifest_digest": manifest_digest,
          "config_digest": cfg.get("digest"), "size": len(data)})


# ---------------------------------------------------------------- skopeo sign

def sig_tag(digest: str) -> str:
    algo, hexd = digest.split(":", 1)
    return f"{algo}-{hexd}.sig"


SKOPEO_CIMAGE_VERSION = "5.23.1"  # containers/image vendored by Debian's skopeo 1.9.3


def _skopeo(args: list[str], td: str) -> subprocess.CompletedProcess:
    regd = os.path.join(td, "registries.d")
    if not os.path.isdir(regd):
        os.makedirs(regd)
        with open(os.path.join(regd, "default.yaml"), "w") as f:
            f.write("default-docker:\n  use-sigstore-attachments: true\n")
    cmd = ["skopeo", "--insecure-policy", "--registries.d", regd] + args
    env = dict(os.environ, TMPDIR=td, HOME=td)
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    p.cmdline = " ".join(cmd)  # type: ignore[attr-defined]
    return p


def sigstore_payload(manifest_digest: str, identity: str) -> bytes:
    """Byte-for-byte what c/image's NewUntrustedSigstorePayload + MarshalJSON produce
    (Go json.Marshal of maps: keys sorted, compact)."""
    doc = {
        "critical": {
            "identity": {"docker-reference": identity},
            "image": {"docker-manifest-digest": manifest_digest},
            "type": "cosign container image signature",
        },
        "optional": {
            "creator": f"containers/image {SKOPEO_CIMAGE_VERSION}",
            "timestamp": int(datetime.datetime.now(datetime.timezone.utc).timestamp()),
        },
    }
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


def cmd_sign(args: list[str]) -> None:
    if len(args) != 2:
        die("usage: sign REF KEYDIR")
    ref, keydir = parse_ref(args[0]), args[1]
    if not shutil.which("skopeo"):
        die("skopeo not found on PATH")
    _, before = get_manifest(ref["registry"], ref["repo"], ref["reference"])
    # The signature is stored when skopeo writes the manifest to the destination: copy the
    # artifact onto REF itself (same tag, or same digest). --preserve-digests forbids any
    # manifest conversion (a Wasm artifact's digest must not change). The signed identity is
    # what skopeo would use by default: the destination reference, with its tag or digest.
    if ref["tag"]:
        identity = f"{ref['registry']}/{ref['repo']}:{ref['tag']}"
    else:
        identity = f"{ref['registry']}/{ref['repo']}@{before}"
    src = f"docker://{ref['registry']}/{ref['repo']}@{before}"
    dst = f"docker://{identity}"
    tls = ["--src-tls-verify=false", "--dest-tls-verify=false"]
    signer = "skopeo"
    with tempfile.TemporaryDirectory() as td:
        p = _skopeo(["copy", "--preserve-digests", *tls,
                     "--sign-by-sigstore-private-key", os.path.join(keydir, "cosign.key"),
                     "--sign-passphrase-file", os.path.join(keydir, "passphrase"),
                     "--sign-identity", identity, src, dst], td)
        if p.returncode != 0 and "sigstore disabled" in p.stderr:
            # Debian patches c/image so that sigstore signing/verification always fail
            # ("Debian-local change: sigstore disabled"). Fallback: produce the signature
            # exactly as c/image would (payload + ECDSA-P256/SHA-256, base64 DER) and let
            # skopeo/c/image itself store it as a cosign attachment: copy the artifact to a
            # dir: layout, add signature-1 in c/image's "\0sigstore-json\n" blob format,
            # then copy dir: -> docker:// with use-sigstore-attachments.
            signer = "python-ecdsa+skopeo-attachment-writer"
            layout = os.path.join(td, "layout")
            p = _skopeo(["copy", "--preserve-digests", "--src-tls-verify=false",
                         src, f"dir:{layout}"], td)
            if p.returncode != 0:
                die(f"skopeo failed (rc={p.returncode}): {p.cmdline}\n{p.stderr.strip()}")
            with open(os.path.join(layout, "manifest.json"), "rb") as f:
                got = "sha256:" + hashlib.sha256(f.read()).hexdigest()
            if got != before:
                die(f"skopeo dir: copy changed the manifest digest {before} -> {got}")
            from cryptography.hazmat.primitives import hashes
            from cryptography.hazmat.primitives.asymmetric import ec
            payload = sigstore_payload(before, identity)
            sig = load_cosign_key(keydir).sign(payload, ec.ECDSA(hashes.SHA256()))
            blob = {
                "mimeType": SIGSTORE_LAYER_MT,
                "payload": base64.b64encode(payload).decode(),  # Go []byte -> base64
                "annotations": {SIG_ANNOTATION: base64.b64encode(sig).decode()},
            }
            # The dir: copy already holds any existing signatures as signature-1..N.
            n = 1
            while os.path.exists(os.path.join(layout, f"signature-{n}")):
                n += 1
            with open(os.path.join(layout, f"signature-{n}"), "wb") as f:
                f.write(b"\x00sigstore-json\n" + json.dumps(blob, separators=(",", ":")).encode())
            p = _skopeo(["copy", "--preserve-digests", "--dest-tls-verify=false",
                         f"dir:{layout}", dst], td)
        if p.returncode != 0:
            die(f"skopeo failed (rc={p.returncode}): {p.cmdline}\n{p.stderr.strip()}")
    _, after = get_manifest(ref["registry"], ref["repo"], ref["reference"])
    if after != before:
        die(f"manifest digest changed: {before} -> {after}")
    tag = sig_tag(before)
    sig_body, sig_digest = get_manifest(ref["registry"], ref["repo"], tag)
    sig_manifest = json.loads(sig_body)
    emit({"signature_tag": tag, "signature_manifest_digest": sig_digest,
          "manifest_digest": before, "identity": identity, "signer": signer,
          "signatures": len(sig_manifest.get("layers", []))})


# ---------------------------------------------------------------- independent verify

def cmd_verify(args: list[str]) -> None:
    if len(args) != 2:
        die("usage: verify REF KEYDIR")
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    ref, keydir = parse_ref(args[0]), args[1]
    with open(os.path.join(keydir, "cosign.pub"), "rb") as f:
        pub = serialization.load_pem_public_key(f.read())
    _, digest = get_manifest(ref["registry"], ref["repo"], ref["reference"])
    tag = sig_tag(digest)
    sig_body, sig_digest = get_manifest(ref["registry"], ref["repo"], tag)
    sig_manifest = json.loads(sig_body)
    results = []
    for layer in sig_manifest.get("layers", []):
        if layer.get("mediaType") != SIGSTORE_LAYER_MT:
            continue
        payload = get_blob(ref["registry"], ref["repo"], layer["digest"])
        b64 = (layer.get("annotations") or {}).get(SIG_ANNOTATION)
        if not b64:
            continue
        try:
            pub.verify(base64.b64decode(b64), payload, ec.ECDSA(hashes.SHA256()))
        except InvalidSignature:
            results.append({"layer": layer["digest"], "ok": False})
            continue
        doc = json.loads(payload)
        ok = (doc.get("critical", {}).get("type") == "cosign container image signature"
              and doc["critical"]["image"]["docker-manifest-digest"] == digest)
        results.append({"layer": layer["digest"], "ok": ok,
                        "docker-reference": doc["critical"]["identity"]["docker-reference"]})
    if not any(r["ok"] for r in results):
        die(f"no valid signature in {tag}: {results}")
    emit({"signature_tag": tag, "signature_manifest_digest": sig_digest,
          "manifest_digest": digest, "results": results})


COMMANDS = {
    "keygen": cmd_keygen,
    "oras-push": cmd_oras_push,
    "oras-pull": cmd_oras_pull,
    "sign": cmd_sign,
    "verify": cmd_verify,
}


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        sys.stderr.write(__doc__)
        return 2
    try:
        COMMANDS[sys.argv[1]](sys.argv[2:])
    except PeerError as e:
        sys.stderr.write(f"oci_peer {sys.argv[1]}: {e}\n")
        return 1
    except Exception as e:  # noqa: BLE001 - surface third-party failures clearly
        sys.stderr.write(f"oci_peer {sys.argv[1]}: {type(e).__name__}: {e}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
