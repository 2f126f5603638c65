//! bx's state directory: [`StateDir`], the one place its layout is spelled, and the files
//! bx reads there as its own: `config.toml` ([`Config`]), the watched policy file
//! ([`PolicyFile`]), session state ([`Sessions`]) and the secret store ([`SecretStore`]). Everything here is bx's own: no
//! tool reaches any of it, whatever the grants say ([`StateDir::own_paths`]).
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod config;
mod dir;
mod error;
mod policy_file;
mod read;
mod secrets;
mod sessions;

pub use config::{
    ApprovalsConfig, AuditConfig, Config, EndThinkingName, InferenceConfig, LoopConfig,
    TelemetryConfig, ToolModeName, ToolsConfig, TrustedKey,
};
pub use dir::StateDir;
pub use error::StateError;
pub use policy_file::{PolicyFile, PolicyStatus};
pub use read::{MAX_CONFIG_BYTES, MAX_OWN_FILE_BYTES, MAX_POLICY_BYTES, read_own};
pub use secrets::{
    LastUse, Loaded, MAX_SECRET_BYTES, MAX_SECRETS, MIN_SECRET_BYTES, SecretStore, SecretValue,
    SecretValueError, StoredSecret,
};
pub use sessions::{SessionState, Sessions, valid_session_id, write_atomically};
