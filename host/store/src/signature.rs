//! Publisher signatures: cosign-compatible signatures of a Wasm artifact's manifest, made
//! with keys the owner pins in `config.toml` (`[[tools.trusted_keys]]`), verified offline.
//!
//! The layout is the one cosign and skopeo (`--sign-by-sigstore-private-key`) write in a
//! registry: an image manifest tagged `sha256-<manifest hex>.sig` in the same repository,
//! whose layers (`application/vnd.dev.cosign.simplesigning.v1+json`) are each a
//! simple-signing payload, with the base64 of an ECDSA P-256 signature over the payload
//! bytes in the annotation `dev.cosignproject.cosign/signature`. The payload names the
//! manifest it signs (`critical.image.docker-manifest-digest`) and the repository
//! (`critical.identity.docker-reference`).
//!
//! Verified with the RustCrypto `p256` crate rather than the `sigstore` crate: pinned
//! keys need no Fulcio, Rekor or TUF, which the `sigstore` crate brings with an async
//! OpenID client; what is checked here is one signature and two claims.

use p256::ecdsa::signature::Verifier as _;
use p256::pkcs8::DecodePublicKey as _;

use crate::digest::Digest;
use crate::error::{SignatureProblem, StoreError};
use crate::oci::{ImageManifest, Reference, Registry, Scope};

/// A signature layer's media type.
pub const SIMPLE_SIGNING_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The annotation holding a layer's signature.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// The payload type cosign and skopeo write.
const PAYLOAD_TYPE: &str = "cosign container image signature";
/// Bytes of one signature payload, at most.
const MAX_PAYLOAD_BYTES: u64 = 64 << 10;
/// Signature layers read, at most.
const MAX_SIGNATURES: usize = 16;
/// How long reading every signature may take, past the one payload being read then.
const SIGNATURES_DEADLINE: std::time::Duration = std::time::Duration::from_secs(60);

/// A key the owner pinned, ready to verify with.
#[derive(Debug, Clone)]
pub struct PinnedKey {
    /// Its name in `config.toml`.
    pub name: String,
    /// `sha256:` of its SubjectPublicKeyInfo, the first 16 hex digits.
    pub fingerprint: String,
    /// What it signs for.
    pub scopes: Vec<Scope>,
    key: p256::ecdsa::VerifyingKey,
}

impl PinnedKey {
    /// Whether `reference` is in one of this key's scopes ([`Scope::covers`]).
    pub fn covers(&self, reference: &Reference) -> bool {
        self.scopes.iter().any(|s| s.covers(reference))
    }

    /// `name (sha256:0123…)`: how a signer is shown and recorded.
    pub fn signer(&self) -> String {
        format!("{} ({})", self.name, self.fingerprint)
    }
}

/// Reads the `[[tools.trusted_keys]]` of `config`: each key's PEM, inline or from a file
/// (relative to `state_root`). A key that cannot be read refuses, naming it.
pub fn load_keys(
    keys: &[bx_state::TrustedKey],
    state_root: &std::path::Path,
) -> Result<Vec<PinnedKey>, StoreError> {
    keys.iter()
        .enumerate()
        .map(|(i, k)| {
            let bad = |why: String| StoreError::TrustedKey {
                name: crate::error::cut(&k.name, 64),
                index: i + 1,
                message: why,
            };
            if k.name.is_empty() || k.scopes.is_empty() {
                return Err(bad("needs a name and at least one scope".into()));
            }
            // A scope that cannot be read refuses every registry install: one that matched
            // nothing would turn the check off without a word.
            let scopes = k
                .scopes
                .iter()
                .map(|s| Scope::parse(s))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| bad(e.to_string()))?;
            let pem = if k.key.trim_start().starts_with("-----BEGIN") {
                k.key.clone()
            } else {
                let path = state_root.join(&k.key);
                let bytes = bx_state::read_own(&path, 16 << 10)
                    .map_err(|e| bad(e.to_string()))?
                    .ok_or_else(|| bad(format!("{} does not exist", path.display())))?;
                String::from_utf8(bytes)
                    .map_err(|_| bad(format!("{} is not text", path.display())))?
            };
            let key = p256::ecdsa::VerifyingKey::from_public_key_pem(pem.trim())
                .map_err(|e| bad(format!("not an ECDSA P-256 public key in PEM: {e}")))?;
            let der =
                p256::PublicKey::from(&key).to_public_key_der().map_err(|e| bad(e.to_string()))?;
            let fingerprint = format!("sha256:{}", &Digest::of(der.as_bytes()).hex()[..16]);
            Ok(PinnedKey { name: k.name.clone(), fingerprint, scopes, key })
        })
        .collect()
}

