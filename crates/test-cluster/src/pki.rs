//! The certificates and keys of one cluster, generated in Rust with rcgen.
//!
//! Each cluster gets its own authorities, so a credential minted for one cluster is worthless
//! against another (tenants are adversaries; the tests rely on it):
//! - the cluster CA signs the API server's serving certificate and every client certificate
//!   (`--client-ca-file`);
//! - the front-proxy CA signs the aggregator's client certificate (`--requestheader-client-ca-file`);
//! - an ECDSA service-account key pair signs and verifies service-account tokens.
//!
//! Everything is written as PEM files into the cluster's directory, because kube-apiserver
//! takes file paths.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};

use crate::Error;

/// The CN the aggregator's client certificate carries; it is the allowed name the API server
/// publishes in `extension-apiserver-authentication`.
pub const FRONT_PROXY_CLIENT_CN: &str = "front-proxy-client";
/// The admin user of every harness cluster (member of `system:masters`).
pub const ADMIN_USER: &str = "kube-tenancy-admin";

/// A certificate and its private key, both PEM.
#[derive(Clone, Debug)]
pub struct CertKey {
    pub cert_pem: String,
    pub key_pem: String,
}

/// A certificate authority that can sign leaf certificates.
pub struct Authority {
    issuer: Issuer<'static, KeyPair>,
    cert_pem: String,
}

impl Authority {
    /// A new self-signed authority (e.g. for a test server's own serving certificates).
    pub fn generate(common_name: &str) -> Result<Self, Error> {
        let mut params = CertificateParams::default();
        params.distinguished_name = dn(common_name, &[]);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        params.not_before = validity_start();
        params.not_after = validity_end();
        let key = KeyPair::generate().map_err(pki_err)?;
        let cert_pem = params.self_signed(&key).map_err(pki_err)?.pem();
        Ok(Self {
            issuer: Issuer::new(params, key),
            cert_pem,
        })
    }

    /// Loads an authority from its PEM files (so other processes can mint certificates too).
    pub fn load(cert_pem: &str, key_pem: &str) -> Result<Self, Error> {
        let key = KeyPair::from_pem(key_pem).map_err(pki_err)?;
        let issuer = Issuer::from_ca_cert_pem(cert_pem, key).map_err(pki_err)?;
        Ok(Self {
            issuer,
            cert_pem: cert_pem.to_owned(),
        })
    }

    /// The authority's certificate as PEM.
    pub fn cert_pem(&self) -> String {
        self.cert_pem.clone()
    }

    fn key_pem(&self) -> String {
        self.issuer.key().serialize_pem()
    }

    /// A client certificate for `user` in `groups` (CN = user, O = each group), the way
    /// Kubernetes maps x509 subjects to identities. At most two groups: rcgen keeps one
    /// attribute per type, and the second O is encoded under its raw OID. A user with more
    /// groups is reached through impersonation ([`crate::Cluster::client_as`]).
    pub fn client_cert(&self, user: &str, groups: &[&str]) -> Result<CertKey, Error> {
        if groups.len() > 2 {
            return Err(Error::Pki(format!(
                "a client certificate carries at most two groups, {user} was given {}; use impersonation",
                groups.len()
            )));
        }
        let mut params = CertificateParams::default();
        params.distinguished_name = dn(user, groups);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        self.sign(params)
    }

    /// A serving certificate for the given DNS names and IP addresses.
    pub fn serving_cert(&self, dns_names: &[&str], ips: &[IpAddr]) -> Result<CertKey, Error> {
        let mut params = CertificateParams::default();
        params.distinguished_name = dn(dns_names.first().copied().unwrap_or("localhost"), &[]);
        params.subject_alt_names = dns_names
            .iter()
            .map(|n| Ok(SanType::DnsName((*n).try_into().map_err(pki_err)?)))
            .chain(ips.iter().map(|ip| Ok(SanType::IpAddress(*ip))))
            .collect::<Result<_, Error>>()?;
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        self.sign(params)
    }

