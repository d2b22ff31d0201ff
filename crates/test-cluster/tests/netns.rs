//! Network namespaces without a control plane: pods with their own addresses on a private
//! bridge, reachable from the private namespace only, and nothing left behind.

use std::net::SocketAddr;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use test_cluster::netns::World;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const SERVER: &str = env!("CARGO_BIN_EXE_kt-test-server");

async fn get(world: &World, addr: SocketAddr, path: &str) -> std::io::Result<String> {
    let mut stream = world.connect(addr).await?;
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\nhost: x\r\n\r\n").as_bytes())
        .await?;
    let mut out = String::new();
    stream.read_to_string(&mut out).await?;
    Ok(out)
}

/// Retries until the server in the pod listens.
async fn get_eventually(world: &World, addr: SocketAddr, path: &str) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match get(world, addr, path).await {
            Ok(body) => return body,
            Err(e) if tokio::time::Instant::now() > deadline => panic!("GET {addr}{path}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

fn ns_inode(path: &std::path::Path) -> String {
    std::fs::read_link(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .display()
        .to_string()
}

/// Every `net:[inode]` some process on the machine is in.
fn live_net_namespaces() -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path().join("ns/net")).ok())
        .map(|p| p.display().to_string())
        .collect()
}

/// One test at a time: namespace inode numbers are reused, so a test that checks its
/// namespaces are gone must not run beside one that makes new ones.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test]
async fn two_pods_on_one_port_are_reached_only_inside_the_world() {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let world = Arc::new(World::create("netns-test", dir.path()).unwrap());
    let a = world.add_pod("a").unwrap();
    let b = world.add_pod("b").unwrap();
    assert_ne!(a.ip(), b.ip());
    for pod in [&a, &b] {
        assert!(pod.ip().octets()[..3] == [10, 244, 0], "{}", pod.ip());
    }
    let port = 18080;
    let mut servers = Vec::new();
    for (pod, id) in [(&a, "pod-a"), (&b, "pod-b")] {
        let mut cmd = Command::new(SERVER);
        cmd.arg(port.to_string()).env("IDENTITY", id);
        let log = dir.path().join(format!("{id}.log"));
        servers.push(pod.spawn(id, cmd, &log).unwrap());
    }
    let body_a = get_eventually(&world, SocketAddr::from((a.ip(), port)), "/").await;
    let body_b = get_eventually(&world, SocketAddr::from((b.ip(), port)), "/").await;
    assert!(body_a.contains("\r\n\r\npod-a\n"), "{body_a}");
    assert!(body_b.contains("\r\n\r\npod-b\n"), "{body_b}");
    // The gateway (the bridge) is the world's own address.
    let routes = a.ip_cmd(&["route", "show", "default"]).unwrap();
    assert!(routes.contains("via 10.244.0.1 dev eth0"), "{routes}");

    // The host's namespace knows nothing of it: no bridge, no address in the range, and the
    // port is not served on the host. (No packet is sent to 10.244.0.0/24 from the host: with
    // no route of its own, it would leave through the host's default route.)
    let host_links = Command::new("ip").args(["-o", "link"]).output().unwrap();
    let host_links = String::from_utf8_lossy(&host_links.stdout);
    assert!(!host_links.contains(" kt0:"), "{host_links}");
    assert!(!host_links.contains("vkt"), "{host_links}");
    let host_addrs = Command::new("ip").args(["-o", "addr"]).output().unwrap();
    let host_addrs = String::from_utf8_lossy(&host_addrs.stdout);
    assert!(!host_addrs.contains("10.244.0."), "{host_addrs}");
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
    // A route lookup (no packet sent): the host would not use any link of the world.
    let lookup = Command::new("ip")
        .args(["route", "get", &a.ip().to_string()])
        .output()
        .unwrap();
    let lookup = String::from_utf8_lossy(&lookup.stdout);
    assert!(
        !lookup.contains("kt0") && !lookup.contains("vkt"),
        "{lookup}"
    );
    // The world's loopback is its own, not the host's: the pods' port is not on it.
    assert!(
        world
            .connect(SocketAddr::from(([127, 0, 0, 1], port)))
            .await
            .is_err(),
        "the world's own loopback serves nothing"
    );

    // Teardown: processes, veths and namespaces are gone.
    let namespaces = [
        ns_inode(&world.ns_path()),
        ns_inode(&a.ns_path()),
        ns_inode(&b.ns_path()),
    ];
    let holders = [world.holder_pid(), a.holder_pid(), b.holder_pid()];
    let pids: Vec<u32> = servers.iter().map(|s| s.pid()).collect();
    drop(servers);
    drop(a);
    let links = world.ip(&["-o", "link"]).unwrap();
    assert_eq!(links.matches("vkt").count(), 1, "{links}");
    drop(b);
    drop(world);
    for pid in holders.iter().chain(&pids) {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "process {pid} is still there"
        );
    }
    let live = live_net_namespaces();
    for ns in &namespaces {
        assert!(!live.contains(ns), "{ns} is still held by a process");
    }
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    for ns in &namespaces {
        assert!(!mounts.contains(ns.as_str()), "{ns} is mounted");
    }
}

/// A Pod gets an address another Pod had (addresses go round-robin, unit-tested in `netns`)
/// without the node's neighbour entry that still pointed at the deleted Pod's veth.
#[tokio::test]
async fn a_reused_address_comes_without_a_stale_neighbour() {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let world = Arc::new(World::create("netns-reuse", dir.path()).unwrap());
    let first = world.add_pod("first").unwrap();
    // The address the next Pod gets (round-robin after the first's), as if a deleted Pod had
    // had it and the node had not yet forgotten that Pod's veth.
    let [a, b, c, d] = first.ip().octets();
    let next = std::net::Ipv4Addr::new(a, b, c, d + 1).to_string();
    let stale = "02:00:00:00:00:01";
    world
        .ip(&[
            "neigh", "replace", &next, "lladdr", stale, "dev", "kt0", "nud", "stale",
        ])
        .unwrap();
    let second = world.add_pod("second").unwrap();
    assert_eq!(second.ip().to_string(), next);
    let neigh = world.ip(&["neigh", "show", "to", &next]).unwrap();
    assert!(!neigh.contains(stale), "{neigh}");
}
