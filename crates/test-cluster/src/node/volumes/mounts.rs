//! A container's mounts: [`plan`] turns its `volumeMounts` and `workingDir` over the prepared
//! volumes into the steps its process takes between fork and exec ([`MountPlan::apply`]).

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{CStr, CString};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Component, Path, PathBuf};
use std::process::Command;

use k8s_openapi::api::core::v1::{Container, VolumeMount};
use nix::mount::MsFlags;

use super::{Prepared, Volumes, absolute, relative};

/// One mount step in the container's new mount namespace.
enum Op {
    Bind {
        source: CString,
        target: CString,
        recursive: bool,
    },
    ReadOnly {
        target: CString,
    },
}

/// What a container's process does between fork and exec to see its volumes.
pub(crate) struct MountPlan {
    /// Shadows of missing mount points' ancestors, deepest first.
    shadows: Vec<Op>,
    /// The shadow of `/`, to chroot into before the volumes are mounted (host paths).
    chroot: Option<CString>,
    /// The image's root, to chroot into after the volumes are mounted into it.
    image_root: Option<CString>,
    /// The volumes, outermost first.
    mounts: Vec<Op>,
    workdir: CString,
}

/// A shadow of an existing host directory that lacks some mount points.
struct Shadow {
    dir: PathBuf,
    /// The entries it adds to the directory it shadows.
    added: BTreeSet<std::ffi::OsString>,
}

/// The mounts of `container` over `volumes`; `scratch` is the container's own directory for
/// shadows (emptied first), `default_cwd` its working directory when it sets none (inside the
/// image with `image_root`, the root the container runs in). `None` when the container needs
/// no mount namespace (no image, no mounts, and a `workingDir` that exists, if any): the caller
/// sets the working directory itself.
pub(crate) fn plan(
    container: &Container,
    volumes: &Volumes,
    scratch: &Path,
    default_cwd: &Path,
    image_root: Option<&Path>,
) -> Result<Option<MountPlan>, String> {
    let io = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
    let mut mounts = container.volume_mounts.clone().unwrap_or_default();
    for (path, volume, sub_path) in &volumes.implicit {
        if !mounts
            .iter()
            .any(|m| Path::new(&m.mount_path) == Path::new(path))
        {
            mounts.push(VolumeMount {
                name: (*volume).to_owned(),
                mount_path: (*path).to_owned(),
                sub_path: Some((*sub_path).to_owned()).filter(|s| !s.is_empty()),
                ..VolumeMount::default()
            });
        }
    }
    let workdir = match &container.working_dir {
        Some(w) => Some(
            absolute(w)
                .ok_or_else(|| format!("workingDir {w:?} must be an absolute path without '..'"))?,
        ),
        None => None,
    };
    if image_root.is_none() && mounts.is_empty() && workdir.as_ref().is_none_or(|w| w.is_dir()) {
        return Ok(None);
    }
    // Where a path of the container's view is on the host.
    let host = |path: &Path| match image_root {
        Some(root) => root.join(path.strip_prefix("/").unwrap_or(path)),
        None => path.to_owned(),
    };
    if scratch.exists() {
        std::fs::remove_dir_all(scratch).map_err(|e| io(scratch, e))?;
    }
    std::fs::create_dir_all(scratch).map_err(|e| io(scratch, e))?;
    let mut placed: Vec<(PathBuf, PathBuf)> = Vec::new(); // mountPath → the real source
    let mut shadows: BTreeMap<PathBuf, Shadow> = BTreeMap::new();
    let mut ops = Vec::new();
    if let Some(root) = image_root {
        // `readOnlyRootFilesystem`: the copy is bound onto itself read-only before anything is
        // mounted into it (its mount points exist by then; mounting on them writes nothing).
        let read_only = container
            .security_context
            .as_ref()
            .and_then(|s| s.read_only_root_filesystem);
        if read_only == Some(true) {
            let root = c_path(root)?;
            ops.push(Op::Bind {
                source: root.clone(),
                target: root.clone(),
                recursive: false,
            });
            ops.push(Op::ReadOnly { target: root });
        }
        for system in ["/proc", "/dev"] {
            let target = host(Path::new(system));
            std::fs::create_dir_all(&target).map_err(|e| io(&target, e))?;
            ops.push(Op::Bind {
                source: c_path(Path::new(system))?,
                target: c_path(&target)?,
                recursive: true,
            });
        }
    }
    let mut sorted: Vec<_> = mounts.iter().collect();
    sorted.sort_by_key(|m| Path::new(&m.mount_path).components().count());
    for m in sorted {
        let target = absolute(&m.mount_path)
            .filter(|t| t != Path::new("/"))
            .ok_or_else(|| {
                format!(
                    "mountPath {:?} must be an absolute path below / without '..'",
                    m.mount_path
                )
            })?;
        if placed.iter().any(|(t, _)| *t == host(&target)) {
            return Err(format!("mountPath {:?} is used twice", m.mount_path));
        }
        let volume = volumes
            .volumes
            .get(&m.name)
            .ok_or_else(|| format!("volumeMount {:?}: the Pod has no such volume", m.name))?;
        let (source, is_dir) = open_source(volume, m.sub_path.as_deref().unwrap_or(""))?;
        let target = host(&target);
        mount_point(
            &target,
            is_dir,
            &placed,
            &mut shadows,
            scratch,
            image_root.is_some(),
        )?;
        let target_c = c_path(&target)?;
        ops.push(Op::Bind {
            source: c_path(&source)?,
            target: target_c.clone(),
            recursive: false,
        });
        if volume.read_only || m.read_only == Some(true) {
            ops.push(Op::ReadOnly { target: target_c });
        }
        placed.push((target, source));
    }
    let workdir = match workdir {
        Some(w) => {
            mount_point(
                &host(&w),
                true,
                &placed,
                &mut shadows,
                scratch,
                image_root.is_some(),
            )?;
            w
        }
        None => default_cwd.to_owned(),
    };
    // Deepest first: a shallower shadow's bind of an entry then carries the deeper shadow.
    let mut shadow_ops = Vec::new();
    let mut chroot = None;
    let mut order: Vec<_> = shadows.into_iter().collect();
    order.sort_by_key(|(a, _)| std::cmp::Reverse(a.components().count()));
    for (host, shadow) in order {
        mirror(&host, &shadow, &mut shadow_ops)?;
        if host == Path::new("/") {
            chroot = Some(c_path(&shadow.dir)?);
        } else {
            shadow_ops.push(Op::Bind {
                source: c_path(&shadow.dir)?,
                target: c_path(&host)?,
                recursive: true,
            });
        }
    }
    Ok(Some(MountPlan {
        shadows: shadow_ops,
        chroot,
        image_root: image_root.map(c_path).transpose()?,
        mounts: ops,
        workdir: c_path(&workdir)?,
    }))
}

