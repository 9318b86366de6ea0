//! `cargo xtask image`: an OCI image of the static binary and nothing else (`FROM scratch`
//! style), built without a container daemon: umoci writes the OCI layout, skopeo copies it into
//! the archives registries and runtimes load (`oci-archive`, `docker-archive`), all under
//! target/dist.
//!
//! The image runs as nobody (65534:65534) by default: `check`, `report` and `--help` need no
//! privilege. Tracing needs CAP_BPF and CAP_PERFMON *effective*, and a container runtime gives
//! a non-root process its added capabilities only through ambient or file capabilities, which
//! Kubernetes does not set: deploy/kubernetes/gdr-trace.yaml runs `serve` as uid 0 with every
//! capability dropped but BPF, PERFMON and SYS_PTRACE (not privileged).

use std::{path::PathBuf, process::Command};

use anyhow::{Context, Result};

use crate::{
    dist::{self, dist_dir, VERSION},
    sh::workspace_root,
};

/// Where the binary sits in the image (the entrypoint).
pub const ENTRYPOINT: &str = "/usr/local/bin/gdr-trace";
/// The image's default user: nobody.
pub const USER: &str = "65534:65534";

/// What `image` made.
pub struct Image {
    /// The OCI layout (`<layout>:<VERSION>`), what `umoci unpack` reads.
    pub layout: PathBuf,
    pub oci_archive: PathBuf,
    pub docker_archive: PathBuf,
}

pub fn main() -> Result<i32> {
    let i = build()?;
    println!("{}:{VERSION}\n{}\n{}", i.layout.display(), i.oci_archive.display(), i.docker_archive.display());
    Ok(0)
}

pub fn build() -> Result<Image> {
    let bin = dist::static_binary()?;
    let dist = dist_dir();
    std::fs::create_dir_all(&dist)?;
    let layout = dist.join("oci");
    if layout.exists() {
        std::fs::remove_dir_all(&layout).with_context(|| format!("cannot clear {}", layout.display()))?;
    }
    let image = format!("{}:{VERSION}", layout.display());
    let umoci = |args: &[&str]| crate::sh::run(Command::new("umoci").args(args));
    umoci(&["init", "--layout", &layout.display().to_string()])?;
    umoci(&["new", "--image", &image])?;
    umoci(&["insert", "--image", &image, &bin.display().to_string(), ENTRYPOINT])?;

    let root = workspace_root();
    let git = |args: &[&str]| {
        crate::sh::output(Command::new("git").args(args).current_dir(&root)).map(|s| s.trim().to_string())
    };
    let revision = git(&["rev-parse", "HEAD"]).unwrap_or_default();
    let created = git(&["log", "-1", "--format=%cI"]).unwrap_or_default();
    let labels = [
        ("org.opencontainers.image.title", "gdr-trace".to_string()),
        (
            "org.opencontainers.image.description",
            "Proves, per process and at the driver level, whether GPU memory goes straight to the NIC \
             (GPUDirect RDMA) or is staged through host memory"
                .to_string(),
        ),
        ("org.opencontainers.image.version", VERSION.to_string()),
        ("org.opencontainers.image.licenses", "MIT OR Apache-2.0".to_string()),
        ("org.opencontainers.image.revision", revision),
        ("org.opencontainers.image.created", created),
    ];
    let mut config = vec![
        "config".to_string(),
        "--image".into(),
        image.clone(),
        "--author".into(),
        "The gdr-trace developers".into(),
        format!("--config.entrypoint={ENTRYPOINT}"),
        "--config.cmd=--help".into(),
        format!("--config.user={USER}"),
        "--config.workingdir=/".into(),
        "--config.exposedports=9477/tcp".into(),
        "--os=linux".into(),
        "--architecture=amd64".into(),
    ];
    for (k, v) in &labels {
        config.push(format!("--config.label={k}={v}"));
        config.push(format!("--manifest.annotation={k}={v}"));
    }
    crate::sh::run(Command::new("umoci").args(&config))?;
    umoci(&["gc", "--layout", &layout.display().to_string()])?;

    // The archives, named like the tarball.
    let stem = format!("gdr-trace-{VERSION}");
    let oci_archive = dist.join(format!("{stem}-oci.tar"));
    let docker_archive = dist.join(format!("{stem}-docker.tar"));
    for (archive, kind) in [(&oci_archive, "oci-archive"), (&docker_archive, "docker-archive")] {
        let _ = std::fs::remove_file(archive);
        crate::sh::run(
            Command::new("skopeo")
                // Copying our own local layout: no signature to verify.
                .arg("--insecure-policy")
                .arg("copy")
                .arg("--quiet")
                .arg(format!("oci:{image}"))
                .arg(format!("{kind}:{}:gdr-trace:{VERSION}", archive.display())),
        )?;
    }
    eprintln!("[image] {image}\n[image] {}\n[image] {}", oci_archive.display(), docker_archive.display());
    Ok(Image { layout, oci_archive, docker_archive })
}
