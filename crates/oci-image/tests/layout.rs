//! The image builder and the store without a cluster: the same inputs give the same digest and
//! the same archive bytes; the layout holds the image (annotations, non-root user, entrypoint),
//! its SBOM as an artifact referring to it, and nothing else in its root; a tampered blob is
//! refused; the SBOM of the workspace's tunnel-proxy lists what it links, with Cargo.lock's
//! versions and checksums, and not what it does not.

use std::collections::BTreeSet;
use std::path::Path;

use oci_image::image::{self, ImageSpec, REF_NAME, SPDX};
use oci_image::sbom;
use oci_image::store::{Store, StoreError};
use serde_json::{Value, json};

fn spec(created: u64) -> ImageSpec {
    ImageSpec {
        name: "ghcr.io/kube-tenancy/tunnel-proxy".into(),
        version: "0.1.0".into(),
        binary: "tunnel-proxy".into(),
        binary_data: b"\x7fELF not really a binary".to_vec(),
        ca_bundle: b"-----BEGIN CERTIFICATE-----\n".to_vec(),
        created,
        source: "https://github.com/kube-tenancy/kube-tenancy".into(),
        revision: "0123456789abcdef".into(),
        licenses: "Apache-2.0".into(),
        sbom: json!({"spdxVersion": "SPDX-2.3", "packages": []}),
    }
}

fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn blob(layout: &Path, digest: &str) -> Vec<u8> {
    std::fs::read(
        layout
            .join("blobs/sha256")
            .join(digest.trim_start_matches("sha256:")),
    )
    .unwrap()
}

#[test]
fn the_same_inputs_give_the_same_digest_and_bytes() {
    let (a, b, c) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let first = image::build(&spec(1_700_000_000), a.path()).unwrap();
    let second = image::build(&spec(1_700_000_000), b.path()).unwrap();
    assert_eq!(first.digest, second.digest);
    assert_eq!(
        std::fs::read(&first.archive).unwrap(),
        std::fs::read(&second.archive).unwrap(),
        "the archives differ byte for byte"
    );
    let later = image::build(&spec(1_700_000_001), c.path()).unwrap();
    assert_ne!(
        first.digest, later.digest,
        "the timestamp is part of the image"
    );
}

