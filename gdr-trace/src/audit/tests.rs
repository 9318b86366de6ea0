use super::*;
use crate::{
    audit::posture::{Evidence, PostureItem},
    events::Context,
};

const ID: &str = "3f2a9c1b7d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8";

fn facts(pid: u32, uid: u32, container: bool) -> ProcessFacts {
    let cgroup = if container {
        format!("/system.slice/docker-{ID}.scope")
    } else {
        "/user.slice/user-1000.slice/session-1.scope".to_string()
    };
    ProcessFacts {
        pid,
        comm: format!("p{pid}"),
        uid,
        user: Some(format!("u{uid}")),
        container: container::parse(&cgroup),
        cgroup: Some(cgroup),
        ..Default::default()
    }
}

fn reg(id: u64, pid: u32, access: u32, len: u64) -> Registration {
    Registration {
        id,
        ctx: Context { pid, tid: pid, comm: format!("p{pid}"), ..Default::default() },
        addr: 0x10000 * id,
        length: len,
        access,
        device: Some("mlx5_0".into()),
        ..Default::default()
    }
}

fn ids(f: &[Finding]) -> Vec<(&str, Severity, Option<u32>)> {
    f.iter().map(|f| (f.id.as_str(), f.severity, f.process.as_ref().map(|p| p.pid))).collect()
}

#[test]
fn remote_write_on_gpu_memory_is_flagged_not_on_host_memory() {
    let mut a = Auditor::new();
    a.learn(facts(10, 1000, false));
    a.registered(&reg(1, 10, 0x7, 2 << 20), Verdict::GpuPeermem);
    a.registered(&reg(2, 10, 0x3, 4096), Verdict::Host);
    a.registered(&reg(3, 10, 0x1, 1 << 20), Verdict::GpuDmabuf);
    a.registered(&reg(4, 10, 0x9, 64), Verdict::Failed);
    let f = a.findings(&Posture::default(), &[]);
    assert_eq!(ids(&f), [("gpu-remote-write", Severity::Medium, Some(10))], "{f:#?}");
    assert_eq!(f[0].evidence.len(), 1, "only the GPU registration with remote write");
    assert_eq!(f[0].evidence[0]["id"], 1);
    assert_eq!(f[0].evidence[0]["access_flags"], json!(["LOCAL_WRITE", "REMOTE_WRITE", "REMOTE_READ"]));
    assert!(f[0].summary.contains("REMOTE_WRITE"), "{}", f[0].summary);
    let rec = finding_record(&f[0]);
    assert_eq!(
        (&rec["event"], &rec["user"], &rec["uid"]),
        (&json!("finding"), &json!("u1000"), &json!(1000))
    );
    // REMOTE_ATOMIC alone lets a peer write too.
    let mut b = Auditor::new();
    b.registered(&reg(1, 11, 0x8 | 0x1, 4096), Verdict::GpuDmabuf);
    let f = b.findings(&Posture::default(), &[]);
    assert_eq!(ids(&f), [("gpu-remote-write", Severity::Medium, Some(11))]);
    assert!(f[0].summary.contains("REMOTE_ATOMIC"));
}

#[test]
fn two_uids_and_a_container_make_a_multi_tenant_machine() {
    let mut a = Auditor::new();
    a.learn(facts(10, 1000, false));
    a.learn(facts(20, 0, true));
    a.registered(&reg(1, 10, 0x1, 2 << 20), Verdict::GpuPeermem);
    a.registered(&reg(2, 20, 0x3, 2 << 20), Verdict::GpuPeermem);
    a.registered(&reg(3, 20, 0x1, 4096), Verdict::Host);
    let f = a.findings(&Posture::default(), &[]);
    assert_eq!(
        ids(&f),
        [
            ("gpu-remote-write", Severity::High, Some(20)),
            ("gpu-multi-tenant", Severity::Medium, None),
            ("uncontained-registration", Severity::Medium, Some(10)),
        ],
        "{f:#?}"
    );
    let tenants = &f[1].evidence;
    assert_eq!(tenants.len(), 2);
    let docker = tenants.iter().find(|t| t["uid"] == 0).unwrap();
    assert_eq!(docker["container"]["runtime"], "docker");
    assert_eq!(docker["container"]["id"], ID);
    assert_eq!(docker["user"], "u0");
    let rec = finding_record(&f[0]);
    assert_eq!(rec["container"]["id"], ID);
    assert_eq!(rec["cgroup"], format!("/system.slice/docker-{ID}.scope"));
}

