//! Reading images back: a store (a directory of OCI image layouts) looked up by reference,
//! blobs checked against their digests, layers unpacked into a root directory.
//!
//! Unpacking refuses what could write outside the root: absolute paths, `..`, a symlink whose
//! target is absolute or climbs out of the root, a hard link to a path outside it, and any
//! entry below a symlink. Device nodes and FIFOs are refused by the tar reader. Files keep
//! their mode bits without set-user-ID and set-group-ID; owners are the unpacker's.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use serde::Deserialize;

use crate::digest::{Descriptor, sha256};
use crate::image::{INDEX, LAYER, MANIFEST, REF_NAME};
use crate::tar::{self, Kind};

/// Why an image could not be found, read or unpacked.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Json {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("blob {digest} of {layout} has digest {actual} (corrupt or tampered)")]
    Digest {
        layout: PathBuf,
        digest: String,
        actual: String,
    },
    #[error("{0}")]
    Invalid(String),
    #[error("layer {digest}: {source}")]
    Tar {
        digest: String,
        source: tar::TarError,
    },
    #[error("layer entry {path:?}: {reason}")]
    Unsafe { path: String, reason: &'static str },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_owned(),
        source,
    }
}

#[derive(Deserialize)]
struct Index {
    manifests: Vec<Descriptor>,
}

#[derive(Deserialize)]
struct Manifest {
    config: Descriptor,
    layers: Vec<Descriptor>,
}

#[derive(Deserialize)]
struct ConfigFile {
    #[serde(default)]
    config: Config,
}

/// What an image says about running it (the OCI image config's `config`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Config {
    #[serde(default)]
    pub user: Option<String>,
    #[serde(default)]
    pub entrypoint: Option<Vec<String>>,
    #[serde(default)]
    pub cmd: Option<Vec<String>>,
    #[serde(default)]
    pub env: Option<Vec<String>>,
    #[serde(default)]
    pub working_dir: Option<String>,
}

impl Config {
    /// The numeric uid and gid of `User` (`uid`, `uid:gid`; a name is not looked up: the
    /// images here name numbers). `None` when the image sets no user (root).
    pub fn ids(&self) -> Result<Option<(u32, u32)>, StoreError> {
        let Some(user) = self.user.as_deref().filter(|u| !u.is_empty()) else {
            return Ok(None);
        };
        let number = |s: &str| {
            s.parse::<u32>().map_err(|_| {
                StoreError::Invalid(format!(
                    "image user {user:?} is not numeric (uid or uid:gid)"
                ))
            })
        };
        Ok(Some(match user.split_once(':') {
            Some((u, g)) => (number(u)?, number(g)?),
            None => {
                let u = number(user)?;
                (u, u)
            }
        }))
    }
}

/// An image of the store: its layout and manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredImage {
    pub layout: PathBuf,
    /// The manifest's digest.
    pub digest: String,
}

/// A directory of OCI image layouts (each a subdirectory), by the references their
/// `index.json` names.
#[derive(Debug, Clone, Default)]
pub struct Store {
    images: BTreeMap<String, StoredImage>,
}

impl Store {
    /// Reads every layout under `dir` (subdirectories holding an `index.json`).
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        let mut images = BTreeMap::new();
        let mut layouts: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(io(dir))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.join("index.json").is_file())
            .collect();
        layouts.sort();
        for layout in layouts {
            let path = layout.join("index.json");
            let text = std::fs::read(&path).map_err(io(&path))?;
            let index: Index =
                serde_json::from_slice(&text).map_err(|source| StoreError::Json {
                    path: path.clone(),
                    source,
                })?;
            for m in index.manifests {
                if let Some(name) = m.annotations.get(REF_NAME) {
                    images.insert(
                        name.clone(),
                        StoredImage {
                            layout: layout.clone(),
                            digest: m.digest.clone(),
                        },
                    );
                }
            }
        }
        Ok(Self { images })
    }

    /// The image stored as `reference` (`name:tag`).
    pub fn get(&self, reference: &str) -> Option<&StoredImage> {
        self.images.get(reference)
    }

    /// Every reference the store holds.
    pub fn references(&self) -> impl Iterator<Item = &str> {
        self.images.keys().map(String::as_str)
    }
}

