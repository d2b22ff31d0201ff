//! kubectl helpers shared by the resource proxy's cluster test binaries (`e2e`, `on_node`):
//! every one takes the cluster it works on.

use test_cluster::Cluster;

/// Creates a namespace in a cluster (admin) and returns its name.
pub async fn namespace(cluster: &Cluster, prefix: &str) -> String {
    let ns = test_cluster::unique_name(prefix);
    cluster
        .kubectl_ok(&["create", "namespace", &ns])
        .await
        .unwrap();
    ns
}

/// Runs kubectl against `cluster`; panics with stderr on failure.
pub async fn kubectl(cluster: &Cluster, args: &[&str]) -> String {
    cluster
        .kubectl_ok(args)
        .await
        .unwrap_or_else(|e| panic!("kubectl {}: {e}", args.join(" ")))
}

/// Runs kubectl expecting failure; returns stderr.
pub async fn kubectl_err(cluster: &Cluster, args: &[&str]) -> String {
    match cluster.kubectl_ok(args).await {
        Ok(out) => panic!("kubectl {} succeeded unexpectedly: {out}", args.join(" ")),
        Err(e) => e.to_string(),
    }
}

/// kubectl with stdin.
pub async fn kubectl_in(cluster: &Cluster, args: &[&str], input: &str) -> String {
    cluster
        .kubectl_stdin(args, input)
        .await
        .unwrap_or_else(|e| panic!("kubectl {}: {e}", args.join(" ")))
}
