//! The images `make images-test` built (target/images/test, or `KT_TEST_IMAGES`): each unpacks
//! from its layout with every blob verified, holds nothing but the binary, the CA bundle and
//! passwd/group, and its binary runs `--version` chrooted in that root as the non-root user
//! (so it is static: the root has no libc). Its archive holds the same layout, and its SBOM
//! lists what the binary links. Needs root (chroot) and the images, so it runs in `make test`.

use std::path::{Path, PathBuf};
use std::process::Command;

use oci_image::store::Store;
use serde_json::Value;

const IMAGES: [(&str, &str); 3] = [
    ("tunnel-gateway-controller", "tunnel-controller"),
    ("tunnel-proxy", "tunnel-proxy"),
    ("resource-proxy", "resource-proxy"),
];

fn images_dir() -> PathBuf {
    let dir = std::env::var_os("KT_TEST_IMAGES").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/images/test"),
        PathBuf::from,
    );
    assert!(
        dir.join("tunnel-proxy/index.json").is_file(),
        "{} holds no images: run `make images-test` first",
        dir.display()
    );
    dir
}

#[test]
fn each_image_unpacks_and_its_binary_runs_as_the_non_root_user() {
    let dir = images_dir();
    let store = Store::open(&dir).unwrap();
    for (image, package) in IMAGES {
        let reference = format!("ghcr.io/kube-tenancy/{image}:0.1.0");
        let stored = store
            .get(&reference)
            .unwrap_or_else(|| panic!("{reference} is not in {}", dir.display()));
        let work = tempfile::tempdir().unwrap();
        let root = work.path().join("root");
        let config = stored.unpack(&root).unwrap();
        assert_eq!(config.user.as_deref(), Some("65532:65532"));
        let entrypoint = config.entrypoint.clone().unwrap();
        assert_eq!(entrypoint, [format!("/usr/local/bin/{image}")]);
        assert!(
            !root.join("lib").exists() && !root.join("bin").exists(),
            "no libc, no shell"
        );

        // coreutils' chroot switches to the user after chroot(2), as the node agent does.
        let out = Command::new("/usr/sbin/chroot")
            .arg("--userspec=65532:65532")
            .arg(&root)
            .arg(&entrypoint[0])
            .arg("--version")
            .env_clear()
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{image} --version: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let version = String::from_utf8_lossy(&out.stdout);
        assert_eq!(version.trim(), format!("{image} 0.1.0"));

        // The archive is the layout: unpacked, it yields the same image.
        let archive = std::fs::read(dir.join(format!("{image}.tar"))).unwrap();
        let entries = oci_image::tar::read(&mut archive.as_slice()).unwrap();
        let index = entries.iter().find(|e| e.path == "index.json").unwrap();
        let oci_image::tar::Kind::File(index_data) = &index.kind else {
            panic!("index.json is not a file");
        };
        assert_eq!(
            index_data,
            &std::fs::read(dir.join(image).join("index.json")).unwrap()
        );
        let manifest_path = format!(
            "blobs/sha256/{}",
            stored.digest.trim_start_matches("sha256:")
        );
        assert!(
            entries.iter().any(|e| e.path == manifest_path),
            "{manifest_path} in {image}.tar"
        );

        // The SBOM beside the image: the binary's package first, with its dependencies.
        let sbom: Value =
            serde_json::from_slice(&std::fs::read(dir.join(format!("{image}.spdx.json"))).unwrap())
                .unwrap();
        let names: Vec<&str> = sbom["packages"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| p["name"].as_str())
            .collect();
        assert_eq!(names[0], package);
        assert!(names.contains(&"tokio"), "{image}: {names:?}");
        if image == "tunnel-proxy" {
            assert!(!names.contains(&"kube-client"), "{names:?}");
        }
    }
}
