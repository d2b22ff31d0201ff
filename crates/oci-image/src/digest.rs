//! Content digests (`sha256:<hex>`) and OCI descriptors.

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use std::collections::BTreeMap;

/// `sha256:` and the hex SHA-256 of `data`.
pub fn sha256(data: &[u8]) -> String {
    format!("sha256:{}", hex(&Sha256::digest(data)))
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// An OCI content descriptor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    pub media_type: String,
    pub digest: String,
    pub size: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_type: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl Descriptor {
    /// The descriptor of `data` as `media_type`.
    pub fn of(media_type: &str, data: &[u8]) -> Self {
        Self {
            media_type: media_type.to_owned(),
            digest: sha256(data),
            size: data.len() as u64,
            artifact_type: None,
            annotations: BTreeMap::new(),
        }
    }
}
