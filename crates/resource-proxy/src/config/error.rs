//! Why a configuration cannot be loaded: a read or parse error, or every rule it breaks.

use std::fmt;
use std::path::PathBuf;

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Not YAML of the expected shape (syntax, unknown key, wrong type).
    #[error("parsing configuration: {0}")]
    Parse(String),
    /// Valid YAML that breaks one or more rules.
    #[error("{0}")]
    Invalid(ValidationErrors),
}

/// One rule violation, naming the key path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// Key path in the file, e.g. `targets['default/target'].tls.caFile`.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Every rule violation of one file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ValidationErrors(pub Vec<FieldError>);

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0.len();
        write!(
            f,
            "invalid configuration ({n} error{}):",
            if n == 1 { "" } else { "s" }
        )?;
        for e in &self.0 {
            write!(f, "\n  - {e}")?;
        }
        Ok(())
    }
}