use p256::pkcs8::EncodePublicKey as _;

/// What one signature layer came to.
enum Verdict {
    /// A pinned key verified it and its claims name this manifest and repository.
    Good(String),
    /// A pinned key verified it, for another manifest or repository.
    Elsewhere(String),
    /// No pinned key verified it.
    Unverified,
    /// It is not a signature at all (bad base64 or DER, a payload that is not one).
    Malformed(String),
}

/// Checks that manifest `manifest` of `reference` is signed by one of `keys`; returns the
/// signer. Every refusal says which it is: unsigned, signed by a key not pinned here (or
/// altered after signing: the two cannot be told apart without the other key), a
/// signature of another manifest, or a malformed signature.
pub fn verify(
    registry: &Registry,
    reference: &Reference,
    manifest: &Digest,
    keys: &[&PinnedKey],
) -> Result<String, StoreError> {
    let refuse = |problem: SignatureProblem, detail: String| StoreError::Signature {
        reference: reference.at(manifest).to_string(),
        problem,
        detail,
        keys: keys.iter().map(|k| k.signer()).collect::<Vec<_>>().join(", "),
    };
    let tag = format!("sha256-{}.sig", manifest.hex());
    let Some((bytes, _)) = registry.manifest(&tag)? else {
        return Err(refuse(SignatureProblem::Unsigned, format!("the registry has no {tag}")));
    };
    let signatures = ImageManifest::parse(&bytes)
        .map_err(|e| refuse(SignatureProblem::Malformed, format!("{tag}: {e}")))?;
    let all: Vec<_> =
        signatures.layers.iter().filter(|l| l.media_type == SIMPLE_SIGNING_TYPE).collect();
    let layers = &all[..all.len().min(MAX_SIGNATURES)];
    if layers.is_empty() {
        return Err(refuse(SignatureProblem::Malformed, format!("{tag} has no signature layer")));
    }
    let mut verdicts = Vec::new();
    // One deadline for all of them: each payload has its own, and 16 slow ones would
    // otherwise add up to a quarter of an hour.
    let give_up = std::time::Instant::now() + SIGNATURES_DEADLINE;
    for layer in layers.iter().copied() {
        if std::time::Instant::now() > give_up {
            return Err(refuse(
                SignatureProblem::Malformed,
                format!(
                    "the registry took over {} s to send the signatures",
                    SIGNATURES_DEADLINE.as_secs()
                ),
            ));
        }
        let payload = registry
            .blob(layer, MAX_PAYLOAD_BYTES, None)
            .map_err(|e| refuse(SignatureProblem::Malformed, format!("its payload: {e}")))?;
        verdicts.push(judge(
            &payload,
            layer.annotations.get(SIGNATURE_ANNOTATION),
            reference,
            manifest,
            keys,
        ));
    }
    if let Some(signer) = verdicts.iter().find_map(|v| match v {
        Verdict::Good(s) => Some(s.clone()),
        _ => None,
    }) {
        return Ok(signer);
    }
    if let Some(why) = verdicts.iter().find_map(|v| match v {
        Verdict::Elsewhere(w) => Some(w.clone()),
        _ => None,
    }) {
        return Err(refuse(SignatureProblem::OtherManifest, why));
    }
    if verdicts.iter().any(|v| matches!(v, Verdict::Unverified)) {
        return Err(refuse(
            SignatureProblem::NotPinned,
            if all.len() > layers.len() {
                format!(
                    "{} signatures; the first {MAX_SIGNATURES} were read and none verifies",
                    all.len()
                )
            } else {
                format!("{} signature(s), none of them verifies", all.len())
            },
        ));
    }
    let why = verdicts
        .into_iter()
        .find_map(|v| match v {
            Verdict::Malformed(w) => Some(w),
            _ => None,
        })
        .unwrap_or_default();
    Err(refuse(SignatureProblem::Malformed, why))
}

