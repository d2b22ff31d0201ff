//! The SBOM of a binary: SPDX 2.3 JSON listing the packages linked into it.
//!
//! The closure is taken from `cargo metadata` resolved for the image's target
//! (`--filter-platform`): from the binary's package along normal dependencies only, without
//! build dependencies, dev dependencies and proc-macro crates (they run at build time and are
//! not linked). `cargo metadata` unifies features over the whole workspace, so an optional
//! dependency another member enables may be listed although this binary does not link it.
//! Versions come from the metadata, SHA-256 checksums from `Cargo.lock`.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;
use serde_json::{Value, json};

/// Why the SBOM could not be made.
#[derive(Debug, thiserror::Error)]
pub enum SbomError {
    #[error("cargo metadata output: {0}")]
    Metadata(#[from] serde_json::Error),
    #[error("cargo metadata has no resolve graph (was it run with --no-deps?)")]
    NoResolve,
    #[error("no workspace package named {0:?}")]
    NoPackage(String),
}

#[derive(Deserialize)]
struct Metadata {
    packages: Vec<Package>,
    resolve: Option<Resolve>,
}

#[derive(Deserialize)]
struct Package {
    id: String,
    name: String,
    version: String,
    license: Option<String>,
    source: Option<String>,
    targets: Vec<Target>,
}

#[derive(Deserialize)]
struct Target {
    kind: Vec<String>,
}

#[derive(Deserialize)]
struct Resolve {
    nodes: Vec<Node>,
}

#[derive(Deserialize)]
struct Node {
    id: String,
    deps: Vec<NodeDep>,
}

#[derive(Deserialize)]
struct NodeDep {
    pkg: String,
    dep_kinds: Vec<DepKind>,
}

#[derive(Deserialize)]
struct DepKind {
    kind: Option<String>,
}

/// One package of a binary's closure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Component {
    pub name: String,
    pub version: String,
    /// The SPDX license expression (`NOASSERTION` when the package declares none).
    pub license: String,
    /// From crates.io (else a path or git dependency).
    pub registry: bool,
    /// SHA-256 of the `.crate` file, from `Cargo.lock`.
    pub checksum: Option<String>,
}

/// The packages `package` links, itself first, then by name and version. `metadata` is the
/// output of `cargo metadata --format-version 1 --filter-platform <target>`, `lock` the text of
/// `Cargo.lock`.
pub fn closure(metadata: &str, lock: &str, package: &str) -> Result<Vec<Component>, SbomError> {
    let metadata: Metadata = serde_json::from_str(metadata)?;
    let resolve = metadata.resolve.ok_or(SbomError::NoResolve)?;
    let packages: BTreeMap<&str, &Package> = metadata
        .packages
        .iter()
        .map(|p| (p.id.as_str(), p))
        .collect();
    let root = metadata
        .packages
        .iter()
        .find(|p| p.name == package && p.source.is_none())
        .ok_or_else(|| SbomError::NoPackage(package.to_owned()))?;
    let nodes: BTreeMap<&str, &Node> = resolve.nodes.iter().map(|n| (n.id.as_str(), n)).collect();
    let proc_macro = |id: &str| {
        packages.get(id).is_some_and(|p| {
            p.targets
                .iter()
                .any(|t| t.kind.iter().any(|k| k == "proc-macro"))
        })
    };
    let mut seen = BTreeSet::from([root.id.as_str()]);
    let mut todo = vec![root.id.as_str()];
    while let Some(id) = todo.pop() {
        let Some(node) = nodes.get(id) else { continue };
        for dep in &node.deps {
            let linked = dep.dep_kinds.iter().any(|k| k.kind.is_none());
            if linked && !proc_macro(&dep.pkg) && seen.insert(dep.pkg.as_str()) {
                todo.push(dep.pkg.as_str());
            }
        }
    }
    let checksums = lock_checksums(lock);
    let component = |p: &Package| Component {
        name: p.name.clone(),
        version: p.version.clone(),
        license: p
            .license
            .as_deref()
            .map_or_else(|| "NOASSERTION".to_owned(), |l| l.replace('/', " OR ")),
        registry: p
            .source
            .as_deref()
            .is_some_and(|s| s.starts_with("registry+")),
        checksum: checksums.get(&(p.name.clone(), p.version.clone())).cloned(),
    };
    let mut rest: Vec<Component> = seen
        .iter()
        .filter(|id| **id != root.id)
        .filter_map(|id| packages.get(id).map(|p| component(p)))
        .collect();
    rest.sort_by(|a, b| (&a.name, &a.version).cmp(&(&b.name, &b.version)));
    let mut all = vec![component(root)];
    all.extend(rest);
    Ok(all)
}

/// (name, version) → checksum, from `Cargo.lock`'s `[[package]]` tables.
fn lock_checksums(lock: &str) -> BTreeMap<(String, String), String> {
    let mut out = BTreeMap::new();
    for block in lock.split("[[package]]") {
        let field = |key: &str| {
            block.lines().find_map(|l| {
                let (k, v) = l.split_once(" = ")?;
                (k.trim() == key).then(|| v.trim().trim_matches('"').to_owned())
            })
        };
        if let (Some(name), Some(version), Some(sum)) =
            (field("name"), field("version"), field("checksum"))
        {
            out.insert((name, version), sum);
        }
    }
    out
}

