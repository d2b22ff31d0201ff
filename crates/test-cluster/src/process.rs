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
}

impl ManagedProcess {
    /// Starts `program` with `args`, stdout and stderr appended to `log_path`.
    pub fn spawn(
        name: &str,
        program: &Path,
        args: &[String],
        log_path: &Path,
    ) -> Result<Self, Error> {
        let log = File::options()
            .create(true)
            .append(true)
            .open(log_path)
            .map_err(|e| Error::io(log_path, e))?;
        let log_err = log.try_clone().map_err(|e| Error::io(log_path, e))?;
        let mut cmd = Command::new(program);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err);
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
            .map_err(|source| Error::Spawn {
                program: program.to_owned(),
                source,
            })?;
        tracing::debug!(name, pid = child.id(), log = %log_path.display(), "started");
        Ok(Self {
            name: name.to_owned(),
            child,
            log_path: log_path.to_owned(),
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
        self.child.try_wait().ok().flatten()
    }

    /// The last `lines` lines of the log.
    pub fn log_tail(&self, lines: usize) -> String {
        tail_file(&self.log_path, lines)
    }

    /// Kills the process (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
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

/// Fails with a clear error when something already listens on `port`.
pub fn ensure_port_free(port: u16) -> Result<(), Error> {
    std::net::TcpListener::bind(("127.0.0.1", port))
        .map(drop)
        .map_err(|_| Error::PortInUse(port))
}
