//! Building an image: one layer (the static binary, a CA bundle, `/etc/passwd` and
//! `/etc/group` with the non-root user), its config, manifest and SBOM artifact, written as an
//! OCI image layout and as a tar archive of that layout.
//!
//! Everything written is a function of [`ImageSpec`]: entries in a fixed order, every mtime the
//! spec's `created` (the commit's `SOURCE_DATE_EPOCH`), owner 0, fixed modes, JSON with keys in
//! a fixed order. Equal inputs give an equal manifest digest.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::digest::Descriptor;
use crate::tar::{self, Entry, Kind};

pub const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const CONFIG: &str = "application/vnd.oci.image.config.v1+json";
pub const LAYER: &str = "application/vnd.oci.image.layer.v1.tar";
pub const EMPTY: &str = "application/vnd.oci.empty.v1+json";
pub const SPDX: &str = "application/spdx+json";
/// The annotation of `index.json` that names an image (`name:tag`).
pub const REF_NAME: &str = "org.opencontainers.image.ref.name";
/// The non-root user every image runs as.
pub const USER: u32 = 65532;
/// Where the CA bundle is in the image (where Debian, Alpine and distroless put it).
pub const CA_PATH: &str = "etc/ssl/certs/ca-certificates.crt";

/// What an image is made of.
pub struct ImageSpec {
    /// The image's name without tag (`ghcr.io/kube-tenancy/tunnel-proxy`); its last path
    /// segment is the title.
    pub name: String,
    /// The tag, and `org.opencontainers.image.version`.
    pub version: String,
    /// The binary's name in the image (`/usr/local/bin/<binary>`) and its content.
    pub binary: String,
    pub binary_data: Vec<u8>,
    pub ca_bundle: Vec<u8>,
    /// Seconds since the epoch: every mtime and `created`.
    pub created: u64,
    /// `org.opencontainers.image.source`, `.revision`, `.licenses`.
    pub source: String,
    pub revision: String,
    pub licenses: String,
    /// The SPDX document of the binary.
    pub sbom: Value,
}

/// What was written.
#[derive(Debug, Clone)]
pub struct Built {
    /// The image manifest's digest (the image's identity).
    pub digest: String,
    /// `name:tag`.
    pub reference: String,
    pub layout: PathBuf,
    pub archive: PathBuf,
}

/// A layout's content before it is written: blobs by digest, and `index.json`.
struct Layout {
    blobs: BTreeMap<String, Vec<u8>>,
    index: Vec<u8>,
    digest: String,
}

/// Writes the image as the layout directory `out/<title>` (replaced) and the archive
/// `out/<title>.tar`.
pub fn build(spec: &ImageSpec, out: &Path) -> io::Result<Built> {
    let layout = assemble(spec)?;
    let title = title(&spec.name);
    let dir = out.join(title);
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    let blobs = dir.join("blobs").join("sha256");
    std::fs::create_dir_all(&blobs)?;
    std::fs::write(dir.join("oci-layout"), OCI_LAYOUT)?;
    std::fs::write(dir.join("index.json"), &layout.index)?;
    for (digest, data) in &layout.blobs {
        std::fs::write(blobs.join(hex_of(digest)), data)?;
    }
    let archive = out.join(format!("{title}.tar"));
    let mut entries = vec![dir_entry("blobs"), dir_entry("blobs/sha256")];
    for (digest, data) in layout.blobs {
        entries.push(file(
            &format!("blobs/sha256/{}", hex_of(&digest)),
            0o644,
            data,
        ));
    }
    entries.push(file("index.json", 0o644, layout.index));
    entries.push(file("oci-layout", 0o644, OCI_LAYOUT.as_bytes().to_vec()));
    let mut bytes = Vec::new();
    tar::write(&mut bytes, &entries, spec.created).map_err(io::Error::other)?;
    std::fs::write(&archive, bytes)?;
    Ok(Built {
        digest: layout.digest,
        reference: reference(spec),
        layout: dir,
        archive,
    })
}

const OCI_LAYOUT: &str = "{\"imageLayoutVersion\":\"1.0.0\"}";

fn title(name: &str) -> &str {
    name.rsplit('/').next().unwrap_or(name)
}

fn reference(spec: &ImageSpec) -> String {
    format!("{}:{}", spec.name, spec.version)
}

fn hex_of(digest: &str) -> &str {
    digest.trim_start_matches("sha256:")
}