#[test]
fn posture_is_rated_for_the_tenants_seen() {
    let posture = Posture {
        items: vec![PostureItem {
            id: "acs-disabled".into(),
            single_tenant: Severity::Medium,
            multi_tenant: Severity::High,
            summary: "ACS off".into(),
            evidence: vec![Evidence { path: "/sys/bus/pci/devices/x/config".into(), value: "ctl 0".into() }],
            hint: None,
        }],
    };
    let mut a = Auditor::new();
    a.registered(&reg(1, 10, 0x1, 4096), Verdict::GpuPeermem);
    assert_eq!(ids(&a.findings(&posture, &[])), [("acs-disabled", Severity::Medium, None)]);
    a.learn(facts(20, 1001, false));
    a.registered(&reg(2, 20, 0x1, 4096), Verdict::GpuDmabuf);
    let f = a.findings(&posture, &[]);
    assert_eq!(
        ids(&f),
        [("gpu-multi-tenant", Severity::High, None), ("acs-disabled", Severity::High, None)],
        "several tenants: the open posture is high, and so is their exposure"
    );
    assert_eq!(f[1].evidence[0]["path"], "/sys/bus/pci/devices/x/config");
    assert_eq!(counts(&f)["high"], 2);
    assert_eq!(counts(&f)["critical"], 0);
}

#[test]
fn uncontained_only_on_container_hosts() {
    let mut a = Auditor::new();
    a.registered(&reg(1, 10, 0x1, 4096), Verdict::Host);
    assert!(a.findings(&Posture::default(), &[]).is_empty(), "no container anywhere: nothing to say");
    let f = a.findings(&Posture::default(), &["/run/containerd/containerd.sock".into()]);
    assert_eq!(ids(&f), [("uncontained-registration", Severity::Low, Some(10))]);
    assert_eq!(Severity::Low.as_str(), "low");
    assert!(Severity::Critical > Severity::High && Severity::Medium > Severity::Low);
}

#[test]
fn importing_another_users_gpu_memory_is_a_finding_the_same_users_is_not() {
    let ipc = |pid: u32, uid: u32, exporter_uid: Option<u32>, ret: i64| crate::p2p::GpuIpc {
        ctx: Context { pid, uid, comm: format!("p{pid}"), ..Default::default() },
        op: "cuIpcOpenMemHandle".into(),
        length: Some(1 << 20),
        exporter_pid: exporter_uid.map(|_| 7),
        exporter_uid,
        exporter_comm: Some("p7".into()),
        ret,
    };
    let mut a = Auditor::new();
    a.gpu_imported(&ipc(20, 1000, Some(1000), 0));
    a.gpu_imported(&ipc(21, 1000, None, 0));
    a.gpu_imported(&ipc(22, 1000, Some(0), 400));
    assert!(a.findings(&Posture::default(), &[]).is_empty(), "same user, unknown exporter, failed import");
    a.gpu_imported(&ipc(23, 65534, Some(0), 0));
    let f = a.findings(&Posture::default(), &[]);
    assert_eq!(ids(&f), vec![("gpu-ipc-cross-user", Severity::High, Some(23))]);
    assert_eq!(f[0].evidence[0]["exporter_pid"], 7);
    assert!(f[0].summary.contains("uid 65534") && f[0].summary.contains("uid 0"), "{}", f[0].summary);
}
