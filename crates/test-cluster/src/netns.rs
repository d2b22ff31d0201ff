//! Private network namespaces: one [`World`] per test world (a bridge `kt0` at `10.244.0.1/24`
//! that only it knows) and one [`PodNetwork`] per Pod (its own `eth0` at `10.244.0.N/24`, a veth
//! whose other end is on the bridge, a default route via the bridge).
//!
//! Each namespace is held by a `sleep infinity` process that `unshare(CLONE_NEWNET)`s before it
//! execs, started like every other harness process (parent-death signal, killed on drop). No
//! mount and no name under `/run/netns` is made, so a harness that is killed leaves nothing
//! behind: its holders die with it, and with the last holder the kernel removes the namespace
//! and every veth and bridge in it. Every link is created from inside the world's namespace
//! (`ip` run with the namespace entered), so the host's namespace gains no link, address or
//! route. The harness reaches pods with [`World::connect`]: a socket created on a thread that
//! has entered the world keeps that namespace for its whole life.

use std::fs::File;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use nix::sched::{CloneFlags, setns};

use crate::Error;
use crate::process::ManagedProcess;

/// The bridge's name inside the world.
pub const BRIDGE: &str = "kt0";
/// The bridge's link-layer address (locally administered, after [`GATEWAY`]).
const BRIDGE_MAC: &str = "02:00:0a:f4:00:01";
/// The bridge's address: the pods' default gateway.
pub const GATEWAY: Ipv4Addr = Ipv4Addr::new(10, 244, 0, 1);
/// The prefix length of the pod network `10.244.0.0/24`.
pub const PREFIX_LEN: u8 = 24;

/// A process holding a fresh network namespace, and an open handle on that namespace.
struct Holder {
    ns: File,
    process: ManagedProcess,
}

impl Holder {
    fn start(name: &str, log_dir: &Path) -> Result<Self, Error> {
        let mut cmd = Command::new("sleep");
        cmd.arg("infinity");
        unshare_net_before_exec(&mut cmd);
        let log = log_dir.join(format!("{}.log", name.replace('/', "_")));
        let process = ManagedProcess::spawn_command(name, cmd, &log)?;
        // spawn returns after the exec, so the unshare has happened.
        let path = PathBuf::from(format!("/proc/{}/ns/net", process.pid()));
        let ns = File::open(&path).map_err(|e| Error::io(&path, e))?;
        Ok(Self { ns, process })
    }

    fn pid(&self) -> u32 {
        self.process.pid()
    }
}

/// The private network namespace of one test world, with its bridge.
pub struct World {
    name: String,
    dir: PathBuf,
    holder: Holder,
    state: Mutex<Allocations>,
}

#[derive(Default)]
struct Allocations {
    /// Host parts (the N of 10.244.0.N) in use.
    hosts: Vec<u8>,
    /// The host part handed out last. Addresses are handed out round-robin, as the
    /// `host-local` IPAM plugin does: a freed address comes back last, so peers' neighbour
    /// caches that still map it to a deleted Pod's veth have expired by then.
    last_host: u8,
    /// Veth names are never reused within a world: a deleted link can linger in the kernel.
    next_link: u32,
}

