//! Kubeconfig files (for kubectl and people) and `kube::Client`s (for tests) of one identity.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::Error;
use crate::pki::CertKey;

/// Renders a kubeconfig with everything embedded (no file references), so it can be copied.
pub fn render(cluster: &str, server: &str, ca_pem: &str, user: &str, cred: &CertKey) -> String {
    let b64 = |s: &str| STANDARD.encode(s.as_bytes());
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: {cluster}
  cluster:
    server: {server}
    certificate-authority-data: {ca}
users:
- name: {user}
  user:
    client-certificate-data: {cert}
    client-key-data: {key}
contexts:
- name: {cluster}
  context:
    cluster: {cluster}
    user: {user}
current-context: {cluster}
",
        ca = b64(ca_pem),
        cert = b64(&cred.cert_pem),
        key = b64(&cred.key_pem),
    )
}

/// A `kube::Config` from kubeconfig text.
pub async fn config_from_yaml(yaml: &str) -> Result<kube::Config, Error> {
    let kc = Kubeconfig::from_yaml(yaml).map_err(|e| Error::Kubeconfig(e.to_string()))?;
    kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| Error::Kubeconfig(e.to_string()))
}

/// A `kube::Client` from kubeconfig text.
pub async fn client_from_yaml(yaml: &str) -> Result<kube::Client, Error> {
    let config = config_from_yaml(yaml).await?;
    kube::Client::try_from(config).map_err(Error::Kube)
}
