//! What /proc, /sys and a process's own root say about its GPUDirect Storage set-up, read for
//! the storage analysis (`storage::gds_facts`, `storage::kernel_p2pdma`: the types and the
//! decisions) by the live layer at a cuFile process's first call and by `doctor`. Every reader
//! takes its roots (/proc and /sys, or a captured tree).

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::parse::jsonc::strip_json_comments;

use crate::storage::{
    gds_facts::{
        env_bool, from_json, parse_environ, parse_mountinfo, ProcConfig, ProcGdsFacts, ENV_OVERRIDES,
    },
    kernel_p2pdma::{config_p2pdma, KernelP2pdma},
};

/// Reads the configuration of a process whose root directory is `root` (/proc/PID/root, or a
/// container's private root in tests), with its environment and working directory (for a
/// relative CUFILE_ENV_PATH_JSON).
pub fn read_config(root: &Path, cwd: &Path, env: &[(String, String)]) -> ProcConfig {
    let var = |k: &str| env.iter().rev().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let named = var("CUFILE_ENV_PATH_JSON").filter(|p| !p.is_empty());
    let inside = named.unwrap_or("/etc/cufile.json");
    let host_path = if let Some(rel) = inside.strip_prefix('/') { root.join(rel) } else { cwd.join(inside) };
    let mut out = ProcConfig::default();
    match std::fs::read(&host_path) {
        Ok(bytes) => {
            out.file = Some(inside.to_string());
            match serde_json::from_str::<Value>(&strip_json_comments(&String::from_utf8_lossy(&bytes))) {
                Ok(v) => out.effective = from_json(&v, inside),
                Err(e) => out.error = Some(format!("{inside}: not JSON even without comments: {e}")),
            }
        }
        Err(e) if named.is_some() => out.error = Some(format!("CUFILE_ENV_PATH_JSON={inside}: {e}")),
        Err(_) => {}
    }
    for (name, key) in ENV_OVERRIDES {
        if let Some(b) = var(name).and_then(env_bool) {
            let slot = match key {
                "force_compat_mode" => &mut out.effective.force_compat_mode,
                "allow_compat_mode" => &mut out.effective.allow_compat_mode,
                _ => &mut out.effective.use_pci_p2pdma,
            };
            *slot = Some((b, format!("{name}={}", var(name).unwrap_or_default())));
        }
    }
    out
}

/// The configuration of process `pid` under `proc_root` (/proc, or a captured tree).
pub fn read_process_config(proc_root: &Path, pid: u32) -> ProcConfig {
    let dir = proc_root.join(pid.to_string());
    let env = std::fs::read(dir.join("environ")).map(|b| parse_environ(&b));
    let cwd = std::fs::read_link(dir.join("cwd")).unwrap_or_else(|_| PathBuf::from("/"));
    // The cwd link names a path inside the process's root.
    let cwd = dir.join("root").join(cwd.strip_prefix("/").unwrap_or(&cwd));
    let mut out = read_config(&dir.join("root"), &cwd, env.as_deref().unwrap_or_default());
    if let (Err(e), None) = (&env, &out.error) {
        // Without its environment, CUFILE_* and CUFILE_ENV_PATH_JSON are not known: say so.
        out.error = Some(format!("{}: {e}", proc_name_of(pid, "environ")));
    }
    out
}

fn proc_name_of(pid: u32, what: &str) -> String {
    format!("/proc/{pid}/{what}")
}

/// Whether the kernel under `proc_root` can do PCI P2PDMA, and why (preflight's decision).
pub fn read_kernel_p2pdma(proc_root: &Path) -> Option<(bool, String)> {
    let k = read_kernel(proc_root);
    k.usable().map(|y| (y, k.why()))
}

/// Reads the facts of process `pid` under `proc_root` and `sys_root` (/proc, /sys).
pub fn read_proc_facts(proc_root: &Path, sys_root: &Path, pid: u32) -> ProcGdsFacts {
    let dir = proc_root.join(pid.to_string());
    // The process's mount table, after the reader's own: device numbers are the kernel's, one
    // for every namespace, so a file's filesystem is still known when the process is gone (or
    // mounts in a namespace the reader shares); the process's own entries win (`fstype_of_dev`).
    let own = std::fs::read_to_string(proc_root.join("self/mountinfo")).map(|t| parse_mountinfo(&t));
    let mut mounts = own.unwrap_or_default();
    if let Ok(t) = std::fs::read_to_string(dir.join("mountinfo")) {
        mounts.extend(parse_mountinfo(&t));
    }
    // The module, or the driver's own /proc/driver/nvidia-fs (nvfs-proc.c: version, stats), which
    // is there wherever nvidia-fs is, built as its own module or not.
    let loaded = sys_root.join("module/nvidia_fs").exists() || proc_root.join("driver/nvidia-fs").is_dir();
    let nvidia_fs = if !loaded {
        Some(false)
    } else {
        // A container without the nvidia-fs device nodes gets compatibility mode too.
        std::fs::read_dir(dir.join("root/dev"))
            .ok()
            .map(|d| d.flatten().any(|e| e.file_name().to_string_lossy().starts_with("nvidia-fs")))
    };
    let kernel_p2pdma = read_kernel_p2pdma(proc_root);
    ProcGdsFacts { config: read_process_config(proc_root, pid), mounts, nvidia_fs, kernel_p2pdma }
}

/// What the kernel under `proc_root` says: its release, then its config (`/boot/config-R` beside
/// that /proc, `/proc/config.gz`), else whether kallsyms has `p2pdma_pgmap_ops`.
pub fn read_kernel(proc_root: &Path) -> KernelP2pdma {
    let release = std::fs::read_to_string(proc_root.join("sys/kernel/osrelease"))
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty());
    let boot = proc_root.parent().map(|p| p.join("boot")).unwrap_or_else(|| Path::new("/boot").to_path_buf());
    if let Some(rel) = release.clone() {
        if let Ok(text) = std::fs::read_to_string(boot.join(format!("config-{rel}"))) {
            let y = config_p2pdma(&text);
            let source = format!("/boot/config-{rel}: {}", said(y));
            return KernelP2pdma { release, config: Some(y), source };
        }
    }
    let gz = proc_root.join("config.gz");
    if gz.is_file() {
        let out = std::process::Command::new("gzip").arg("-dc").arg(&gz).output();
        return match out {
            Ok(o) if o.status.success() => {
                let y = config_p2pdma(&String::from_utf8_lossy(&o.stdout));
                KernelP2pdma { release, config: Some(y), source: format!("/proc/config.gz: {}", said(y)) }
            }
            _ => KernelP2pdma {
                release,
                config: None,
                source: "/proc/config.gz present but gzip -dc failed".into(),
            },
        };
    }
    if let Ok(syms) = std::fs::read_to_string(proc_root.join("kallsyms")) {
        let y = syms.lines().any(|l| l.split_whitespace().nth(2) == Some("p2pdma_pgmap_ops"));
        let what = if y { "has" } else { "lacks" };
        return KernelP2pdma {
            release,
            config: Some(y),
            source: format!("/proc/kallsyms {what} p2pdma_pgmap_ops"),
        };
    }
    KernelP2pdma {
        release,
        config: None,
        source: "no /boot/config-RELEASE, /proc/config.gz or /proc/kallsyms".into(),
    }
}

fn said(y: bool) -> &'static str {
    if y {
        "CONFIG_PCI_P2PDMA=y"
    } else {
        "CONFIG_PCI_P2PDMA not set"
    }
}

#[cfg(test)]
mod tests;
