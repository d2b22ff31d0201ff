//! Every process the harness starts dies with its handle: on drop, during a panic, and when the
//! owning process itself is killed.

use test_cluster::{ClusterSpec, ControlPlane};

fn alive(pid: u32) -> bool {
    // A reaped process has no /proc entry; a zombie counts as dead.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.split_whitespace().nth(2) != Some("Z"))
}

#[tokio::test]
async fn dropping_the_handle_stops_every_process() {
    test_cluster::install_crypto_provider();
    let cp = ControlPlane::builder()
        .cluster(ClusterSpec::new("dropped").controller_manager())
        .start()
        .await
        .unwrap();
    let pids = cp.pids();
    assert_eq!(
        pids.len(),
        3,
        "etcd, kube-apiserver, kube-controller-manager"
    );
    assert!(pids.iter().all(|p| alive(*p)));
    let dir = cp.state_dir().to_owned();
    drop(cp);
    for p in &pids {
        assert!(!alive(*p), "pid {p} survived the drop");
    }
    assert!(!dir.exists(), "the temporary state directory is removed");
}

#[test]
fn a_panicking_test_stops_every_process() {
    test_cluster::install_crypto_provider();
    let (tx, rx) = std::sync::mpsc::channel();
    let result = std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let cp = rt
            .block_on(
                ControlPlane::builder()
                    .cluster(ClusterSpec::new("panicky"))
                    .start(),
            )
            .unwrap();
        tx.send(cp.pids()).unwrap();
        panic!("a test failing while it holds the control plane");
    })
    .join();
    assert!(result.is_err());
    let pids = rx.recv().unwrap();
    assert_eq!(pids.len(), 2);
    for p in &pids {
        assert!(!alive(*p), "pid {p} survived the panic");
    }
}

#[tokio::test]
async fn a_cluster_name_that_is_not_a_dns_label_is_refused_before_anything_starts() {
    let err = ControlPlane::builder()
        .cluster(ClusterSpec::new("Not_A_Label"))
        .start()
        .await
        .err()
        .expect("refused");
    assert!(err.to_string().contains("Not_A_Label"), "{err}");
    let err = ControlPlane::builder()
        .cluster(ClusterSpec::new("twice"))
        .cluster(ClusterSpec::new("twice"))
        .start()
        .await
        .err()
        .expect("refused");
    assert!(err.to_string().contains("named twice"), "{err}");
}
