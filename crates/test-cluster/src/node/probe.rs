//! Container probes as the kubelet runs them: `httpGet` (HTTP) and `tcpSocket`, from the node's
//! side of the bridge (the private namespace) to the Pod's address, and `exec` (the command run
//! in the container's namespaces), with the kubelet's timing (`initialDelaySeconds`,
//! `periodSeconds`, `timeoutSeconds`) and thresholds.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::netns::{PodNetwork, World};

/// Where an `exec` probe or hook runs: the container's process (whose mount namespace, root and
/// working directory it joins), its Pod's network namespace and the container's environment.
pub(super) struct ExecIn<'a> {
    pub net: &'a PodNetwork,
    pub pid: u32,
    pub env: &'a [(std::ffi::OsString, std::ffi::OsString)],
}

impl ExecIn<'_> {
    /// Runs `argv` in the container; `Err` carries the exit status and output. Dropping the
    /// future kills the command (a probe's timeout).
    pub(super) async fn run(&self, argv: &[String]) -> Result<(), String> {
        if argv.is_empty() {
            return Err("empty exec command".into());
        }
        let mut cmd = std::process::Command::new("nsenter");
        cmd.arg(format!("--target={}", self.pid))
            .args(["--mount", "--root", "--wd", "--"])
            .args(argv)
            .env_clear()
            .envs(self.env.iter().cloned())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        self.net.enter(&mut cmd);
        let mut cmd = tokio::process::Command::from(cmd);
        cmd.kill_on_drop(true);
        let out = cmd
            .output()
            .await
            .map_err(|e| format!("running {argv:?}: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            let mut output = String::from_utf8_lossy(&out.stdout).into_owned();
            output.push_str(&String::from_utf8_lossy(&out.stderr));
            Err(format!(
                "command {argv:?} exited with {}: {}",
                out.status.code().unwrap_or(-1),
                output.trim()
            ))
        }
    }
}

/// One probe of one container run, with its consecutive results.
pub(super) struct Prober {
    spec: Probe,
    next: Instant,
    successes: i32,
    failures: i32,
    /// The probe's verdict so far (false until it first reaches its success threshold).
    pub(super) passing: bool,
}

impl Prober {
    /// A prober for a container that started at `started`, or `None` without a probe.
    pub(super) fn new(spec: Option<&Probe>, started: Instant) -> Option<Self> {
        let spec = spec?.clone();
        let delay = spec.initial_delay_seconds.unwrap_or(0).max(0) as u64;
        Some(Self {
            spec,
            next: started + Duration::from_secs(delay),
            successes: 0,
            failures: 0,
            passing: false,
        })
    }

    pub(super) fn due(&self, now: Instant) -> bool {
        now >= self.next
    }

    /// Probes once and records the result; `Err` carries the failure's message.
    pub(super) async fn probe(
        &mut self,
        world: &World,
        pod_ip: Ipv4Addr,
        container: &Container,
        exec: &ExecIn<'_>,
    ) -> Result<(), String> {
        let period = self.spec.period_seconds.unwrap_or(10).max(1) as u64;
        let timeout = Duration::from_secs(self.spec.timeout_seconds.unwrap_or(1).max(1) as u64);
        let result = match tokio::time::timeout(timeout, async {
            match &self.spec.exec {
                Some(e) => exec.run(e.command.as_deref().unwrap_or_default()).await,
                None => once(world, pod_ip, container, &self.spec).await,
            }
        })
        .await
        {
            Ok(result) => result,
            Err(_) => Err(format!("timeout after {timeout:?}")),
        };
        self.next = Instant::now() + Duration::from_secs(period);
        if result.is_ok() {
            self.failures = 0;
            self.successes += 1;
            if self.successes >= self.spec.success_threshold.unwrap_or(1).max(1) {
                self.passing = true;
            }
        } else {
            self.successes = 0;
            self.failures += 1;
            if self.failures >= self.spec.failure_threshold.unwrap_or(3).max(1) {
                self.passing = false;
            }
        }
        result
    }