impl StoredImage {
    /// Checks every blob of the image against its digest and unpacks its layers, in order,
    /// into `root` (created; it should be empty). Returns the image's run config.
    pub fn unpack(&self, root: &Path) -> Result<Config, StoreError> {
        let manifest: Manifest = self.json(&self.digest, MANIFEST)?;
        let config: ConfigFile = self.json(&manifest.config.digest, &manifest.config.media_type)?;
        std::fs::create_dir_all(root).map_err(io(root))?;
        for layer in &manifest.layers {
            if layer.media_type != LAYER && layer.media_type != DOCKER_LAYER {
                return Err(StoreError::Invalid(format!(
                    "layer {} is {:?}: only uncompressed tar layers are supported",
                    layer.digest, layer.media_type
                )));
            }
            let data = self.blob(&layer.digest)?;
            let entries = tar::read(&mut data.as_slice()).map_err(|source| StoreError::Tar {
                digest: layer.digest.clone(),
                source,
            })?;
            for entry in entries {
                place(root, entry)?;
            }
        }
        Ok(config.config)
    }

    /// A blob's bytes, checked against `digest`.
    fn blob(&self, digest: &str) -> Result<Vec<u8>, StoreError> {
        let hex = digest.strip_prefix("sha256:").filter(|h| {
            h.len() == 64
                && h.bytes()
                    .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        });
        let Some(hex) = hex else {
            return Err(StoreError::Invalid(format!(
                "digest {digest:?} is not sha256:<64 lowercase hex digits>"
            )));
        };
        let path = self.layout.join("blobs").join("sha256").join(hex);
        let data = std::fs::read(&path).map_err(io(&path))?;
        let actual = sha256(&data);
        if actual != digest {
            return Err(StoreError::Digest {
                layout: self.layout.clone(),
                digest: digest.to_owned(),
                actual,
            });
        }
        Ok(data)
    }

    fn json<T: serde::de::DeserializeOwned>(
        &self,
        digest: &str,
        media_type: &str,
    ) -> Result<T, StoreError> {
        if media_type != MANIFEST && media_type != INDEX && !media_type.ends_with("+json") {
            return Err(StoreError::Invalid(format!(
                "{digest} is {media_type:?}, not JSON"
            )));
        }
        let data = self.blob(digest)?;
        serde_json::from_slice(&data).map_err(|source| StoreError::Json {
            path: self.layout.join(digest),
            source,
        })
    }
}

const DOCKER_LAYER: &str = "application/vnd.docker.image.rootfs.diff.tar";

/// The entry's path as normal components, or why not.
fn relative(path: &str) -> Result<PathBuf, StoreError> {
    let unsafe_path = |reason| StoreError::Unsafe {
        path: path.to_owned(),
        reason,
    };
    let p = Path::new(path);
    if p.is_absolute() {
        return Err(unsafe_path("absolute path"));
    }
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            _ => return Err(unsafe_path("'..' in the path")),
        }
    }
    Ok(out)
}

