//! What ships, against real registrations in the VM (rxe0): the static binary of the release
//! tarball traces from a chroot holding nothing but busybox and itself (no libc, no loader);
//! the OCI image, unpacked with umoci, runs its entrypoint the same way; every metric the
//! Grafana dashboard queries has samples in a real `serve` scrape, which promtool (text 0.0.4)
//! and an OpenMetrics parser accept. `cargo xtask test` builds the artifacts (`cargo xtask dist`
//! and `image`) and runs this inside the VM with `--ignored --test-threads=1` (`cargo xtask test ship_` runs only these).

use std::{
    ffi::CString,
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use gdr_trace_tests::{
    events, gdr_trace,
    prom::{
        dashboard_metrics, free_port, http_get, http_get_accept, openmetrics_check, promtool_check,
        sample_names,
    },
    Paranoid, Tracer, Workload,
};
use serde_json::Value;

const VERSION: &str = env!("CARGO_PKG_VERSION");

/// target/dist (`cargo xtask test` passes it as GDR_DIST_DIR).
fn dist() -> PathBuf {
    let d = std::env::var_os("GDR_DIST_DIR")
        .map_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/dist"), PathBuf::from);
    assert!(d.join("oci").is_dir(), "{}: run `cargo xtask dist` and `cargo xtask image` first", d.display());
    d
}

fn sh(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_encoded_bytes()).unwrap()
}

/// A root directory with /proc, /sys (and what is mounted under it: tracefs, BTF) and /dev
/// bound in, as a container runtime gives them; unmounted and removed on drop.
struct Root {
    dir: PathBuf,
    mounts: Vec<PathBuf>,
}

impl Root {
    fn new(dir: PathBuf) -> Self {
        let mut mounts = Vec::new();
        for m in ["proc", "sys", "dev"] {
            let target = dir.join(m);
            std::fs::create_dir_all(&target).unwrap();
            let (src, dst) = (cstr(&Path::new("/").join(m)), cstr(&target));
            // SAFETY: mount(2) with valid C strings; a recursive bind of the VM's own mounts.
            let r = unsafe {
                libc::mount(
                    src.as_ptr(),
                    dst.as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND | libc::MS_REC,
                    std::ptr::null(),
                )
            };
            assert_eq!(r, 0, "bind /{m}: {}", std::io::Error::last_os_error());
            mounts.push(target);
        }
        Self { dir, mounts }
    }

