//! Events as decided: what the model, the publishing stage and the status writer want said
//! about an object, before [`crate::status`] writes them.

/// An Event to publish about an object.
#[derive(Debug, Clone)]
pub struct Notice {
    pub object: k8s_openapi::api::core::v1::ObjectReference,
    pub warning: bool,
    pub reason: String,
    pub message: String,
}