/// The directory (or file) a mount takes from `volume`, with symlinks resolved: its
/// `sub_path`, created if missing as the kubelet does, and refused if it resolves outside the
/// volume. (The source cannot be passed on as an open descriptor: a bind mount's source must be
/// in the mount namespace doing the mount. A symlink swapped in between this check and the
/// mount is not caught; a container here runs as root on the host anyway.)
fn open_source(volume: &Prepared, sub_path: &str) -> Result<(PathBuf, bool), String> {
    let io = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
    let root = volume.dir.canonicalize().map_err(|e| io(&volume.dir, e))?;
    let path = if sub_path.is_empty() {
        root.clone()
    } else {
        let rel = relative(sub_path)
            .ok_or_else(|| format!("subPath {sub_path:?} must be a relative path without '..'"))?;
        let path = root.join(rel);
        if std::fs::symlink_metadata(&path).is_err() {
            std::fs::create_dir_all(&path).map_err(|e| io(&path, e))?;
        }
        path
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_PATH.bits())
        .open(&path)
        .map_err(|e| io(&path, e))?;
    let fd_link = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
    let real = std::fs::read_link(&fd_link).map_err(|e| io(&fd_link, e))?;
    if !real.starts_with(&root) {
        return Err(format!(
            "failed to prepare subPath {sub_path:?}: it resolves to {}, outside its volume",
            real.display()
        ));
    }
    let is_dir = file.metadata().is_ok_and(|m| m.is_dir());
    Ok((real, is_dir))
}

