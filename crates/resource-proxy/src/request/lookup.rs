//! How the requests the proxy makes in the target on its own account fail: reading an object
//! before a write ([`super::resource`]), looking up a create ([`super::create`]), mirroring a
//! namespace ([`super::namespace`]). The caller of such a request gets a 503; the error is
//! logged.

use http::StatusCode;

use crate::target::TargetError;
use crate::target::conn::BoxError;

/// Why a request of the proxy's own in the target failed.
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    /// The target could not be asked.
    #[error(transparent)]
    Target(#[from] TargetError),
    /// Its answer broke off.
    #[error("the target's answer broke off: {0}")]
    Body(BoxError),
    /// Its answer is not the JSON expected.
    #[error("the target's answer is not JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// It answered with a status the request does not expect.
    #[error("{doing}: the target answered {status}")]
    Answered {
        /// What the proxy asked for.
        doing: &'static str,
        /// The target's status.
        status: StatusCode,
    },
}
