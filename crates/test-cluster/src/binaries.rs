//! Finds the control-plane binaries, building them with `scripts/build-control-plane.sh` when
//! they are not cached yet.
//!
//! `KT_BIN_DIR` points at a directory that already holds them (nothing is built then).
//!
//! [`echo_basic`] does the same for the Gateway API conformance backend
//! (`scripts/build-echo-basic.sh`; `KT_ECHO_BASIC` names an existing binary instead).
//! [`test_images`] finds the project's images `make images-test` built.

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
            None => run_script("build-control-plane.sh")?,
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

/// The `echo-basic` binary of the Gateway API conformance suite, built (once per process) and
/// cached by version when missing; `KT_ECHO_BASIC` names another.
pub fn echo_basic() -> Result<PathBuf, Error> {
    static FOUND: OnceLock<Result<PathBuf, Arc<Error>>> = OnceLock::new();
    built(&FOUND, "KT_ECHO_BASIC", "build-echo-basic.sh")
}

/// The directory of OCI image layouts `make images-test` writes (`target/images/test`, or what
/// `KT_TEST_IMAGES` names), for [`NodeSpec::image_store`](crate::node::NodeSpec::image_store).
/// Not built here (a cargo build inside a test would wait on the test's own build lock).
pub fn test_images() -> Result<PathBuf, Error> {
    let dir = std::env::var_os("KT_TEST_IMAGES")
        .map_or_else(|| repo_root().join("target/images/test"), PathBuf::from);
    let layout = dir.join("tunnel-proxy").join("index.json");
    if layout.is_file() {
        Ok(dir)
    } else {
        Err(Error::Image(format!(
            "{} is missing: build the test images first (`make images-test`)",
            layout.display()
        )))
    }
}

/// `helm` (v3), built from the Go module proxy (once per process) and cached by version when
/// missing (`scripts/build-helm.sh`); `KT_HELM` names another.
pub fn helm() -> Result<PathBuf, Error> {
    static FOUND: OnceLock<Result<PathBuf, Arc<Error>>> = OnceLock::new();
    built(&FOUND, "KT_HELM", "build-helm.sh")
}

/// The binary the environment variable `env` names, else the one `scripts/<script>` builds or
/// finds in the cache; looked up once per process (`found`).
fn built(
    found: &OnceLock<Result<PathBuf, Arc<Error>>>,
    env: &str,
    script: &str,
) -> Result<PathBuf, Error> {
    found
        .get_or_init(|| {
            let path = match std::env::var_os(env) {
                Some(path) => PathBuf::from(path),
                None => run_script(script).map_err(Arc::new)?,
            };
            if path.is_file() {
                Ok(path)
            } else {
                Err(Arc::new(Error::MissingBinary(path)))
            }
        })
        .clone()
        .map_err(Error::Once)
}

/// Runs `scripts/<name>` (its progress on our stderr) and returns the last line it printed.
pub(crate) fn run_script(name: &str) -> Result<PathBuf, Error> {
    let script = repo_root().join("scripts").join(name);
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
    Ok(PathBuf::from(
        stdout.lines().last().unwrap_or_default().trim(),
    ))
}