fn judge(
    payload: &[u8],
    annotation: Option<&String>,
    reference: &Reference,
    manifest: &Digest,
    keys: &[&PinnedKey],
) -> Verdict {
    use base64::Engine as _;
    let Some(text) = annotation else {
        return Verdict::Malformed(format!("a layer has no {SIGNATURE_ANNOTATION}"));
    };
    let Ok(raw) = base64::engine::general_purpose::STANDARD.decode(text.trim()) else {
        return Verdict::Malformed("its signature is not base64".into());
    };
    let signature = match p256::ecdsa::DerSignature::from_bytes(&raw) {
        Ok(der) => p256::ecdsa::Signature::try_from(der),
        Err(_) => p256::ecdsa::Signature::from_slice(&raw),
    };
    let Ok(signature) = signature else {
        return Verdict::Malformed("its signature is not an ECDSA signature".into());
    };
    let Some(key) = keys.iter().find(|k| k.key.verify(payload, &signature).is_ok()) else {
        return Verdict::Unverified;
    };
    // The claims are read only once a pinned key has vouched for the bytes.
    let Ok(json) = serde_json::from_slice::<serde_json::Value>(payload) else {
        return Verdict::Malformed("its payload is not JSON".into());
    };
    let critical = &json["critical"];
    if critical["type"].as_str() != Some(PAYLOAD_TYPE) {
        return Verdict::Malformed(format!("its payload's type is not {PAYLOAD_TYPE:?}"));
    }
    let signed = critical["image"]["docker-manifest-digest"].as_str().unwrap_or("");
    if signed != manifest.to_string() {
        return Verdict::Elsewhere(format!(
            "{} signed manifest {}, not {manifest}",
            key.signer(),
            crate::error::cut(signed, 80)
        ));
    }
    // The identity names a repository, with or without a tag or digest.
    let identity = critical["identity"]["docker-reference"].as_str().unwrap_or("");
    let repository = identity.split('@').next().unwrap_or("");
    let repository = match repository.rsplit_once(':') {
        Some((r, t)) if !t.contains('/') => r,
        _ => repository,
    };
    if repository != reference.name() {
        return Verdict::Elsewhere(format!(
            "{} signed it for {}, not {}",
            key.signer(),
            crate::error::cut(identity, 200),
            reference.name()
        ));
    }
    Verdict::Good(key.signer())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scope_covers_a_registry_or_a_repository_prefix_at_a_slash() {
        let key = PinnedKey {
            name: "acme".into(),
            fingerprint: String::new(),
            scopes: vec![
                Scope::parse("ghcr.io/acme").unwrap(),
                Scope::parse("127.0.0.1:5000").unwrap(),
            ],
            key: p256::ecdsa::VerifyingKey::from(
                &p256::ecdsa::SigningKey::from_slice(&[7u8; 32]).unwrap(),
            ),
        };
        let r = |t: &str| Reference::parse(&format!("oci://{t}:1")).unwrap();
        assert!(key.covers(&r("ghcr.io/acme/weather")));
        assert!(key.covers(&r("ghcr.io/acme")));
        assert!(key.covers(&r("127.0.0.1:5000/anything/here")));
        assert!(key.covers(&r("localhost:5000/anything/here")));
        assert!(!key.covers(&r("ghcr.io/acme-evil/weather")));
        assert!(!key.covers(&r("ghcr.io/other/acme")));
        assert!(!key.covers(&r("127.0.0.1:50001/x")));
    }
}
