//! Child processes that never outlive the harness.
//!
//! Every process is started from one long-lived spawner thread with `PR_SET_PDEATHSIG=SIGKILL`:
//! the kernel kills the child when the thread that forked it dies, and that thread lives as long
//! as the harness process. So children die with a test binary that panics, aborts or is killed,
//! and [`ManagedProcess`] also kills its child on drop. Output goes to a log file that failing
//! tests print.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock, PoisonError};

use crate::Error;

type SpawnRequest = (Command, mpsc::Sender<std::io::Result<Child>>);

fn spawner() -> &'static Mutex<mpsc::Sender<SpawnRequest>> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("test-cluster-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
                // The channel lives in a static and never closes, so this thread (and with it
                // every child's parent-death signal) lasts until the process exits.
            })
            .expect("spawn the process spawner thread");
        Mutex::new(tx)
    })
}

/// A running child process with its log file.
pub struct ManagedProcess {
    name: String,
    child: Child,
    log_path: PathBuf,
    /// Leads a process group of its own: signals and the kill reach its whole tree.
    group: bool,
    /// The group's leader has been reaped, so its id may belong to someone else now.
    reaped: bool,
}

impl ManagedProcess {
    /// Starts `program` with `args`, stdout and stderr appended to `log_path`.
    pub fn spawn(
        name: &str,
        program: &Path,
        args: &[String],
        log_path: &Path,
    ) -> Result<Self, Error> {
        let mut cmd = Command::new(program);
        cmd.args(args);
        Self::spawn_command(name, cmd, log_path)
    }

    /// Starts a prepared `cmd` (its program, arguments, environment, working directory and any
    /// `pre_exec` steps as the caller set them), stdout and stderr appended to `log_path`.
    pub(crate) fn spawn_command(
        name: &str,
        mut cmd: Command,
        log_path: &Path,
    ) -> Result<Self, Error> {
        let log = File::options()
            .create(true)
            .append(true)
            .open(log_path)
            .map_err(|e| Error::io(log_path, e))?;
        let log_err = log.try_clone().map_err(|e| Error::io(log_path, e))?;
        cmd.stdout(log).stderr(log_err);
        Self::spawn_with_output(name, cmd, log_path)
    }

    /// Like [`Self::spawn_command`], but stdout and stderr are pipes for the caller to read
    /// ([`Self::take_output`]) and write to `log_path` in a form of its own, and the process
    /// leads a process group: [`Self::signal`] and [`Self::kill`] reach everything it started,
    /// and what is left of the group when it exits is killed (as a container runtime does).
    pub(crate) fn spawn_command_piped(
        name: &str,
        mut cmd: Command,
        log_path: &Path,
    ) -> Result<Self, Error> {
        use std::os::unix::process::CommandExt;
        cmd.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let mut process = Self::spawn_with_output(name, cmd, log_path)?;
        process.group = true;
        Ok(process)
    }

    /// Signals the whole group while its leader's id is still reserved (not reaped).
    fn signal_group(&self, signal: nix::sys::signal::Signal) {
        if self.group && !self.reaped {
            let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
            let _ = nix::sys::signal::killpg(pid, signal);
        }
    }

    /// Whether the leader has exited, without reaping it.
    fn leader_exited(&self) -> bool {
        use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
        !matches!(waitid(Id::Pid(pid), flags), Ok(WaitStatus::StillAlive))
    }

    /// The pipes of a process started with [`Self::spawn_command_piped`] (once).
    pub(crate) fn take_output(
        &mut self,
    ) -> (
        Option<std::process::ChildStdout>,
        Option<std::process::ChildStderr>,
    ) {
        (self.child.stdout.take(), self.child.stderr.take())
    }

