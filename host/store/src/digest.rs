//! `sha256:` digests: the only way bx names a component's bytes.

use sha2::{Digest as _, Sha256};

use crate::error::{DigestError, StoreError};

/// A SHA-256 digest, written `sha256:` and 64 lower-case hex digits.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Digest([u8; 32]);

impl Digest {
    /// Parses `sha256:HEX` strictly: the prefix, exactly 64 hex digits, lower case.
    pub fn parse(text: &str) -> Result<Digest, StoreError> {
        Digest::parse_text(text).map_err(|why| StoreError::BadDigest { text: text.to_owned(), why })
    }

    /// [`Digest::parse`], saying only what is wrong.
    pub(crate) fn parse_text(text: &str) -> Result<Digest, DigestError> {
        let hex_part = text.strip_prefix("sha256:").ok_or(DigestError::NoPrefix)?;
        if hex_part.len() != 64 {
            return Err(DigestError::Length);
        }
        if hex_part.chars().any(|c| c.is_ascii_uppercase()) {
            return Err(DigestError::UpperCase);
        }
        let mut out = [0u8; 32];
        hex::decode_to_slice(hex_part, &mut out).map_err(|_| DigestError::NotHex)?;
        Ok(Digest(out))
    }

    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Digest {
        Digest(Sha256::digest(bytes).into())
    }

    /// The 64 hex digits alone.
    pub fn hex(&self) -> String {
        hex::encode(self.0)
    }

    /// The first 12 hex digits, for listings.
    pub fn short(&self) -> String {
        self.hex()[..12].to_owned()
    }
}

impl std::fmt::Display for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "sha256:{}", self.hex())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_malformed() {
        let d = Digest::of(b"abc");
        assert_eq!(Digest::parse(&d.to_string()).unwrap(), d);
        assert_eq!(
            d.to_string(),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        for (bad, why) in [
            (
                "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
                DigestError::NoPrefix,
            ),
            ("sha256:ba78", DigestError::Length),
            (
                "sha256:BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD",
                DigestError::UpperCase,
            ),
            (
                "sha256:zz7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
                DigestError::NotHex,
            ),
            (
                "sha512:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
                DigestError::NoPrefix,
            ),
        ] {
            assert_eq!(Digest::parse_text(bad), Err(why), "{bad}");
            assert!(Digest::parse(bad).is_err(), "{bad}");
        }
    }
}
