//! Finds the control-plane binaries, building them with `scripts/build-control-plane.sh` when
//! they are not cached yet.
//!
//! `KT_BIN_DIR` points at a directory that already holds them (nothing is built then).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, OnceLock};

use crate::Error;

/// The directory holding etcd, kube-apiserver, kube-controller-manager and kubectl.
#[derive(Clone, Debug)]
pub struct Binaries {
    dir: PathBuf,
}

/// The repository root (where `scripts/` lives), known at compile time.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

impl Binaries {
    /// Locates (or builds, once per process) the binaries.
    pub fn locate() -> Result<Self, Error> {
        static FOUND: OnceLock<Result<Binaries, Arc<Error>>> = OnceLock::new();
        FOUND
            .get_or_init(|| Self::find_or_build().map_err(Arc::new))
            .clone()
            .map_err(Error::Once)
    }

    fn find_or_build() -> Result<Self, Error> {
        let dir = match std::env::var_os("KT_BIN_DIR") {
            Some(dir) => PathBuf::from(dir),
            None => {
                let script = repo_root().join("scripts/build-control-plane.sh");
                let out = Command::new("bash")
                    .arg(&script)
                    .stdin(Stdio::null())
                    .stderr(Stdio::inherit())
                    .output()
                    .map_err(|e| Error::io(&script, e))?;
                if !out.status.success() {
                    return Err(Error::Script {
                        script,
                        status: out.status,
                    });
                }
                let stdout = String::from_utf8_lossy(&out.stdout);
                PathBuf::from(stdout.lines().last().unwrap_or_default().trim())
            }
        };
        let bins = Self { dir };
        for b in [
            bins.etcd(),
            bins.kube_apiserver(),
            bins.kube_controller_manager(),
            bins.kubectl(),
        ] {
            if !b.is_file() {
                return Err(Error::MissingBinary(b));
            }
        }
        Ok(bins)
    }

    /// The directory itself.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn etcd(&self) -> PathBuf {
        self.dir.join("etcd")
    }

    pub fn kube_apiserver(&self) -> PathBuf {
        self.dir.join("kube-apiserver")
    }

    pub fn kube_controller_manager(&self) -> PathBuf {
        self.dir.join("kube-controller-manager")
    }

    pub fn kubectl(&self) -> PathBuf {
        self.dir.join("kubectl")
    }
}