    fn sign(&self, mut params: CertificateParams) -> Result<CertKey, Error> {
        params.not_before = validity_start();
        params.not_after = validity_end();
        let key = KeyPair::generate().map_err(pki_err)?;
        let cert = params.signed_by(&key, &self.issuer).map_err(pki_err)?;
        Ok(CertKey {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// All PKI files of one cluster, on disk.
pub struct ClusterPki {
    pub dir: PathBuf,
    pub ca: Authority,
    pub front_proxy_ca: Authority,
}

/// Paths of the files kube-apiserver and the clients read.
pub struct PkiFiles {
    pub ca_cert: PathBuf,
    pub ca_key: PathBuf,
    pub front_proxy_ca_cert: PathBuf,
    pub front_proxy_ca_key: PathBuf,
    pub serving_cert: PathBuf,
    pub serving_key: PathBuf,
    pub front_proxy_client_cert: PathBuf,
    pub front_proxy_client_key: PathBuf,
    pub admin_cert: PathBuf,
    pub admin_key: PathBuf,
    pub sa_public: PathBuf,
    pub sa_private: PathBuf,
}

impl PkiFiles {
    fn in_dir(dir: &Path) -> Self {
        let p = |n: &str| dir.join(n);
        Self {
            ca_cert: p("ca.crt"),
            ca_key: p("ca.key"),
            front_proxy_ca_cert: p("front-proxy-ca.crt"),
            front_proxy_ca_key: p("front-proxy-ca.key"),
            serving_cert: p("apiserver.crt"),
            serving_key: p("apiserver.key"),
            front_proxy_client_cert: p("front-proxy-client.crt"),
            front_proxy_client_key: p("front-proxy-client.key"),
            admin_cert: p("admin.crt"),
            admin_key: p("admin.key"),
            sa_public: p("sa.pub"),
            sa_private: p("sa.key"),
        }
    }
}

impl ClusterPki {
    /// Generates a fresh PKI for one cluster and writes it into `dir`.
    pub fn generate(dir: &Path) -> Result<Self, Error> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let ca = Authority::generate("kube-tenancy-ca")?;
        let front_proxy_ca = Authority::generate("kube-tenancy-front-proxy-ca")?;
        let files = PkiFiles::in_dir(dir);

        let serving = ca.serving_cert(
            &[
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ],
            &[
                "127.0.0.1".parse().expect("literal"),
                "::1".parse().expect("literal"),
                // Where a node's Pods reach the API (`World::expose` in the node's namespace).
                std::net::IpAddr::V4(crate::netns::GATEWAY),
            ],
        )?;
        let front_proxy_client = front_proxy_ca.client_cert(FRONT_PROXY_CLIENT_CN, &[])?;
        let admin = ca.client_cert(ADMIN_USER, &["system:masters"])?;
        let sa = KeyPair::generate().map_err(pki_err)?;

        write(&files.ca_cert, &ca.cert_pem())?;
        write(&files.ca_key, &ca.key_pem())?;
        write(&files.front_proxy_ca_cert, &front_proxy_ca.cert_pem())?;
        write(&files.front_proxy_ca_key, &front_proxy_ca.key_pem())?;
        write(&files.serving_cert, &serving.cert_pem)?;
        write(&files.serving_key, &serving.key_pem)?;
        write(&files.front_proxy_client_cert, &front_proxy_client.cert_pem)?;
        write(&files.front_proxy_client_key, &front_proxy_client.key_pem)?;
        write(&files.admin_cert, &admin.cert_pem)?;
        write(&files.admin_key, &admin.key_pem)?;
        write(&files.sa_public, &sa.public_key_pem())?;
        write(&files.sa_private, &sa.serialize_pem())?;

        Ok(Self {
            dir: dir.to_owned(),
            ca,
            front_proxy_ca,
        })
    }

    /// Loads a PKI written earlier by [`ClusterPki::generate`].
    pub fn load(dir: &Path) -> Result<Self, Error> {
        let files = PkiFiles::in_dir(dir);
        let ca = Authority::load(&read(&files.ca_cert)?, &read(&files.ca_key)?)?;
        let front_proxy_ca = Authority::load(
            &read(&files.front_proxy_ca_cert)?,
            &read(&files.front_proxy_ca_key)?,
        )?;
        Ok(Self {
            dir: dir.to_owned(),
            ca,
            front_proxy_ca,
        })
    }

    /// The file paths of this PKI.
    pub fn files(&self) -> PkiFiles {
        PkiFiles::in_dir(&self.dir)
    }

    /// The admin client certificate (`system:masters`).
    pub fn admin(&self) -> Result<CertKey, Error> {
        let f = self.files();
        Ok(CertKey {
            cert_pem: read(&f.admin_cert)?,
            key_pem: read(&f.admin_key)?,
        })
    }

    /// The aggregator's client certificate (signed by the front-proxy CA).
    pub fn front_proxy_client(&self) -> Result<CertKey, Error> {
        let f = self.files();
        Ok(CertKey {
            cert_pem: read(&f.front_proxy_client_cert)?,
            key_pem: read(&f.front_proxy_client_key)?,
        })
    }
}

fn dn(common_name: &str, organizations: &[&str]) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    let organization_types = [
        DnType::OrganizationName,
        DnType::CustomDnType(vec![2, 5, 4, 10]),
    ];
    for (ty, o) in organization_types.into_iter().zip(organizations) {
        dn.push(ty, *o);
    }
    dn.push(DnType::CommonName, common_name);
    dn
}

fn validity_start() -> time::OffsetDateTime {
    // Backdated so that clock skew between processes never makes a fresh certificate "not yet valid".
    time::OffsetDateTime::now_utc() - time::Duration::hours(1)
}

fn validity_end() -> time::OffsetDateTime {
    time::OffsetDateTime::now_utc() + time::Duration::days(365)
}

fn write(path: &Path, contents: &str) -> Result<(), Error> {
    std::fs::write(path, contents).map_err(|e| Error::io(path, e))
}

fn read(path: &Path) -> Result<String, Error> {
    std::fs::read_to_string(path).map_err(|e| Error::io(path, e))
}

fn pki_err(e: rcgen::Error) -> Error {
    Error::Pki(e.to_string())
}
