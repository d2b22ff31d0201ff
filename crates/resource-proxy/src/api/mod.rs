//! The Kubernetes API as the proxy speaks it, free of I/O: what a request to a listener is
//! ([`request_info`], the API server's `RequestInfoFactory` rules) and what the proxy's own
//! answers look like ([`status`], the API server's `Status` bodies), the OpenAPI v2 document
//! of one group/version ([`openapi_v2`]) and the v3 one of a named entry's resources
//! ([`openapi_v3`]).

pub mod openapi_v2;
pub mod openapi_v3;
pub mod request_info;
pub mod status;
