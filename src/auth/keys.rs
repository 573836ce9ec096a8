//! The client key set: `NAME:KEY` or `NAME:sha256:HEX` lines, kept only as SHA-256 digests.
//!
//! A plain key is hashed as its line is read and the text dropped, so the process holds no
//! key in the clear beyond the parse. A presented key is hashed and compared with every
//! stored digest in constant time, without stopping at a match, so timing tells nothing
//! about which digest (or which prefix of one) matched.

use std::sync::Arc;

use subtle::ConstantTimeEq;

/// A SHA-256 digest.
pub type Digest = [u8; 32];

/// Why a key file or variable was refused. Messages name the source and the line, never the
/// line's text (it may hold a key).
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum KeysError {
    #[error("{source_name} line {line}: expected NAME:KEY or NAME:sha256:HEX")]
    Malformed { source_name: String, line: usize },
    #[error(
        "{source_name} line {line}: a NAME is letters, digits, `_`, `-` or `.` (and not `none`)"
    )]
    BadName { source_name: String, line: usize },
    #[error("{source_name} line {line}: sha256: needs 64 hexadecimal digits")]
    BadDigest { source_name: String, line: usize },
    #[error("{source_name} line {line}: duplicate name `{name}` (first on line {first})")]
    Duplicate {
        source_name: String,
        line: usize,
        name: String,
        first: usize,
    },
    #[error("{source_name} holds no keys")]
    Empty { source_name: String },
}

/// One named key, as its digest.
#[derive(Clone)]
struct Entry {
    name: Arc<str>,
    digest: Digest,
    line: usize,
}

/// The loaded keys. Names are a closed set (they label metrics).
#[derive(Clone, Default)]
pub struct Keys {
    entries: Vec<Entry>,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.entries.iter().map(|e| &*e.name))
            .finish()
    }
}

pub fn sha256(bytes: &[u8]) -> Digest {
    let d = ring::digest::digest(&ring::digest::SHA256, bytes);
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name != "none"
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

fn hex_digest(hex: &str) -> Option<Digest> {
    if hex.len() != 64 || !hex.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

impl Keys {
    /// Parse key lines; `source_name` (a path or `$VAR`) goes into error messages.
    pub fn parse(text: &str, source_name: &str) -> Result<Keys, KeysError> {
        let mut keys = Keys::default();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let l = raw.trim();
            if l.is_empty() || l.starts_with('#') {
                continue;
            }
            let entry = parse_line(l, line, source_name)?;
            if let Some(first) = keys.entries.iter().find(|e| e.name == entry.name) {
                return Err(KeysError::Duplicate {
                    source_name: source_name.to_string(),
                    line,
                    name: entry.name.to_string(),
                    first: first.line,
                });
            }
            keys.entries.push(entry);
        }
        if keys.entries.is_empty() {
            return Err(KeysError::Empty {
                source_name: source_name.to_string(),
            });
        }
        Ok(keys)
    }

    /// Add another source's keys (file and variable may both be set); names stay unique.
    pub fn extend(&mut self, other: Keys, source_name: &str) -> Result<(), KeysError> {
        for e in other.entries {
            if let Some(first) = self.entries.iter().find(|f| f.name == e.name) {
                return Err(KeysError::Duplicate {
                    source_name: source_name.to_string(),
                    line: e.line,
                    name: e.name.to_string(),
                    first: first.line,
                });
            }
            self.entries.push(e);
        }
        Ok(())
    }

    /// The name of the key `presented`, if it is one. Every digest is compared.
    pub fn find(&self, presented: &str) -> Option<Arc<str>> {
        let digest = sha256(presented.as_bytes());
        let mut found = None;
        for e in &self.entries {
            if bool::from(e.digest.ct_eq(&digest)) {
                found = Some(e.name.clone());
            }
        }
        found
    }

    pub fn names(&self) -> impl Iterator<Item = &Arc<str>> {
        self.entries.iter().map(|e| &e.name)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

fn parse_line(l: &str, line: usize, source_name: &str) -> Result<Entry, KeysError> {
    let src = || source_name.to_string();
    let Some((name, rest)) = l.split_once(':') else {
        return Err(KeysError::Malformed {
            source_name: src(),
            line,
        });
    };
    let (name, rest) = (name.trim(), rest.trim());
    if !valid_name(name) {
        return Err(KeysError::BadName {
            source_name: src(),
            line,
        });
    }
    let digest = match rest.strip_prefix("sha256:") {
        Some(hex) => hex_digest(hex.trim()).ok_or(KeysError::BadDigest {
            source_name: src(),
            line,
        })?,
        None if rest.is_empty() || rest.contains(char::is_whitespace) => {
            return Err(KeysError::Malformed {
                source_name: src(),
                line,
            })
        }
        None => sha256(rest.as_bytes()),
    };
    Ok(Entry {
        name: name.into(),
        digest,
        line,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn hex(d: &Digest) -> String {
        d.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn plain_and_hashed_keys_both_match_and_comments_are_skipped() {
        let stored = hex(&sha256(b"sk-bob"));
        let text = format!("# team keys\n\nalice:sk-alice\n  bob:sha256:{stored}\n");
        let keys = Keys::parse(&text, "keys.txt").unwrap();
        assert_eq!(keys.len(), 2);
        assert_eq!(keys.find("sk-alice").as_deref(), Some("alice"));
        assert_eq!(keys.find("sk-bob").as_deref(), Some("bob"));
        assert_eq!(keys.find("sk-carol"), None);
        assert_eq!(keys.find(""), None);
        // The debug form (what a log line could show) has names only.
        assert!(!format!("{keys:?}").contains("sk-alice"));
    }

    #[test]
    fn a_bad_line_is_named_by_number_and_its_text_is_not_echoed() {
        let cases = [
            (
                "alice:sk-1\nsk-secret-without-name\n",
                2,
                "expected NAME:KEY",
            ),
            ("a b:sk-secret\n", 1, "a NAME is"),
            ("none:sk-secret\n", 1, "a NAME is"),
            ("alice:sha256:abc\n", 1, "64 hexadecimal"),
            ("alice:\n", 1, "expected NAME:KEY"),
            ("alice:sk secret\n", 1, "expected NAME:KEY"),
        ];
        for (text, line, what) in cases {
            let msg = Keys::parse(text, "k.txt").unwrap_err().to_string();
            assert!(msg.contains(&format!("k.txt line {line}")), "{msg}");
            assert!(msg.contains(what), "{msg}");
            assert!(!msg.contains("secret"), "{msg}");
        }
    }

    #[test]
    fn duplicates_and_empty_sets_are_errors() {
        let err = Keys::parse("a:1\nb:2\na:3\n", "$KEYS").unwrap_err();
        assert_eq!(
            err.to_string(),
            "$KEYS line 3: duplicate name `a` (first on line 1)"
        );
        let err = Keys::parse("# nothing\n", "$KEYS").unwrap_err();
        assert_eq!(err.to_string(), "$KEYS holds no keys");
        let mut a = Keys::parse("a:1\n", "f").unwrap();
        assert!(a.extend(Keys::parse("a:2\n", "$V").unwrap(), "$V").is_err());
    }
}