    /// `program` (a path inside the root) run chrooted, as `uid`, with only `caps` (capability
    /// numbers) left in the bounding set: what the DaemonSet's securityContext gives.
    fn command(&self, program: &str, uid: u32, caps: Option<&'static [u32]>) -> Command {
        let mut cmd = Command::new(program);
        let root = cstr(&self.dir);
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::chroot(root.as_ptr()) != 0 || libc::chdir(c"/".as_ptr()) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if let Some(keep) = caps {
                    for cap in 0..=40_u32 {
                        if !keep.contains(&cap) && libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                    }
                }
                if uid != 0 && (libc::setgid(uid) != 0 || libc::setuid(uid) != 0) {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        cmd
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        for m in self.mounts.iter().rev() {
            // SAFETY: umount2(2) on a path we mounted.
            unsafe { libc::umount2(cstr(m).as_ptr(), libc::MNT_DETACH) };
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// CAP_SYS_PTRACE, CAP_PERFMON, CAP_BPF: deploy/kubernetes/gdr-trace.yaml's set.
const DAEMONSET_CAPS: &[u32] = &[19, 38, 39];

/// Runs `tracer` (an `attach`), then a workload registering 64 KiB; the registration it saw,
/// `ib_umem_get` attached as `how` (its records' source: `source`).
fn traces_a_registration(how: &str, source: &str, spawn: impl FnOnce(u32) -> Tracer) -> Value {
    let mut w = Workload::spawn(&["65536:3"]);
    let mut tracer = spawn(w.pid());
    assert_eq!(tracer.attached("ib_umem_get").as_deref(), Some(how), "{}", tracer.hooks);
    w.go();
    let truth = w.finish();
    let recs = tracer.finish();
    let regs = events(&recs, "mr_register");
    let t = truth.iter().find(|r| r["event"] == "registered").expect("the workload registered");
    assert_eq!(regs.len(), 1, "{regs:#?}");
    let r = regs[0].clone();
    assert_eq!((&r["addr"], &r["length"], &r["device"]), (&t["addr"], &t["length"], &"rxe0".into()), "{r}");
    assert_eq!(r["verdict"], "host");
    assert!(r["sources"].as_array().unwrap().iter().any(|s| s == source), "{r}");
    assert_eq!(events(&recs, "mr_release").len(), 1, "{recs:#?}");
    r
}

fn attach_args(pid: u32) -> [String; 5] {
    ["attach".into(), pid.to_string(), "--json".into(), "--duration".into(), "120".into()]
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn ship_static_binary_traces_from_a_chroot_without_libc() {
    let dist = dist();
    let name = format!("gdr-trace-{VERSION}-x86_64-linux");
    let tarball = format!("{name}.tar.gz");
    sh(Command::new("sha256sum").args(["-c", &format!("{tarball}.sha256")]).current_dir(&dist));
    let listed = sh(Command::new("tar").arg("-tzf").arg(dist.join(&tarball)));
    for f in [
        "gdr-trace",
        "LICENSE-MIT",
        "LICENSE-APACHE",
        "README.md",
        "completions/_gdr-trace",
        "man/man1/gdr-trace-serve.1",
    ] {
        assert!(listed.lines().any(|l| l == format!("{name}/{f}")), "{f} in the tarball:\n{listed}");
    }

    // Unpacked from the tarball into a root with busybox and nothing else.
    let dir = std::env::temp_dir().join("gdr-ship-chroot");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    sh(Command::new("tar")
        .arg("-xzf")
        .arg(dist.join(&tarball))
        .arg("-C")
        .arg(&dir)
        .arg(format!("{name}/gdr-trace")));
    std::fs::rename(dir.join(&name).join("gdr-trace"), dir.join("bin/gdr-trace")).unwrap();
    std::fs::remove_dir(dir.join(&name)).unwrap();
    std::fs::copy("/bin/busybox", dir.join("bin/busybox")).unwrap();
    // The dynamically linked debug build, to prove the root really has no loader and no libc.
    std::fs::copy(gdr_trace(), dir.join("bin/gdr-trace-dynamic")).unwrap();
    let root = Root::new(dir);
    let files = sh(root.command("/bin/busybox", 0, None).args(["find", "/", "-xdev", "-type", "f"]));
    let mut files: Vec<&str> = files.lines().collect();
    files.sort_unstable();
    assert_eq!(files, ["/bin/busybox", "/bin/gdr-trace", "/bin/gdr-trace-dynamic"]);
    let dynamic = root.command("/bin/gdr-trace-dynamic", 0, None).arg("--version").output();
    assert!(dynamic.is_err() || !dynamic.unwrap().status.success(), "a dynamic binary cannot start here");
    let version = sh(root.command("/bin/busybox", 0, None).args(["sh", "-c", "/bin/gdr-trace --version"]));
    assert_eq!(version.trim(), format!("gdr-trace {VERSION}"));

    let r = traces_a_registration("fexit", "fexit:ib_umem_get", |pid| {
        let mut cmd = root.command("/bin/busybox", 0, None);
        cmd.args(["sh", "-c", "exec /bin/gdr-trace \"$@\"", "gdr-trace"]).args(attach_args(pid));
        Tracer::spawn_cmd(cmd)
    });
    eprintln!("traced from the chroot: {r}");
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn ship_image_unpacked_with_umoci_runs_its_entrypoint_and_traces() {
    let dist = dist();
    let work = std::env::temp_dir().join("gdr-ship-image");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap();
    let layout = work.join("oci");
    sh(Command::new("cp").arg("-a").arg(dist.join("oci")).arg(&layout));
    let bundle = work.join("bundle");
    sh(Command::new("umoci")
        .args(["unpack", "--image"])
        .arg(format!("{}:{VERSION}", layout.display()))
        .arg(&bundle));
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(bundle.join("config.json")).unwrap()).unwrap();
    let args: Vec<&str> =
        config["process"]["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    assert_eq!(args, ["/usr/local/bin/gdr-trace", "--help"], "entrypoint and default command");
    let uid = u32::try_from(config["process"]["user"]["uid"].as_u64().unwrap()).unwrap();
    assert_eq!((uid, &config["process"]["user"]["gid"]), (65534, &65534.into()), "nobody by default");
    let labels = &config["annotations"];
    assert_eq!(labels["org.opencontainers.image.version"], VERSION, "{config}");
    assert_eq!(labels["org.opencontainers.image.licenses"], "MIT OR Apache-2.0");
    assert_eq!(labels["org.opencontainers.image.title"], "gdr-trace");
    let rootfs = bundle.join("rootfs");
    let files = sh(Command::new("find").arg(&rootfs).args(["-type", "f"]));
    assert_eq!(files.lines().collect::<Vec<_>>(), [format!("{}/usr/local/bin/gdr-trace", rootfs.display())]);

    let root = Root::new(rootfs);
    let entry = args[0];
    // As the image's user: the default command works; tracing is refused, with the reason.
    let help = root.command(entry, uid, None).arg("--help").output().unwrap();
    assert!(help.status.success() && String::from_utf8_lossy(&help.stdout).contains("Usage: gdr-trace"));
    let refused = root.command(entry, uid, None).args(["watch", "--duration", "1"]).output().unwrap();
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("CAP_BPF"), "{refused:?}");
    // As the DaemonSet runs it: uid 0, BPF + PERFMON + SYS_PTRACE only (module BTF ids need
    // CAP_SYS_ADMIN: kprobes; those need perf_event_paranoid <= 2, as the manifest says).
    let _paranoid = Paranoid::set("2");
    let r = traces_a_registration("kprobe+kretprobe", "kprobe:ib_umem_get", |pid| {
        let mut cmd = root.command(entry, 0, Some(DAEMONSET_CAPS));
        cmd.args(attach_args(pid));
        Tracer::spawn_cmd(cmd)
    });
    eprintln!("traced by the image's entrypoint: {r}");
    drop(root);
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn ship_every_dashboard_metric_is_in_a_real_scrape_and_both_formats_pass_their_checkers() {
    let addr = format!("127.0.0.1:{}", free_port());
    let mut t = Tracer::spawn(&["serve", "--json", "--listen", &addr, "--interval", "1"].map(String::from));
    let mut w = Workload::spawn(&["4096:1", "1048576:7"]);
    w.go();
    w.finish();
    // Until the registrations, the releases and the processes are in.
    let until = Instant::now() + Duration::from_secs(60);
    let wanted = dashboard_metrics();
    let text = loop {
        let (status, head, text) = http_get(&addr, "/metrics").unwrap();
        assert_eq!(status, 200, "{head}");
        let have = sample_names(&text);
        let missing: Vec<&String> = wanted.iter().filter(|m| !have.contains(*m)).collect();
        if missing.is_empty() {
            break text;
        }
        assert!(Instant::now() < until, "the dashboard queries {missing:?}, not in the scrape:\n{text}");
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(text.contains("gdr_trace_registered_bytes_total{comm=\"gdr-workload\""), "{text}");
    promtool_check(&text).unwrap();
    let (_, head, om) = http_get_accept(&addr, "/metrics", Some("application/openmetrics-text")).unwrap();
    assert!(head.contains("application/openmetrics-text; version=1.0.0"), "{head}");
    openmetrics_check(&om).unwrap();
    assert_eq!(sample_names(&om), sample_names(&text));
    // SAFETY: kill(2) on our own child.
    assert_eq!(unsafe { libc::kill(t.child.id() as i32, libc::SIGTERM) }, 0);
    t.finish();
}
