//! The Kubernetes API as the proxy speaks it, free of I/O: what a request to a listener is
//! ([`request_info`], the API server's `RequestInfoFactory` rules) and what the proxy's own
//! answers look like ([`status`], the API server's `Status` bodies).

pub mod request_info;
pub mod status;
