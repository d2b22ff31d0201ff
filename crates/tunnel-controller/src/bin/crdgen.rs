//! Prints the CRDs of the tunnel gateway's own resources (the content of
//! `charts/tunnel-gateway/crds/crds.yaml`; `scripts/render-deploy.sh` copies it to `deploy/`).

fn main() {
    print!("{}", tunnel_controller::api::crds_yaml());
}
