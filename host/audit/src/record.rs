//! One audit record and its hash.

use sha2::{Digest as _, Sha256};

/// The `prev` of the first record ever written.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// What a record says happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// A tool call was proposed (before its decision takes effect).
    Request,
    /// The broker decided a call: allow, ask or deny.
    Decision,
    /// The owner answered an `ask` (or it expired).
    Approval,
    /// A call finished: its output (or error) and labels, before anyone sees it.
    Result,
    /// A session's state changed or was rebuilt.
    Session,
    /// A torn last line found at open, moved aside; fields say where and what.
    Recovered,
    /// The owner accepted a break in the chain after verifying the log.
    Break,
    /// A signed checkpoint could not be exported to one of the `[audit] export`
    /// directories.
    ExportFailed,
    /// A tool was installed, replaced or removed.
    Tool,
}

/// One line of the log.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    /// 1 for the first record, then +1 each record, across day files.
    pub seq: u64,
    /// When it was written, RFC 3339 UTC with milliseconds.
    pub time: String,
    /// Hex SHA-256 of the previous record's line (without its newline).
    pub prev: String,
    /// What happened.
    pub kind: Kind,
    /// Details, by kind.
    pub fields: serde_json::Map<String, serde_json::Value>,
}

impl Record {
    /// The line as written (no newline). Field order is fixed, and `fields` keys are
    /// sorted, so the same record always serialises to the same bytes.
    pub fn to_line(&self) -> String {
        // Serialising a struct of strings, integers and a JSON map cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Parses one line strictly: unknown fields and trailing data are refused (the error
    /// says where and, by its category, whether the line is cut short or holds what no
    /// record holds).
    pub fn parse(line: &str) -> Result<Record, serde_json::Error> {
        serde_json::from_str(line)
    }
}

/// Hex SHA-256 of a line's bytes: what the next record's `prev` must be.
pub fn line_hash(line: &[u8]) -> String {
    hex::encode(Sha256::digest(line))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Record {
        let mut fields = serde_json::Map::new();
        fields.insert("z".into(), 1.into());
        fields.insert("a".into(), "x".into());
        Record { seq: 1, time: "t".into(), prev: GENESIS.into(), kind: Kind::Request, fields }
    }

    #[test]
    fn serialises_deterministically_and_round_trips() {
        let line = sample().to_line();
        assert_eq!(
            line,
            format!(
                r#"{{"seq":1,"time":"t","prev":"{GENESIS}","kind":"request","fields":{{"a":"x","z":1}}}}"#
            )
        );
        assert_eq!(Record::parse(&line).unwrap(), sample());
    }

    #[test]
    fn refuses_unknown_fields_and_trailing_data() {
        let line = sample().to_line();
        let extra = line.replacen("{\"seq\"", "{\"extra\":1,\"seq\"", 1);
        assert!(Record::parse(&extra).unwrap_err().to_string().contains("unknown field"));
        let trailing = Record::parse(&format!("{line} x")).unwrap_err();
        assert_eq!(trailing.classify(), serde_json::error::Category::Syntax);
        let torn = Record::parse(&line[..line.len() - 3]).unwrap_err();
        assert_eq!(torn.classify(), serde_json::error::Category::Eof);
        assert!(Record::parse(&line.replace("request", "launch")).is_err());
    }
}
