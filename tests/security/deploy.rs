//! Findings 3 and 4 in the manifests: only Prometheus reaches the metrics, and the DaemonSet runs
//! under a seccomp profile that denies what a compromised tracer would use against other pods.

use std::path::{Path, PathBuf};

use serde_json::Value;

fn deploy(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy").join(rel)
}

/// Every document of every YAML file in deploy/kubernetes/.
fn manifests() -> Vec<Value> {
    let mut out = vec![];
    for e in std::fs::read_dir(deploy("kubernetes")).unwrap().flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "yaml" || x == "yml") {
            let text = std::fs::read_to_string(&p).unwrap();
            for doc in text.split("\n---\n") {
                let v: Value =
                    serde_yaml_ng::from_str(doc).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
                if !v.is_null() {
                    out.push(v);
                }
            }
        }
    }
    out
}

#[test]
fn deploy_is_hardened_network_policy_seccomp_and_mounts() {
    let docs = manifests();
    let ds = docs.iter().find(|d| d["kind"] == "DaemonSet").expect("a DaemonSet");
    let ns = &ds["metadata"]["namespace"];
    let pod = &ds["spec"]["template"];
    let c = &pod["spec"]["containers"][0];
    let port = c["ports"][0]["containerPort"].clone();

    // A NetworkPolicy on exactly these pods, ingress only from Prometheus, no egress.
    let np = docs
        .iter()
        .find(|d| d["kind"] == "NetworkPolicy" && &d["metadata"]["namespace"] == ns)
        .expect("a NetworkPolicy in the DaemonSet's namespace");
    let spec = &np["spec"];
    assert_eq!(spec["podSelector"]["matchLabels"], pod["metadata"]["labels"], "it selects the tracer's pods");
    let types: Vec<&str> =
        spec["policyTypes"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    assert!(types.contains(&"Ingress") && types.contains(&"Egress"), "{types:?}");
    assert_eq!(spec["egress"], serde_json::json!([]), "gdr-trace opens no connection");
    let ingress = spec["ingress"].as_array().unwrap();
    assert_eq!(ingress.len(), 1, "{ingress:?}");
    let from = ingress[0]["from"].as_array().unwrap();
    assert!(!from.is_empty(), "an empty `from` admits everyone");
    for peer in from {
        assert!(peer["ipBlock"].is_null(), "no address ranges: {peer}");
        let nsl = &peer["namespaceSelector"]["matchLabels"];
        assert!(nsl["kubernetes.io/metadata.name"].is_string(), "one namespace, by name: {peer}");
        assert!(peer["podSelector"]["matchLabels"].is_object(), "and Prometheus's pods in it: {peer}");
    }
    let ports = ingress[0]["ports"].as_array().unwrap();
    assert!(
        ports.iter().all(|p| p["port"] == port || p["port"] == c["ports"][0]["name"]),
        "only the metrics port: {ports:?}"
    );

    // No debugfs, read-only root, a seccomp profile that is the shipped file.
    let text = serde_json::to_string(&pod).unwrap();
    assert!(!text.contains("/sys/kernel/debug"), "debugfs is not needed: {text}");
    let sc = &c["securityContext"];
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["seccompProfile"]["type"], "Localhost", "never Unconfined: {sc}");
    let local = sc["seccompProfile"]["localhostProfile"].as_str().unwrap();
    let file = Path::new(local).file_name().unwrap().to_str().unwrap();
    let profile: Value =
        serde_json::from_str(&std::fs::read_to_string(deploy("seccomp").join(file)).unwrap()).unwrap();
    let denied: Vec<&str> = profile["syscalls"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["action"] == "SCMP_ACT_ERRNO" || r["action"] == "SCMP_ACT_KILL_PROCESS")
        .flat_map(|r| r["names"].as_array().unwrap().iter().map(|n| n.as_str().unwrap()))
        .collect();
    for s in
        ["ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "finit_module", "setns", "mount"]
    {
        assert!(denied.contains(&s), "{s} is not denied: {denied:?}");
    }
    for s in ["bpf", "perf_event_open", "openat2"] {
        assert!(!denied.contains(&s), "{s} is what tracing needs");
    }
    // Deny by default; what the tool calls is listed.
    assert!(
        matches!(profile["defaultAction"].as_str(), Some("SCMP_ACT_ERRNO" | "SCMP_ACT_KILL_PROCESS")),
        "not default-deny: {}",
        profile["defaultAction"]
    );
    let allowed = allowed(&profile);
    assert!(allowed.contains(&"bpf".to_string()) && allowed.contains(&"perf_event_open".to_string()));
}

/// The names the seccomp profile allows.
fn allowed(profile: &Value) -> Vec<String> {
    profile["syscalls"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["action"] == "SCMP_ACT_ALLOW")
        .flat_map(|r| r["names"].as_array().unwrap().iter().map(|n| n.as_str().unwrap().to_string()))
        .collect()
}

/// System calls `gdr-trace ARGS` (and the processes it starts) makes, by strace.
fn syscalls_of(args: &[&str], while_running: impl FnOnce()) -> std::collections::BTreeSet<String> {
    let out = tempfile::NamedTempFile::new().unwrap();
    let mut child = std::process::Command::new("strace")
        .args(["-f", "-qq", "-o"])
        .arg(out.path())
        .arg(gdr_trace_tests::gdr_trace())
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("strace is needed (apt-get install strace)");
    while_running();
    assert!(child.wait().unwrap().success(), "gdr-trace {args:?} under strace failed");
    let text = std::fs::read_to_string(out.path()).unwrap();
    text.lines()
        .filter_map(|l| {
            let l = l.split_once(' ').map_or(l, |(_, rest)| rest).trim_start();
            let name: String = l.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            (l[name.len()..].starts_with('(') && !name.is_empty()).then_some(name)
        })
        .collect()
}

/// Every system call `probes`, `watch` (with its library follower) and `serve`
/// (answering /metrics and /healthz) make on this host is one the default-deny profile allows.
#[test]
fn the_seccomp_profile_allows_every_system_call_the_tracer_makes() {
    let profile: Value =
        serde_json::from_str(&std::fs::read_to_string(deploy("seccomp/gdr-trace.json")).unwrap()).unwrap();
    let allowed = allowed(&profile);
    let mut used = syscalls_of(&["probes", "--json"], || {});
    used.extend(syscalls_of(&["watch", "--json", "--duration", "2", "--interval", "1"], || {}));
    let port = gdr_trace_tests::prom::free_port();
    let addr = format!("127.0.0.1:{port}");
    used.extend(syscalls_of(&["serve", "--listen", &addr, "--interval", "1", "--duration", "4"], || {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while gdr_trace_tests::prom::http_get(&addr, "/healthz").map_or(true, |r| r.0 != 200)
            && std::time::Instant::now() < until
        {
            std::thread::yield_now();
        }
        let (status, _, _) = gdr_trace_tests::prom::http_get(&addr, "/metrics").unwrap();
        assert_eq!(status, 200);
    }));
    assert!(used.contains("bpf") && used.contains("execve"), "strace saw {used:?}");
    let missing: Vec<&String> = used.iter().filter(|s| !allowed.contains(s)).collect();
    assert!(missing.is_empty(), "called but not allowed by the seccomp profile: {missing:?}");
}
