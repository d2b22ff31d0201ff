//! The configuration file (RP-1) and the listeners it resolves to (RP-2).
//!
//! Loading has three steps:
//! 1. [`ConfigFile::from_yaml`] parses the YAML into [`ConfigFile`], which keeps every value as
//!    written (optional fields stay `None`), because some rules compare entries before defaults
//!    apply. Syntax errors, unknown keys and wrong types stop here with one error.
//! 2. [`ConfigFile::validate`] checks every rule and returns all violations at once, each naming
//!    the key path (`customResources['widgets.example.com/v1'].accessResources`).
//! 3. [`ConfigFile::resolve`] applies defaults and produces [`Config`]: the client identity, the
//!    targets, and one [`GroupVersionListener`] per enabled group/version, sorted by
//!    `<group>/<version>` with port `basePort + index`, so every replica agrees.
//!
//! The `customResources` section has the shape and rules of vCluster's
//! `experimental.proxy.customResources`.
//!
//! The parts: the file as written ([`ConfigFile`] and its sections), the rules (`validate`), the
//! defaults (`defaults`), the resolved view ([`Config`] and its parts), what goes wrong
//! ([`ConfigError`]), the `check-config` output ([`render_listeners`]); the DNS name rules the
//! configuration and the label selectors share (`dns`), and the names of the objects that wire
//! each listener into the client cluster ([`names`], RP-3).
mod defaults;
pub(crate) mod dns;
mod error;
mod file;
pub mod names;
mod render;
mod resolved;
#[cfg(test)]
mod tests;
mod validate;

use std::path::Path;

pub use error::{ConfigError, FieldError, ValidationErrors};
pub use file::*;
pub use render::render_listeners;
pub use resolved::*;

impl Config {
    /// Reads, validates and resolves a configuration file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Config::from_yaml(&text)
    }

    /// Parses, validates and resolves YAML text.
    pub fn from_yaml(text: &str) -> Result<Config, ConfigError> {
        ConfigFile::from_yaml(text)?
            .resolve()
            .map_err(ConfigError::Invalid)
    }
}