impl World {
    /// Creates the namespace, brings `lo` up and creates the bridge. `dir` holds the holders'
    /// (empty) logs.
    pub fn create(name: &str, dir: &Path) -> Result<Self, Error> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let holder = Holder::start(&format!("{name}/netns"), dir)?;
        let world = Self {
            name: name.to_owned(),
            dir: dir.to_owned(),
            holder,
            state: Mutex::new(Allocations::default()),
        };
        let gateway = format!("{GATEWAY}/{PREFIX_LEN}");
        world.ip(&["link", "set", "lo", "up"])?;
        // A fixed address: a bridge otherwise takes its lowest port's, so it would change as
        // Pods come and go, leaving every Pod's entry for its gateway pointing at a stale one
        // (and flushing the node's neighbour entries each time).
        world.ip(&[
            "link", "add", BRIDGE, "address", BRIDGE_MAC, "type", "bridge",
        ])?;
        world.ip(&["addr", "add", &gateway, "dev", BRIDGE])?;
        world.ip(&["link", "set", BRIDGE, "up"])?;
        Ok(world)
    }

    /// The world's name (used in process names).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The path of the world's namespace (for `nsenter --net=<path>`), valid while it lives.
    pub fn ns_path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/{}/ns/net", self.holder.pid()))
    }

    /// The pid of the process holding the world's namespace.
    pub fn holder_pid(&self) -> u32 {
        self.holder.pid()
    }

    /// Runs `ip args` inside the world.
    pub fn ip(&self, args: &[&str]) -> Result<String, Error> {
        run_in(self.holder.ns.as_fd(), "ip", args)
    }

    /// Opens a TCP connection from inside the world (to a pod's address).
    pub async fn connect(&self, addr: SocketAddr) -> std::io::Result<tokio::net::TcpStream> {
        let ns = self.holder.ns.try_clone()?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        // A thread of its own: entering a namespace is per thread, and this one ends right after.
        std::thread::Builder::new()
            .name("netns-connect".into())
            .spawn(move || {
                let result = setns(&ns, CloneFlags::CLONE_NEWNET)
                    .map_err(std::io::Error::from)
                    .and_then(|()| {
                        std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5))
                    });
                let _ = tx.send(result);
            })?;
        let stream = rx
            .await
            .map_err(|_| std::io::Error::other("netns-connect thread died"))??;
        stream.set_nonblocking(true)?;
        tokio::net::TcpStream::from_std(stream)
    }

    /// Listens on `inside` in the world and relays each connection to `host` (an address on the
    /// host's loopback that the project started, such as the cluster's kube-apiserver), from
    /// the harness process. Runs until dropped.
    pub async fn expose(&self, inside: SocketAddr, host: SocketAddr) -> std::io::Result<()> {
        let ns = self.holder.ns.try_clone()?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name("netns-listen".into())
            .spawn(move || {
                let result = setns(&ns, CloneFlags::CLONE_NEWNET)
                    .map_err(std::io::Error::from)
                    .and_then(|()| std::net::TcpListener::bind(inside));
                let _ = tx.send(result);
            })?;
        let listener = rx
            .await
            .map_err(|_| std::io::Error::other("netns-listen thread died"))??;
        listener.set_nonblocking(true)?;
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let mut relays = tokio::task::JoinSet::new();
        loop {
            let (mut inbound, peer) = listener.accept().await?;
            relays.spawn(async move {
                match tokio::net::TcpStream::connect(host).await {
                    Ok(mut outbound) => {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                    Err(e) => tracing::warn!(%peer, %host, error = %e, "relaying a connection"),
                }
            });
            while relays.try_join_next().is_some() {}
        }
    }

    /// Creates a pod's namespace with its own address on the bridge.
    pub fn add_pod(self: &Arc<Self>, name: &str) -> Result<PodNetwork, Error> {
        let (host, link) = {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            let host = next_host(&state.hosts, state.last_host)
                .ok_or_else(|| Error::Network("no free address in 10.244.0.0/24".into()))?;
            state.hosts.push(host);
            state.last_host = host;
            state.next_link += 1;
            (host, format!("vkt{}", state.next_link))
        };
        let holder = match Holder::start(&format!("{}/netns-{name}", self.name), &self.dir) {
            Ok(h) => h,
            Err(e) => {
                self.release(host);
                return Err(e);
            }
        };
        let pod = PodNetwork {
            world: Arc::clone(self),
            own: Some(Own { holder, link }),
            ip: Ipv4Addr::new(10, 244, 0, host),
        };
        pod.configure()?;
        Ok(pod)
    }

    /// The network of a `hostNetwork` Pod: the world's own namespace (where the bridge and the
    /// node's address are), shared with every other such Pod.
    pub fn host_network(self: &Arc<Self>) -> PodNetwork {
        PodNetwork {
            world: Arc::clone(self),
            own: None,
            ip: GATEWAY,
        }
    }

    fn release(&self, host: u8) {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .hosts
            .retain(|h| *h != host);
    }
}