fn assemble(spec: &ImageSpec) -> io::Result<Layout> {
    let created = rfc3339(spec.created);
    let mut blobs = BTreeMap::new();
    let mut add = |media_type: &str, data: Vec<u8>| {
        let descriptor = Descriptor::of(media_type, &data);
        blobs.insert(descriptor.digest.clone(), data);
        descriptor
    };

    let mut layer = Vec::new();
    tar::write(&mut layer, &root_entries(spec), spec.created).map_err(io::Error::other)?;
    let layer = add(LAYER, layer);

    let annotations: BTreeMap<String, String> = [
        ("created", created.clone()),
        ("licenses", spec.licenses.clone()),
        ("revision", spec.revision.clone()),
        ("source", spec.source.clone()),
        ("title", title(&spec.name).to_owned()),
        ("version", spec.version.clone()),
    ]
    .into_iter()
    .map(|(k, v)| (format!("org.opencontainers.image.{k}"), v))
    .collect();
    let config = json!({
        "created": created,
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "User": format!("{USER}:{USER}"),
            "Entrypoint": [format!("/usr/local/bin/{}", spec.binary)],
            "Env": [
                "PATH=/usr/local/bin",
                format!("SSL_CERT_FILE=/{CA_PATH}"),
            ],
            "WorkingDir": "/",
            "Labels": annotations,
        },
        "rootfs": {"type": "layers", "diff_ids": [layer.digest]},
        "history": [{"created": created, "created_by": "oci-image build (static binary, CA bundle, passwd)"}],
    });
    let config = add(CONFIG, to_vec(&config));
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": config,
        "layers": [layer],
        "annotations": annotations,
    });
    let mut manifest = add(MANIFEST, to_vec(&manifest));

    let empty = add(EMPTY, b"{}".to_vec());
    let sbom = add(SPDX, to_vec(&spec.sbom));
    let sbom_manifest = json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "artifactType": SPDX,
        "config": empty,
        "layers": [sbom],
        "subject": manifest,
        "annotations": {"org.opencontainers.image.created": created},
    });
    let mut sbom_manifest = add(MANIFEST, to_vec(&sbom_manifest));
    sbom_manifest.artifact_type = Some(SPDX.to_owned());

    let digest = manifest.digest.clone();
    manifest
        .annotations
        .insert(REF_NAME.to_owned(), reference(spec));
    let index = json!({
        "schemaVersion": 2,
        "mediaType": INDEX,
        "manifests": [manifest, sbom_manifest],
    });
    Ok(Layout {
        blobs,
        index: to_vec(&index),
        digest,
    })
}

/// The image's one layer, parents before children.
fn root_entries(spec: &ImageSpec) -> Vec<Entry> {
    let passwd = format!(
        "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:{USER}:{USER}:nonroot:/home/nonroot:/sbin/nologin\n"
    );
    let group = format!("root:x:0:\nnonroot:x:{USER}:\n");
    vec![
        dir_entry("etc"),
        file("etc/group", 0o644, group.into_bytes()),
        file("etc/passwd", 0o644, passwd.into_bytes()),
        dir_entry("etc/ssl"),
        dir_entry("etc/ssl/certs"),
        file(CA_PATH, 0o644, spec.ca_bundle.clone()),
        dir_entry("usr"),
        dir_entry("usr/local"),
        dir_entry("usr/local/bin"),
        file(
            &format!("usr/local/bin/{}", spec.binary),
            0o755,
            spec.binary_data.clone(),
        ),
    ]
}

fn dir_entry(path: &str) -> Entry {
    Entry {
        path: path.to_owned(),
        mode: 0o755,
        kind: Kind::Dir,
    }
}

fn file(path: &str, mode: u32, data: Vec<u8>) -> Entry {
    Entry {
        path: path.to_owned(),
        mode,
        kind: Kind::File(data),
    }
}

fn to_vec(value: &impl serde::Serialize) -> Vec<u8> {
    serde_json::to_vec(value).expect("JSON values serialise")
}

/// Seconds since the epoch as RFC 3339 UTC (`2026-01-02T03:04:05Z`).
pub fn rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339_utc() {
        for (secs, want) in [
            (0, "1970-01-01T00:00:00Z"),
            (951_782_400, "2000-02-29T00:00:00Z"),
            (1_796_212_072, "2026-12-02T11:47:52Z"),
        ] {
            assert_eq!(rfc3339(secs), want);
        }
    }
}
