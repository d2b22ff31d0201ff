//! `oci-image`: builds one of the project's images from a static binary (`make images` runs it
//! per image; see docs/development.md), or unpacks an image from a directory of layouts.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use oci_image::image::{self, ImageSpec};
use oci_image::{sbom, store};

#[derive(Parser)]
#[command(
    name = "oci-image",
    version,
    about = "Builds and unpacks OCI image layouts"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Writes <out>/<title>/ (an OCI image layout), <out>/<title>.tar and
    /// <out>/<title>.spdx.json; prints the reference and the manifest digest.
    Build {
        /// The image name without tag; the tag is the package's version.
        #[arg(long)]
        name: String,
        /// The Cargo package whose binary this is (for the SBOM and the version).
        #[arg(long)]
        package: String,
        /// The static binary.
        #[arg(long)]
        binary: PathBuf,
        /// The target it was built for (the SBOM's dependency closure is resolved for it).
        #[arg(long, default_value = "x86_64-unknown-linux-musl")]
        target: String,
        #[arg(long, default_value = "/etc/ssl/certs/ca-certificates.crt")]
        ca_bundle: PathBuf,
        /// Seconds since the epoch for every timestamp (the commit's time).
        #[arg(long, env = "SOURCE_DATE_EPOCH")]
        created: u64,
        #[arg(long)]
        revision: String,
        #[arg(long, default_value = "https://github.com/kube-tenancy/kube-tenancy")]
        source: String,
        /// The workspace's Cargo.toml.
        #[arg(long, default_value = "Cargo.toml")]
        manifest_path: PathBuf,
        #[arg(long, default_value = "target/images")]
        out: PathBuf,
    },
    /// Verifies and unpacks the image `reference` of the layouts under `store` into `root`;
    /// prints its run config.
    Unpack {
        #[arg(long)]
        store: PathBuf,
        reference: String,
        root: PathBuf,
    },
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Cmd::Build {
            name,
            package,
            binary,
            target,
            ca_bundle,
            created,
            revision,
            source,
            manifest_path,
            out,
        } => {
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let metadata = Command::new(cargo)
                .args([
                    "metadata",
                    "--format-version",
                    "1",
                    "--locked",
                    "--filter-platform",
                ])
                .arg(&target)
                .arg("--manifest-path")
                .arg(&manifest_path)
                .output()
                .context("running cargo metadata")?;
            if !metadata.status.success() {
                bail!(
                    "cargo metadata failed: {}",
                    String::from_utf8_lossy(&metadata.stderr)
                );
            }
            let lock_path = manifest_path.with_file_name("Cargo.lock");
            let lock = std::fs::read_to_string(&lock_path)
                .with_context(|| format!("reading {}", lock_path.display()))?;
            let metadata = String::from_utf8(metadata.stdout).context("cargo metadata output")?;
            let components = sbom::closure(&metadata, &lock, &package)?;
            let root = &components[0];
            let reference = format!("{name}:{}", root.version);
            let created_text = image::rfc3339(created);
            let title = name.rsplit('/').next().unwrap_or(&name);
            let namespace = format!("{source}/sbom/{title}-{}-{revision}", root.version);
            let document = sbom::spdx(&components, &reference, &namespace, &created_text);
            let spec = ImageSpec {
                version: root.version.clone(),
                licenses: root.license.clone(),
                binary: binary
                    .file_name()
                    .context("the binary has no file name")?
                    .to_string_lossy()
                    .into_owned(),
                binary_data: std::fs::read(&binary)
                    .with_context(|| format!("reading {}", binary.display()))?,
                ca_bundle: std::fs::read(&ca_bundle)
                    .with_context(|| format!("reading {}", ca_bundle.display()))?,
                name: name.clone(),
                created,
                source,
                revision,
                sbom: document.clone(),
            };
            std::fs::create_dir_all(&out)?;
            let built = image::build(&spec, &out)?;
            let sbom_path = out.join(format!("{title}.spdx.json"));
            std::fs::write(&sbom_path, serde_json::to_vec_pretty(&document)?)?;
            println!("{} {}", built.reference, built.digest);
        }
        Cmd::Unpack {
            store,
            reference,
            root,
        } => {
            let images = store::Store::open(&store)?;
            let Some(image) = images.get(&reference) else {
                let known: Vec<&str> = images.references().collect();
                bail!(
                    "no image {reference:?} in {} (it has: {})",
                    store.display(),
                    known.join(", ")
                );
            };
            let config = image.unpack(&root)?;
            println!("{config:?}");
        }
    }
    Ok(())
}