    /// Whether the failures reached the threshold (a liveness or startup probe's kill).
    pub(super) fn failed(&self) -> bool {
        self.failures >= self.spec.failure_threshold.unwrap_or(3).max(1)
    }

    /// The grace period a kill for this probe gets, if the probe sets its own.
    pub(super) fn termination_grace(&self) -> Option<i64> {
        self.spec.termination_grace_period_seconds
    }
}

/// Why this node cannot run `probe`, if it cannot (checked before a container starts).
pub(super) fn unsupported(probe: &Probe) -> Option<String> {
    if probe.exec.is_some() {
        return None;
    }
    if probe.grpc.is_some() {
        return Some("grpc probes are not supported by this node yet".into());
    }
    if let Some(http) = &probe.http_get
        && http
            .scheme
            .as_deref()
            .is_some_and(|s| !s.eq_ignore_ascii_case("HTTP"))
    {
        return Some("httpGet probes over HTTPS are not supported by this node yet".into());
    }
    if probe.http_get.is_none() && probe.tcp_socket.is_none() {
        return Some("a probe needs httpGet, tcpSocket or exec".into());
    }
    None
}

/// One check of `probe`, without timing or thresholds (also a preStop `httpGet` hook).
pub(super) async fn once(
    world: &World,
    pod_ip: Ipv4Addr,
    container: &Container,
    probe: &Probe,
) -> Result<(), String> {
    let target = |host: Option<&String>, port: &IntOrString| -> Result<SocketAddr, String> {
        let ip = match host {
            Some(h) if !h.is_empty() => h
                .parse::<Ipv4Addr>()
                .map_err(|_| format!("probe host {h:?} is not an IPv4 address"))?,
            _ => pod_ip,
        };
        Ok(SocketAddr::from((ip, resolve_port(container, port)?)))
    };
    if let Some(tcp) = &probe.tcp_socket {
        let addr = target(tcp.host.as_ref(), &tcp.port)?;
        world
            .connect(addr)
            .await
            .map(drop)
            .map_err(|e| format!("dial tcp {addr}: {e}"))
    } else if let Some(http) = &probe.http_get {
        let addr = target(http.host.as_ref(), &http.port)?;
        let path = http.path.as_deref().unwrap_or("/");
        let mut request = format!(
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: kube-probe/1.36\r\nAccept: */*\r\nConnection: close\r\n"
        );
        for h in http.http_headers.iter().flatten() {
            request.push_str(&format!("{}: {}\r\n", h.name, h.value));
        }
        request.push_str("\r\n");
        let url = format!("http://{addr}{path}");
        let mut stream = world
            .connect(addr)
            .await
            .map_err(|e| format!("Get \"{url}\": {e}"))?;
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| format!("Get \"{url}\": {e}"))?;
        let mut head = Vec::new();
        let mut buf = [0u8; 1024];
        while !head.windows(2).any(|w| w == b"\r\n") && head.len() < 4096 {
            match stream.read(&mut buf).await {
                Ok(0) => break,
                Ok(n) => head.extend_from_slice(&buf[..n]),
                Err(e) => return Err(format!("Get \"{url}\": {e}")),
            }
        }
        let line = String::from_utf8_lossy(&head);
        let code: u16 = line
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| format!("Get \"{url}\": malformed HTTP response"))?;
        if (200..400).contains(&code) {
            Ok(())
        } else {
            Err(format!("HTTP probe failed with statuscode: {code}"))
        }
    } else {
        Err("a probe needs httpGet or tcpSocket".into())
    }
}

/// A probe's port: a number, or the name of one of the container's ports.
fn resolve_port(container: &Container, port: &IntOrString) -> Result<u16, String> {
    match port {
        IntOrString::Int(n) => u16::try_from(*n).map_err(|_| format!("invalid port {n}")),
        IntOrString::String(name) => container
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(name.as_str()))
            .and_then(|p| u16::try_from(p.container_port).ok())
            .ok_or_else(|| format!("no container port named {name:?}")),
    }
}
