//! The Cloudflare API credentials a class or a GatewayConfig resolves to, and Secret values as
//! the controller reads them.

use k8s_openapi::api::core::v1::Secret;

/// The Cloudflare side of the class: the shared plane's tunnel and the API credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    pub api_token: String,
    /// From the GatewayClassConfig or the Secret's `account-id`; looked up when `None`.
    pub account_id: Option<String>,
}

/// A Secret value as trimmed UTF-8; `None` when absent or empty.
pub fn secret_value(secret: &Secret, key: &str) -> Option<String> {
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| b.0.clone())
        .or_else(|| {
            secret
                .string_data
                .as_ref()
                .and_then(|d| d.get(key))
                .map(|s| s.clone().into_bytes())
        })?;
    let s = String::from_utf8(bytes).ok()?.trim().to_owned();
    (!s.is_empty()).then_some(s)
}