/// Writes one entry under `root`.
fn place(root: &Path, entry: tar::Entry) -> Result<(), StoreError> {
    let rel = relative(&entry.path)?;
    let unsafe_entry = |reason| StoreError::Unsafe {
        path: entry.path.clone(),
        reason,
    };
    if rel.as_os_str().is_empty() {
        return Ok(());
    }
    if rel
        .file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with(".wh."))
    {
        return Err(unsafe_entry("whiteouts are not supported"));
    }
    // No ancestor may be a symlink: writing through one could leave the root.
    let mut at = root.to_owned();
    for c in rel.parent().into_iter().flat_map(Path::components) {
        at.push(c);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(unsafe_entry("below a symlink"));
            }
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(unsafe_entry("below a file")),
            Err(_) => std::fs::create_dir(&at).map_err(io(&at))?,
        }
    }
    let target = root.join(&rel);
    let mode = entry.mode & 0o1777;
    if !matches!(entry.kind, Kind::Dir)
        && let Ok(m) = std::fs::symlink_metadata(&target)
    {
        if m.is_dir() {
            std::fs::remove_dir_all(&target).map_err(io(&target))?;
        } else {
            std::fs::remove_file(&target).map_err(io(&target))?;
        }
    }
    use std::os::unix::fs::PermissionsExt;
    let set_mode = |path: &Path| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(io(path))
    };
    match entry.kind {
        Kind::Dir => {
            match std::fs::symlink_metadata(&target) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => return Err(unsafe_entry("a directory over a file or link")),
                Err(_) => std::fs::create_dir(&target).map_err(io(&target))?,
            }
            set_mode(&target)
        }
        Kind::File(data) => {
            std::fs::write(&target, data).map_err(io(&target))?;
            set_mode(&target)
        }
        Kind::Symlink(link) => {
            if Path::new(&link).is_absolute() {
                return Err(unsafe_entry("a symlink to an absolute path"));
            }
            // Lexically, from the link's directory: it must stay inside the root.
            let mut depth = rel.components().count() as i64 - 1;
            for c in Path::new(&link).components() {
                match c {
                    Component::ParentDir => depth -= 1,
                    Component::Normal(_) => depth += 1,
                    _ => {}
                }
                if depth < 0 {
                    return Err(unsafe_entry("a symlink that leaves the root"));
                }
            }
            std::os::unix::fs::symlink(&link, &target).map_err(io(&target))
        }
        Kind::Link(link) => {
            let source = root.join(relative(&link)?);
            let meta = std::fs::symlink_metadata(&source).map_err(io(&source))?;
            if !meta.is_file() {
                return Err(unsafe_entry("a hard link to something not a regular file"));
            }
            std::fs::hard_link(&source, &target).map_err(io(&target))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tar::Entry;

    fn entry(path: &str, kind: Kind) -> Entry {
        Entry {
            path: path.into(),
            mode: 0o644,
            kind,
        }
    }

    #[test]
    fn unsafe_entries_are_refused_and_write_nothing_outside() {
        let cases = [
            (
                entry("/etc/passwd", Kind::File(b"x".to_vec())),
                "absolute path",
            ),
            (
                entry("a/../../x", Kind::File(b"x".to_vec())),
                "'..' in the path",
            ),
            (
                entry("l", Kind::Symlink("/etc".into())),
                "a symlink to an absolute path",
            ),
            (
                entry("d/l", Kind::Symlink("../../x".into())),
                "a symlink that leaves the root",
            ),
            (
                entry("h", Kind::Link("../outside".into())),
                "'..' in the path",
            ),
            (
                entry(".wh.x", Kind::File(Vec::new())),
                "whiteouts are not supported",
            ),
        ];
        for (e, want) in cases {
            let dir = tempfile::tempdir().unwrap();
            let root = dir.path().join("root");
            std::fs::create_dir(&root).unwrap();
            let path = e.path.clone();
            match place(&root, e) {
                Err(StoreError::Unsafe { reason, .. }) => assert_eq!(reason, want, "{path}"),
                other => panic!("{path}: {other:?}"),
            }
            let outside: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
            assert_eq!(outside.len(), 1, "{path}: only the root is there");
        }
    }

    #[test]
    fn nothing_is_written_through_a_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        place(&root, entry("link", Kind::Symlink("sub".into()))).unwrap();
        let err = place(&root, entry("link/file", Kind::File(b"x".to_vec()))).unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::Unsafe {
                    reason: "below a symlink",
                    ..
                }
            ),
            "{err}"
        );
        assert!(!root.join("sub/file").exists());
    }

    #[test]
    fn users_parse_as_numbers() {
        let ids = |u: &str| {
            Config {
                user: Some(u.into()),
                ..Config::default()
            }
            .ids()
        };
        assert_eq!(ids("65532:65532").unwrap(), Some((65532, 65532)));
        assert_eq!(ids("1000").unwrap(), Some((1000, 1000)));
        assert_eq!(ids("").unwrap(), None);
        assert!(ids("nonroot").is_err());
    }
}
