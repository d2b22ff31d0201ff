//! OCI images without a daemon, a registry or root.
//!
//! - [`image`]: builds an image from a static binary (one layer: the binary, a CA bundle,
//!   `/etc/passwd` and `/etc/group` with the non-root user 65532), reproducibly, as an OCI image
//!   layout and a tar archive of it, with its SBOM ([`sbom`]) as an OCI artifact referring to
//!   the image (`subject`) and as a file beside it. `make images` runs it (`src/main.rs`).
//! - [`store`]: a directory of layouts looked up by reference, blobs verified, layers unpacked
//!   safely; the test node agent (test-cluster) runs Pods from it.
//! - [`tar`]: the deterministic ustar writer and the reader both use.

pub mod digest;
pub mod image;
pub mod sbom;
pub mod store;
pub mod tar;
