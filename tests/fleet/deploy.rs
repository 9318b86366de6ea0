//! The DaemonSet manifest: least privilege, and its arguments parse as gdr-trace's own.

use super::*;

fn yaml_docs(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    text.split("\n---\n").map(|d| serde_yaml_ng::from_str(d).unwrap_or_else(|e| panic!("{e}: {d}"))).collect()
}

#[test]
fn daemonset_is_least_privilege_and_its_args_parse() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/kubernetes/gdr-trace.yaml");
    let docs = yaml_docs(&path);
    let ds = docs.iter().find(|d| d["kind"] == "DaemonSet").expect("a DaemonSet");
    assert_eq!(ds["apiVersion"], "apps/v1");
    let ns = ds["metadata"]["namespace"].as_str().unwrap();
    assert!(docs.iter().any(|d| d["kind"] == "Namespace" && d["metadata"]["name"] == ns));
    let tpl = &ds["spec"]["template"];
    assert_eq!(ds["spec"]["selector"]["matchLabels"], tpl["metadata"]["labels"]);
    let pod = &tpl["spec"];
    assert_eq!(pod["hostPID"], true, "host pids: attribution and BPF's pids");
    assert!(pod["hostNetwork"].is_null() && pod["hostIPC"].is_null());
    let c = &pod["containers"][0];
    let sc = &c["securityContext"];
    assert_eq!(sc["privileged"], false);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
    assert_eq!(
        sc["capabilities"]["add"],
        json!(["BPF", "PERFMON", "SYS_PTRACE"]),
        "the proven set, nothing more"
    );
    let mounts: Vec<(&str, bool)> = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["mountPath"].as_str().unwrap(), m["readOnly"] == true))
        .collect();
    for want in ["/sys/kernel/btf", "/sys/kernel/tracing", "/host/etc/passwd"] {
        assert!(mounts.contains(&(want, true)), "{want} read-only in {mounts:?}");
    }
    assert!(!mounts.iter().any(|(m, _)| m.starts_with("/sys/kernel/debug")), "no debugfs: {mounts:?}");
    for v in pod["volumes"].as_array().unwrap() {
        let name = &v["name"];
        let m = c["volumeMounts"].as_array().unwrap().iter().find(|m| &m["name"] == name).unwrap();
        if let Some(host) = v["hostPath"]["path"].as_str() {
            assert!(m["mountPath"].as_str().unwrap().ends_with(host), "{host} -> {m}");
            assert_eq!(m["readOnly"], true, "nothing of the host is writable: {m}");
        } else {
            // The one writable mount: the pod's own small tmpfs for the kernel BTF memo.
            assert_eq!(m["mountPath"], "/run/gdr-trace", "{v}");
            assert_eq!(v["emptyDir"]["medium"], "Memory", "{v}");
            assert!(v["emptyDir"]["sizeLimit"].is_string(), "bounded: {v}");
        }
    }
    // The args are real gdr-trace arguments, and the scrape annotations match them.
    let args: Vec<&str> = c["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    let cli = gdr_trace::cli::Cli::try_parse_from(std::iter::once("gdr-trace").chain(args.iter().copied()))
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    let gdr_trace::cli::Command::Serve(s) = cli.command else { panic!("not serve: {args:?}") };
    let port = s.listen.port().to_string();
    let ann = &tpl["metadata"]["annotations"];
    assert_eq!(ann["prometheus.io/scrape"], "true");
    assert_eq!(ann["prometheus.io/port"], port.as_str());
    assert_eq!(ann["prometheus.io/path"], "/metrics");
    assert_eq!(c["ports"][0]["containerPort"].to_string(), port);
    assert!(s.listen.ip().is_unspecified(), "reachable by the scraper");
    assert_eq!(s.host.passwd, Path::new("/host/etc/passwd"));
    for probe in ["readinessProbe", "livenessProbe"] {
        assert_eq!(c[probe]["httpGet"]["path"], "/healthz", "{probe}");
        assert_eq!(c[probe]["httpGet"]["port"], c["ports"][0]["name"], "{probe}");
    }
}