/// The SPDX 2.3 document of an image's binary: `components` (the binary's package first),
/// `name` the image reference, `namespace` a URI unique to this build, `created` RFC 3339.
pub fn spdx(components: &[Component], name: &str, namespace: &str, created: &str) -> Value {
    let id = |c: &Component| {
        let clean: String = format!("{}-{}", c.name, c.version)
            .chars()
            .map(|ch| {
                if ch.is_ascii_alphanumeric() || ch == '.' || ch == '-' {
                    ch
                } else {
                    '-'
                }
            })
            .collect();
        format!("SPDXRef-Package-{clean}")
    };
    let packages: Vec<Value> = components
        .iter()
        .map(|c| {
            let mut p = json!({
                "name": c.name,
                "SPDXID": id(c),
                "versionInfo": c.version,
                "downloadLocation": if c.registry {
                    format!("https://crates.io/api/v1/crates/{}/{}/download", c.name, c.version)
                } else {
                    "NOASSERTION".to_owned()
                },
                "filesAnalyzed": false,
                "licenseConcluded": "NOASSERTION",
                "licenseDeclared": c.license,
                "copyrightText": "NOASSERTION",
                "externalRefs": [{
                    "referenceCategory": "PACKAGE-MANAGER",
                    "referenceType": "purl",
                    "referenceLocator": format!("pkg:cargo/{}@{}", c.name, c.version),
                }],
            });
            if let Some(sum) = &c.checksum {
                p["checksums"] = json!([{"algorithm": "SHA256", "checksumValue": sum}]);
            }
            p
        })
        .collect();
    let mut relationships = Vec::new();
    if let Some((root, deps)) = components.split_first() {
        relationships.push(json!({
            "spdxElementId": "SPDXRef-DOCUMENT",
            "relationshipType": "DESCRIBES",
            "relatedSpdxElement": id(root),
        }));
        for dep in deps {
            relationships.push(json!({
                "spdxElementId": id(root),
                "relationshipType": "DEPENDS_ON",
                "relatedSpdxElement": id(dep),
            }));
        }
    }
    json!({
        "spdxVersion": "SPDX-2.3",
        "dataLicense": "CC0-1.0",
        "SPDXID": "SPDXRef-DOCUMENT",
        "name": name,
        "documentNamespace": namespace,
        "creationInfo": {"created": created, "creators": ["Tool: oci-image"]},
        "packages": packages,
        "relationships": relationships,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOCK: &str = r#"
[[package]]
name = "app"
version = "0.1.0"

[[package]]
name = "lib-a"
version = "1.2.3"
source = "registry+https://github.com/rust-lang/crates.io-index"
checksum = "aaaa"

[[package]]
name = "macro-m"
version = "0.1.0"
source = "registry+https://github.com/rust-lang/crates.io-index"
checksum = "mmmm"
"#;

    fn metadata() -> String {
        let reg = "registry+https://github.com/rust-lang/crates.io-index";
        json!({
            "packages": [
                {"id": "app", "name": "app", "version": "0.1.0", "license": "Apache-2.0", "source": null, "targets": [{"kind": ["bin"]}]},
                {"id": "a", "name": "lib-a", "version": "1.2.3", "license": "MIT/Apache-2.0", "source": reg, "targets": [{"kind": ["lib"]}]},
                {"id": "m", "name": "macro-m", "version": "0.1.0", "license": "MIT", "source": reg, "targets": [{"kind": ["proc-macro"]}]},
                {"id": "b", "name": "build-b", "version": "1.0.0", "license": "MIT", "source": reg, "targets": [{"kind": ["lib"]}]},
                {"id": "t", "name": "test-t", "version": "1.0.0", "license": "MIT", "source": reg, "targets": [{"kind": ["lib"]}]},
                {"id": "other", "name": "other", "version": "0.1.0", "license": null, "source": null, "targets": [{"kind": ["lib"]}]},
            ],
            "resolve": {"nodes": [
                {"id": "app", "deps": [
                    {"pkg": "a", "dep_kinds": [{"kind": null}]},
                    {"pkg": "m", "dep_kinds": [{"kind": null}]},
                    {"pkg": "b", "dep_kinds": [{"kind": "build"}]},
                    {"pkg": "t", "dep_kinds": [{"kind": "dev"}]},
                ]},
                {"id": "a", "deps": []},
                {"id": "m", "deps": [{"pkg": "other", "dep_kinds": [{"kind": null}]}]},
                {"id": "b", "deps": []},
                {"id": "t", "deps": []},
                {"id": "other", "deps": []},
            ]},
        })
        .to_string()
    }

    #[test]
    fn the_closure_follows_linked_dependencies_only() {
        let got = closure(&metadata(), LOCK, "app").unwrap();
        let names: Vec<&str> = got.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["app", "lib-a"]);
        assert_eq!(got[1].license, "MIT OR Apache-2.0");
        assert_eq!(got[1].checksum.as_deref(), Some("aaaa"));
        assert!(got[1].registry && !got[0].registry);
    }

    #[test]
    fn an_unknown_package_is_an_error() {
        let err = closure(&metadata(), LOCK, "nope").unwrap_err();
        assert!(matches!(err, SbomError::NoPackage(_)), "{err}");
    }

    #[test]
    fn the_spdx_document_describes_the_binary_and_its_dependencies() {
        let got = closure(&metadata(), LOCK, "app").unwrap();
        let doc = spdx(
            &got,
            "img:1",
            "https://example.invalid/x",
            "2026-01-01T00:00:00Z",
        );
        assert_eq!(doc["spdxVersion"], "SPDX-2.3");
        assert_eq!(doc["packages"][1]["checksums"][0]["checksumValue"], "aaaa");
        assert_eq!(
            doc["relationships"][0]["relatedSpdxElement"],
            "SPDXRef-Package-app-0.1.0"
        );
        assert_eq!(doc["relationships"][1]["relationshipType"], "DEPENDS_ON");
        assert_eq!(doc["relationships"].as_array().unwrap().len(), 2);
    }
}