/// The host part to hand out next: the first free one after `last`, round-robin over .2-.254
/// (.1 is the bridge's).
fn next_host(in_use: &[u8], last: u8) -> Option<u8> {
    let after = last.max(1);
    (after + 1..=254u8)
        .chain(2..=after)
        .find(|h| !in_use.contains(h))
}

/// One pod's network: a namespace of its own, or (`hostNetwork`) the world's. Dropping a
/// namespace of its own deletes its veth and its namespace and frees its address.
pub struct PodNetwork {
    world: Arc<World>,
    own: Option<Own>,
    ip: Ipv4Addr,
}

/// A Pod's own namespace and the name of its veth's end on the bridge.
struct Own {
    holder: Holder,
    link: String,
}

impl PodNetwork {
    fn configure(&self) -> Result<(), Error> {
        let Some(own) = &self.own else {
            return Ok(());
        };
        let pid = own.holder.pid().to_string();
        let w = &self.world;
        w.ip(&[
            "link", "add", &own.link, "type", "veth", "peer", "name", "eth0", "netns", &pid,
        ])?;
        w.ip(&["link", "set", &own.link, "master", BRIDGE])?;
        w.ip(&["link", "set", &own.link, "up"])?;
        // An entry left from the address's previous Pod would send the node's packets (probes,
        // Service traffic) to a veth that is gone until it expires.
        w.ip(&["neigh", "flush", "to", &self.ip.to_string(), "dev", BRIDGE])?;
        let addr = format!("{}/{PREFIX_LEN}", self.ip);
        let gateway = GATEWAY.to_string();
        self.ip_cmd(&["link", "set", "lo", "up"])?;
        self.ip_cmd(&["addr", "add", &addr, "dev", "eth0"])?;
        self.ip_cmd(&["link", "set", "eth0", "up"])?;
        self.ip_cmd(&["route", "add", "default", "via", &gateway])?;
        Ok(())
    }

    /// The pod's address (the node's, with `hostNetwork`).
    pub fn ip(&self) -> Ipv4Addr {
        self.ip
    }

    /// The namespace's holder: the Pod's own, or the world's.
    fn holder(&self) -> &Holder {
        self.own.as_ref().map_or(&self.world.holder, |o| &o.holder)
    }

    /// The path of the pod's namespace (for `nsenter --net=<path>`), valid while it lives.
    pub fn ns_path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/{}/ns/net", self.holder().pid()))
    }

    /// The pid of the process holding the pod's namespace.
    pub fn holder_pid(&self) -> u32 {
        self.holder().pid()
    }

    /// Runs `ip args` inside the pod's namespace.
    pub fn ip_cmd(&self, args: &[&str]) -> Result<String, Error> {
        run_in(self.holder().ns.as_fd(), "ip", args)
    }

    /// Makes `cmd` enter the pod's namespace before it execs. Spawn it while `self` lives.
    pub fn enter(&self, cmd: &mut Command) {
        enter_before_exec(cmd, self.holder().ns.as_raw_fd());
    }

    /// Starts `cmd` inside the pod's namespace as a managed process logging to `log_path`.
    pub fn spawn(
        &self,
        name: &str,
        mut cmd: Command,
        log_path: &Path,
    ) -> Result<ManagedProcess, Error> {
        self.enter(&mut cmd);
        ManagedProcess::spawn_command(name, cmd, log_path)
    }

    /// Like [`Self::spawn`], with stdout and stderr as pipes for the caller.
    pub(crate) fn spawn_piped(
        &self,
        name: &str,
        cmd: Command,
        log_path: &Path,
    ) -> Result<ManagedProcess, Error> {
        self.spawn_piped_as(name, cmd, log_path, None)
    }

    /// [`Self::spawn_piped`] as the user `(uid, gid)` (no supplementary groups), switched to
    /// after every privileged step the caller or this namespace needs.
    pub(crate) fn spawn_piped_as(
        &self,
        name: &str,
        mut cmd: Command,
        log_path: &Path,
        user: Option<(u32, u32)>,
    ) -> Result<ManagedProcess, Error> {
        self.enter(&mut cmd);
        if let Some((uid, gid)) = user {
            become_before_exec(&mut cmd, uid, gid);
        }
        ManagedProcess::spawn_command_piped(name, cmd, log_path)
    }
}