    fn spawn_with_output(name: &str, mut cmd: Command, log_path: &Path) -> Result<Self, Error> {
        let program = PathBuf::from(cmd.get_program());
        cmd.stdin(Stdio::null());
        set_parent_death_signal(&mut cmd);

        let (tx, rx) = mpsc::channel();
        spawner()
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .send((cmd, tx))
            .expect("spawner thread is alive");
        let child = rx
            .recv()
            .expect("spawner thread replies")
            .map_err(|source| Error::Spawn { program, source })?;
        tracing::debug!(name, pid = child.id(), log = %log_path.display(), "started");
        Ok(Self {
            name: name.to_owned(),
            child,
            log_path: log_path.to_owned(),
            group: false,
            reaped: false,
        })
    }

    /// The process's name in logs and messages (e.g. `target/kube-apiserver-0`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The OS process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Where stdout and stderr go.
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// `Some(status)` once the process has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        if self.group && !self.reaped && self.leader_exited() {
            self.signal_group(nix::sys::signal::Signal::SIGKILL);
        }
        let status = self.child.try_wait().ok().flatten();
        self.reaped |= status.is_some();
        status
    }

    /// The last `lines` lines of the log.
    pub fn log_tail(&self, lines: usize) -> String {
        tail_file(&self.log_path, lines)
    }

    /// Sends `signal` to the process unless it has already been reaped.
    pub fn signal(&mut self, signal: nix::sys::signal::Signal) {
        if self.group {
            self.signal_group(signal);
        } else if self.child.try_wait().ok().flatten().is_none() {
            let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
            let _ = nix::sys::signal::kill(pid, signal);
        }
    }

    /// Kills the process (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        self.signal_group(nix::sys::signal::Signal::SIGKILL);
        self.reaped = true;
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
            tracing::debug!(name = %self.name, "stopped");
        }
    }
}

impl Drop for ManagedProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The last `lines` lines of a file (reads at most the last 64 KiB).
pub fn tail_file(path: &Path, lines: usize) -> String {
    let Ok(mut f) = File::open(path) else {
        return format!("(no log at {})", path.display());
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let start = len.saturating_sub(64 * 1024);
    let _ = f.seek(SeekFrom::Start(start));
    let mut buf = String::new();
    let _ = f.read_to_string(&mut buf);
    let all: Vec<&str> = buf.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[allow(unsafe_code)]
fn set_parent_death_signal(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the forked child before exec and only calls prctl(2), which
    // is async-signal-safe; it allocates nothing and touches no locks.
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                .map_err(std::io::Error::from)
        });
    }
}

/// A free TCP port on 127.0.0.1. Ports handed out once are never handed out again by this
/// process, so two components started together never race for the same one.
pub fn free_port() -> Result<u16, Error> {
    static HANDED_OUT: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(PoisonError::into_inner);
    for _ in 0..64 {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")
            .map_err(|e| Error::io(Path::new("127.0.0.1:0"), e))?;
        let port = listener
            .local_addr()
            .map_err(|e| Error::io(Path::new("127.0.0.1:0"), e))?
            .port();
        if !handed_out.contains(&port) {
            handed_out.push(port);
            return Ok(port);
        }
    }
    Err(Error::NoFreePort)
}

/// A port on 127.0.0.1 that refuses every connection for as long as this value lives: the
/// socket is bound but never listens, so a SYN gets a reset and no other socket (in this
/// process or another) can take the port meanwhile. A port learnt from a closed listener
/// could be taken by a parallel test's server and answer.
pub struct RefusingPort {
    socket: tokio::net::TcpSocket,
}

impl RefusingPort {
    pub fn bind() -> Result<Self, Error> {
        let at = Path::new("127.0.0.1:0");
        let socket = tokio::net::TcpSocket::new_v4().map_err(|e| Error::io(at, e))?;
        socket
            .bind(([127, 0, 0, 1], 0).into())
            .map_err(|e| Error::io(at, e))?;
        Ok(Self { socket })
    }

    pub fn port(&self) -> u16 {
        self.socket.local_addr().map(|a| a.port()).unwrap_or(0)
    }

    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port())
    }
}

/// Fails with a clear error when something already listens on `port`.
pub fn ensure_port_free(port: u16) -> Result<(), Error> {
    std::net::TcpListener::bind(("127.0.0.1", port))
        .map(drop)
        .map_err(|_| Error::PortInUse(port))
}
