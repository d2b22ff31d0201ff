//! Prints the CRDs of the tunnel gateway's own resources (the content of
//! `deploy/tunnel-gateway/crds.yaml`).

fn main() {
    print!("{}", tunnel_controller::api::crds_yaml());
}
