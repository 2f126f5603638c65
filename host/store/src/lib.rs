//! The tool store: components kept by content digest, their precompiled native code, and
//! the installed set (name → digest) with its tool epoch. Everything is verified before
//! anything is kept; a refused install leaves the store as it was.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod digest;
mod error;
mod fetch;
mod installed;
mod manifest;
pub mod oci;
pub mod signature;
mod store;

pub use digest::Digest;
pub use error::{
    DigestError, ImageManifestError, KeyScopeError, ManifestError, ReferenceError,
    SignatureProblem, StaticRefused, StoreError,
};
pub use fetch::Progress;
pub use installed::{Declared, Difference, Installed, InstalledFunction, InstalledTool};
pub use manifest::{Manifest, ParamReach, ReadManifest, StaticReach};
pub use store::{
    Change, InstallOptions, InstallOutcome, InstallSource, MAX_COMPONENT_BYTES, NamedBy,
    RecordHook, StaticCheck, Store, UpstreamAction,
};