/// Makes sure `target` can be mounted on (a directory, or a file for a file source): inside an
/// earlier mount's source, in a shadow of its nearest existing host ancestor, or as it is.
/// `in_image`: `target` is in a container's own copy of an image, where it is created as it is.
fn mount_point(
    target: &Path,
    is_dir: bool,
    placed: &[(PathBuf, PathBuf)],
    shadows: &mut BTreeMap<PathBuf, Shadow>,
    scratch: &Path,
    in_image: bool,
) -> Result<(), String> {
    let io = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
    let create = |path: &Path| -> Result<(), String> {
        if is_dir {
            std::fs::create_dir_all(path).map_err(|e| io(path, e))
        } else {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(|e| io(parent, e))?;
            }
            File::create(path).map(drop).map_err(|e| io(path, e))
        }
    };
    let inside = placed
        .iter()
        .filter(|(t, _)| target.starts_with(t))
        .max_by_key(|(t, _)| t.components().count());
    if let Some((outer, source)) = inside {
        let at = source.join(target.strip_prefix(outer).expect("a prefix"));
        if std::fs::symlink_metadata(&at).is_err() {
            create(&at)?;
        }
        return Ok(());
    }
    if target.exists() {
        return Ok(());
    }
    if in_image {
        return create(target);
    }
    let mut ancestor = target.parent().unwrap_or(Path::new("/"));
    while !ancestor.exists() {
        ancestor = ancestor.parent().unwrap_or(Path::new("/"));
    }
    let missing = target.strip_prefix(ancestor).expect("an ancestor");
    let host = ancestor.canonicalize().map_err(|e| io(ancestor, e))?;
    if !host.is_dir() {
        return Err(format!("{} is not a directory", ancestor.display()));
    }
    let count = shadows.len();
    let shadow = shadows.entry(host).or_insert_with(|| Shadow {
        dir: scratch.join(format!("shadow-{count}")),
        added: BTreeSet::new(),
    });
    if let Some(Component::Normal(first)) = missing.components().next() {
        shadow.added.insert(first.to_owned());
    }
    create(&shadow.dir.join(missing))
}

/// Fills a shadow with an entry for each entry of `host` and records the binds that make them
/// the host's.
fn mirror(host: &Path, shadow: &Shadow, ops: &mut Vec<Op>) -> Result<(), String> {
    let io = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
    std::fs::create_dir_all(&shadow.dir).map_err(|e| io(&shadow.dir, e))?;
    for entry in std::fs::read_dir(host).map_err(|e| io(host, e))? {
        let entry = entry.map_err(|e| io(host, e))?;
        let name = entry.file_name();
        if shadow.added.contains(&name) {
            continue;
        }
        let from = entry.path();
        let to = shadow.dir.join(&name);
        let kind = entry.file_type().map_err(|e| io(&from, e))?;
        if kind.is_symlink() {
            let link = std::fs::read_link(&from).map_err(|e| io(&from, e))?;
            std::os::unix::fs::symlink(&link, &to).map_err(|e| io(&to, e))?;
            continue;
        }
        if kind.is_dir() {
            std::fs::create_dir(&to).map_err(|e| io(&to, e))?;
        } else {
            File::create(&to).map_err(|e| io(&to, e))?;
        }
        ops.push(Op::Bind {
            source: c_path(&from)?,
            target: c_path(&to)?,
            recursive: kind.is_dir(),
        });
    }
    Ok(())
}

fn c_path(path: &Path) -> Result<CString, String> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| format!("{} contains a NUL byte", path.display()))
}

impl MountPlan {
    /// Makes `cmd` set up its mount namespace before it execs. Spawn it while `self` lives (the
    /// closure keeps it).
    #[allow(unsafe_code)]
    pub(crate) fn apply(self, cmd: &mut Command) {
        // SAFETY: the closure runs in the forked child before exec and only makes syscalls
        // (unshare, mount, chroot, chdir) on paths prepared before the fork; it allocates
        // nothing.
        unsafe {
            cmd.pre_exec(move || self.enter().map_err(std::io::Error::from));
        }
    }

    fn enter(&self) -> nix::Result<()> {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS)?;
        mount(None, c"/", MsFlags::MS_REC | MsFlags::MS_PRIVATE)?;
        for op in &self.shadows {
            op.run()?;
        }
        if let Some(root) = &self.chroot {
            nix::unistd::chdir(root.as_c_str())?;
            nix::unistd::chroot(c".")?;
        }
        for op in &self.mounts {
            op.run()?;
        }
        if let Some(root) = &self.image_root {
            nix::unistd::chdir(root.as_c_str())?;
            nix::unistd::chroot(c".")?;
        }
        nix::unistd::chdir(self.workdir.as_c_str())
    }
}

impl Op {
    fn run(&self) -> nix::Result<()> {
        match self {
            Op::Bind {
                source,
                target,
                recursive,
            } => {
                let rec = if *recursive {
                    MsFlags::MS_REC
                } else {
                    MsFlags::empty()
                };
                mount(Some(source), target, MsFlags::MS_BIND | rec)
            }
            Op::ReadOnly { target } => mount(
                None,
                target,
                MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY,
            ),
        }
    }
}

fn mount(source: Option<&CStr>, target: &CStr, flags: MsFlags) -> nix::Result<()> {
    nix::mount::mount(source, target, None::<&CStr>, flags, None::<&CStr>)
}
