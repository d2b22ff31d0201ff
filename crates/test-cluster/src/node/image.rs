//! Pods from OCI images: the node's image store (a directory of OCI image layouts, by the
//! reference each layout's `index.json` names; [`oci_image::store`]) and the root directory each
//! container of such an image runs in.
//!
//! An image is verified (every blob against its digest) and unpacked once per node into a
//! cache keyed by manifest digest; each container start gets a fresh tree under its Pod's
//! directory (the mount points of its volumes are created there, never in the cache): its own
//! directories, and the files hard-linked to the cache's when the container runs as a non-root
//! user (they are root's and read-only to it), copied when it runs as root. The container then
//! runs chrooted in it (see `pod` and `volumes::plan`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use oci_image::store::{Config, Store, StoredImage};

use crate::Error;

/// The node's images and their unpacked trees.
pub(super) struct Images {
    store: Store,
    cache: PathBuf,
    unpacked: Mutex<HashMap<String, Arc<Config>>>,
}

impl Images {
    /// The images of the layouts under `store` (none without one); unpacked trees go under
    /// `cache` (emptied).
    pub(super) fn open(store: Option<&Path>, cache: PathBuf) -> Result<Self, Error> {
        let store = match store {
            Some(dir) => Store::open(dir).map_err(|e| Error::Image(e.to_string()))?,
            None => Store::default(),
        };
        if cache.exists() {
            std::fs::remove_dir_all(&cache).map_err(|e| Error::io(&cache, e))?;
        }
        Ok(Self {
            store,
            cache,
            unpacked: Mutex::new(HashMap::new()),
        })
    }

    /// Whether the store holds `reference`.
    pub(super) fn has(&self, reference: &str) -> bool {
        self.store.get(reference).is_some()
    }

    /// Every reference the store holds.
    pub(super) fn references(&self) -> impl Iterator<Item = &str> {
        self.store.references()
    }

    /// The run config of the image `reference`. Blocking: verifies and unpacks the image the
    /// first time.
    pub(super) fn config(&self, reference: &str) -> Result<Config, String> {
        let (image, tree) = self.find(reference)?;
        let config = {
            let mut unpacked = self.unpacked.lock().unwrap_or_else(PoisonError::into_inner);
            match unpacked.get(&image.digest) {
                Some(config) => Arc::clone(config),
                None => {
                    if tree.exists() {
                        std::fs::remove_dir_all(&tree)
                            .map_err(|e| format!("{}: {e}", tree.display()))?;
                    }
                    let config = image
                        .unpack(&tree)
                        .map_err(|e| format!("unpacking image {reference:?}: {e}"))?;
                    let config = Arc::new(config);
                    unpacked.insert(image.digest.clone(), Arc::clone(&config));
                    config
                }
            }
        };
        Ok((*config).clone())
    }

    /// Makes `root` (replaced) the tree of the image `reference`, unpacked by [`Self::config`]
    /// before; its files hard links to the cache's when `share`, else copies. Blocking.
    pub(super) fn root(&self, reference: &str, root: &Path, share: bool) -> Result<(), String> {
        let (_, tree) = self.find(reference)?;
        if root.exists() {
            std::fs::remove_dir_all(root).map_err(|e| format!("{}: {e}", root.display()))?;
        }
        copy_tree(&tree, root, share).map_err(|e| format!("copying the image's root: {e}"))
    }

    fn find(&self, reference: &str) -> Result<(&StoredImage, PathBuf), String> {
        let image = self
            .store
            .get(reference)
            .ok_or_else(|| format!("image {reference:?} is not in the node's image store"))?;
        Ok((image, self.cache.join(image.digest.replace(':', "-"))))
    }
}

/// Copies the directory `from` to `to`: directories with their modes, symlinks as they are,
/// files hard-linked (`link`) or copied with their modes.
fn copy_tree(from: &Path, to: &Path, link: bool) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    std::fs::set_permissions(to, std::fs::metadata(from)?.permissions())?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type()?;
        if kind.is_dir() {
            copy_tree(&src, &dst, link)?;
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&src)?, &dst)?;
        } else if link {
            std::fs::hard_link(&src, &dst)?;
        } else {
            std::fs::copy(&src, &dst)?;
        }
    }
    Ok(())
}