#[test]
fn the_layout_holds_the_image_and_its_sbom() {
    let out = tempfile::tempdir().unwrap();
    let built = image::build(&spec(1_700_000_000), out.path()).unwrap();
    assert_eq!(built.reference, "ghcr.io/kube-tenancy/tunnel-proxy:0.1.0");
    assert_eq!(built.layout, out.path().join("tunnel-proxy"));
    let index = read_json(&built.layout.join("index.json"));
    let manifests = index["manifests"].as_array().unwrap();
    assert_eq!(manifests.len(), 2, "{index}");
    assert_eq!(manifests[0]["digest"], built.digest.as_str());
    assert_eq!(
        manifests[0]["annotations"][REF_NAME],
        built.reference.as_str()
    );

    let manifest: Value = serde_json::from_slice(&blob(&built.layout, &built.digest)).unwrap();
    let annotations = &manifest["annotations"];
    for (key, want) in [
        ("source", "https://github.com/kube-tenancy/kube-tenancy"),
        ("revision", "0123456789abcdef"),
        ("version", "0.1.0"),
        ("licenses", "Apache-2.0"),
        ("created", "2023-11-14T22:13:20Z"),
        ("title", "tunnel-proxy"),
    ] {
        assert_eq!(
            annotations[format!("org.opencontainers.image.{key}")],
            want,
            "{key}"
        );
    }
    let config: Value = serde_json::from_slice(&blob(
        &built.layout,
        manifest["config"]["digest"].as_str().unwrap(),
    ))
    .unwrap();
    assert_eq!(config["config"]["User"], "65532:65532");
    assert_eq!(
        config["config"]["Entrypoint"],
        json!(["/usr/local/bin/tunnel-proxy"])
    );
    assert_eq!(config["os"], "linux");

    // The SBOM: an artifact whose subject is the image, its layer the SPDX document.
    assert_eq!(manifests[1]["artifactType"], SPDX);
    let artifact: Value = serde_json::from_slice(&blob(
        &built.layout,
        manifests[1]["digest"].as_str().unwrap(),
    ))
    .unwrap();
    assert_eq!(artifact["subject"]["digest"], built.digest.as_str());
    let document = blob(
        &built.layout,
        artifact["layers"][0]["digest"].as_str().unwrap(),
    );
    assert_eq!(
        serde_json::from_slice::<Value>(&document).unwrap()["spdxVersion"],
        "SPDX-2.3"
    );

    // Unpacked: the binary, the CA bundle, passwd and group, and nothing else.
    let store = Store::open(out.path()).unwrap();
    let stored = store
        .get(&built.reference)
        .expect("the store finds the reference");
    let root = out.path().join("root");
    let run = stored.unpack(&root).unwrap();
    assert_eq!(run.ids().unwrap(), Some((65532, 65532)));
    let mut files = BTreeSet::new();
    walk(&root, &root, &mut files);
    let want: BTreeSet<String> = [
        "etc/",
        "etc/group",
        "etc/passwd",
        "etc/ssl/",
        "etc/ssl/certs/",
        "etc/ssl/certs/ca-certificates.crt",
        "usr/",
        "usr/local/",
        "usr/local/bin/",
        "usr/local/bin/tunnel-proxy",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(files, want);
    let passwd = std::fs::read_to_string(root.join("etc/passwd")).unwrap();
    assert!(passwd.contains("nonroot:x:65532:65532:"), "{passwd}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(root.join("usr/local/bin/tunnel-proxy"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o755);
}

fn walk(root: &Path, dir: &Path, out: &mut BTreeSet<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let rel = path
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        if path.is_dir() {
            out.insert(format!("{rel}/"));
            walk(root, &path, out);
        } else {
            out.insert(rel);
        }
    }
}

#[test]
fn a_tampered_blob_is_refused() {
    let out = tempfile::tempdir().unwrap();
    let built = image::build(&spec(1_700_000_000), out.path()).unwrap();
    let manifest: Value = serde_json::from_slice(&blob(&built.layout, &built.digest)).unwrap();
    let layer = manifest["layers"][0]["digest"].as_str().unwrap();
    let path = built
        .layout
        .join("blobs/sha256")
        .join(layer.trim_start_matches("sha256:"));
    let mut data = std::fs::read(&path).unwrap();
    let at = data.len() - 2000;
    data[at] ^= 1;
    std::fs::write(&path, data).unwrap();
    let store = Store::open(out.path()).unwrap();
    let root = out.path().join("root");
    let err = store
        .get(&built.reference)
        .unwrap()
        .unpack(&root)
        .unwrap_err();
    assert!(
        matches!(&err, StoreError::Digest { digest, .. } if digest == layer),
        "{err}"
    );
    assert!(
        !root.join("usr").exists(),
        "nothing of a tampered layer is unpacked"
    );
}

/// The real workspace: tunnel-proxy links hyper (at Cargo.lock's version, with its checksum) and
/// its workspace dependencies, not the Kubernetes client or the controller.
#[test]
fn the_sbom_lists_what_the_binary_links() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--locked", "--offline"])
        .args([
            "--filter-platform",
            "x86_64-unknown-linux-musl",
            "--manifest-path",
        ])
        .arg(root.join("Cargo.toml"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lock = std::fs::read_to_string(root.join("Cargo.lock")).unwrap();
    let components = sbom::closure(
        std::str::from_utf8(&out.stdout).unwrap(),
        &lock,
        "tunnel-proxy",
    )
    .unwrap();
    assert_eq!(components[0].name, "tunnel-proxy");
    let find = |name: &str| components.iter().find(|c| c.name == name);
    let hyper = find("hyper").expect("hyper is linked into tunnel-proxy");
    let block = lock
        .split("[[package]]")
        .find(|b| b.contains("\nname = \"hyper\"\n"))
        .unwrap();
    assert!(
        block.contains(&format!("\nversion = \"{}\"\n", hyper.version)),
        "{block}"
    );
    let sum = hyper
        .checksum
        .as_deref()
        .expect("a checksum from Cargo.lock");
    assert!(block.contains(&format!("checksum = \"{sum}\"")), "{block}");
    assert!(find("http1-wire").is_some() && find("tunnel-config").is_some());
    for absent in [
        "tunnel-controller",
        "kube-client",
        "kube-support",
        "test-cluster",
        "oci-image",
    ] {
        assert!(
            find(absent).is_none(),
            "{absent} is not linked into tunnel-proxy"
        );
    }
    // Build-time only: proc macros (serde_derive) are not listed.
    assert!(find("serde_derive").is_none());
    let document = sbom::spdx(
        &components,
        "tunnel-proxy:0.1.0",
        "https://example.invalid/sbom",
        "2026-01-01T00:00:00Z",
    );
    let names: Vec<&str> = document["packages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert!(names.contains(&"hyper"));
}