impl Drop for PodNetwork {
    fn drop(&mut self) {
        let Some(own) = &mut self.own else {
            return;
        };
        // Deleting the world's end removes the pair at once; the namespace goes with its holder.
        if let Err(e) = self.world.ip(&["link", "del", &own.link]) {
            tracing::warn!(link = %own.link, error = %e, "deleting a pod's veth");
        }
        own.holder.process.kill();
        self.world.release(self.ip.octets()[3]);
    }
}

/// Runs `program args` with the namespace `ns` entered; its stdout, or an error with stderr.
fn run_in(ns: BorrowedFd<'_>, program: &str, args: &[&str]) -> Result<String, Error> {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    enter_before_exec(&mut cmd, ns.as_raw_fd());
    let out = cmd.output().map_err(|e| Error::io(Path::new(program), e))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(Error::Network(format!(
            "{program} {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

#[allow(unsafe_code)]
fn enter_before_exec(cmd: &mut Command, ns: i32) {
    // SAFETY: the closure runs in the forked child before exec and only calls setns(2), which
    // is async-signal-safe; `ns` is an inherited descriptor the caller keeps open until spawn
    // returns.
    unsafe {
        cmd.pre_exec(move || {
            setns(BorrowedFd::borrow_raw(ns), CloneFlags::CLONE_NEWNET)
                .map_err(std::io::Error::from)
        });
    }
}

#[allow(unsafe_code)]
fn become_before_exec(cmd: &mut Command, uid: u32, gid: u32) {
    use nix::unistd::{Gid, Uid, setgid, setgroups, setuid};
    // SAFETY: the closure runs in the forked child before exec and only calls setgroups(2),
    // setgid(2) and setuid(2); it allocates nothing. std's own `uid`/`gid` would switch before
    // the earlier `pre_exec` steps (mount namespace, chroot, setns), which need root.
    unsafe {
        cmd.pre_exec(move || {
            let gid = Gid::from_raw(gid);
            setgroups(&[gid])?;
            setgid(gid)?;
            setuid(Uid::from_raw(uid)).map_err(std::io::Error::from)
        });
    }
}

#[allow(unsafe_code)]
fn unshare_net_before_exec(cmd: &mut Command) {
    // SAFETY: the closure runs in the forked child before exec and only calls unshare(2).
    unsafe {
        cmd.pre_exec(|| {
            nix::sched::unshare(CloneFlags::CLONE_NEWNET).map_err(std::io::Error::from)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::next_host;

    #[test]
    fn addresses_go_round_robin_and_a_freed_one_comes_back_last() {
        assert_eq!(next_host(&[], 0), Some(2), "the first Pod");
        assert_eq!(next_host(&[2], 2), Some(3));
        // .2 freed: .3 still comes next, then the rest of the range.
        assert_eq!(next_host(&[], 2), Some(3));
        assert_eq!(
            next_host(&[3, 4], 2),
            Some(5),
            "in-use addresses are skipped"
        );
        // At the end of the range it wraps to the freed ones.
        assert_eq!(next_host(&[3], 254), Some(2));
        assert_eq!(next_host(&[2], 254), Some(3));
        let all: Vec<u8> = (2..=254).collect();
        assert_eq!(next_host(&all, 100), None, "full");
        let but_one: Vec<u8> = (2..=254).filter(|h| *h != 100).collect();
        assert_eq!(
            next_host(&but_one, 100),
            Some(100),
            "the one left, even the last one"
        );
    }
}
