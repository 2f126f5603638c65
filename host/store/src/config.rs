//! `config.toml` in the state directory: where tools come from. Unknown keys are refused,
//! and every error names the file, line and column.

use std::path::Path;

use crate::error::StoreError;

/// The state directory's configuration file.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The `[tools]` table.
    #[serde(default)]
    pub tools: ToolsConfig,
}

/// The `[tools]` table.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolsConfig {
    /// Where `bx tool install sha256:HEX` looks, in order: a directory, or an https base
    /// URL, holding `sha256/<hex>.wasm`.
    #[serde(default)]
    pub mirrors: Vec<String>,
}

impl Config {
    /// Reads `path`; a missing file is the default configuration.
    pub fn load(path: &Path) -> Result<Config, StoreError> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Config::default()),
            Err(e) => return Err(StoreError::io(path, e)),
        };
        Config::parse(path, &text)
    }

    /// Parses configuration text read from `path`.
    pub fn parse(path: &Path, text: &str) -> Result<Config, StoreError> {
        let config: Config = toml::from_str(text).map_err(|e| {
            let offset = e.span().map_or(0, |s| s.start);
            StoreError::parse_at(path, text, offset, e.message().to_owned())
        })?;
        for (i, mirror) in config.tools.mirrors.iter().enumerate() {
            let is_url = mirror.starts_with("https://");
            if !is_url && !Path::new(mirror).is_absolute() {
                let offset = text.find(mirror.as_str()).unwrap_or(0);
                return Err(StoreError::parse_at(
                    path,
                    text,
                    offset,
                    format!("tools.mirrors[{i}]: must be an absolute directory or an https:// URL"),
                ));
            }
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_unknown_keys_with_location() {
        let text = "[tools]\nmirrors = []\nmirors = [\"/x\"]\n";
        let err = Config::parse(Path::new("config.toml"), text).unwrap_err().to_string();
        assert!(err.starts_with("config.toml:3:1: unknown field `mirors`"), "{err}");
    }

    #[test]
    fn refuses_relative_and_http_mirrors() {
        for bad in ["mirrors = [\"rel/dir\"]", "mirrors = [\"http://m.example/\"]"] {
            let text = format!("[tools]\n{bad}\n");
            let err = Config::parse(Path::new("c.toml"), &text).unwrap_err().to_string();
            assert!(err.starts_with("c.toml:2:"), "{err}");
        }
    }

    #[test]
    fn parses_mirrors() {
        let text = "[tools]\nmirrors = [\"/srv/bx\", \"https://m.example/bx\"]\n";
        let c = Config::parse(Path::new("c.toml"), text).unwrap();
        assert_eq!(c.tools.mirrors, vec!["/srv/bx".to_owned(), "https://m.example/bx".to_owned()]);
    }
}
