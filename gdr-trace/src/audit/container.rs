//! Container and Kubernetes pod identity from a cgroup path (pure).
//!
//! The layouts recognised, each with the cgroup driver that makes it:
//! - Docker: `/system.slice/docker-<id>.scope` (systemd), `/docker/<id>` (cgroupfs);
//! - containerd: `/system.slice/cri-containerd-<id>.scope`, `containerd-<id>.scope`,
//!   `nerdctl-<id>.scope` (systemd), `/<namespace>/<id>` with namespace `default` or `k8s.io`
//!   (cgroupfs; `moby` is Docker's namespace);
//! - CRI-O: `crio-<id>.scope` (systemd), `crio-<id>` (cgroupfs); `crio-conmon-<id>` is its
//!   monitor, not the container;
//! - Podman: `libpod-<id>.scope` (plus its `/container` child);
//! - Kubernetes pods: `kubepods-<qos>-pod<uid with _>.slice` (systemd) or `pod<uid>` under
//!   `kubepods/<qos>` (cgroupfs); a bare `<id>` below a pod is a container of an unnamed runtime.
//!
//! Paths read through a cgroup namespace start with `/..`: that changes nothing here.

use serde::{Deserialize, Serialize};

/// Who runs a process, as far as its cgroup path tells.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Container {
    /// `docker`, `containerd`, `cri-o`, `podman`; None when the layout doesn't say.
    pub runtime: Option<String>,
    /// The container ID (64 hex digits); None for a process of a pod outside its containers.
    pub id: Option<String>,
    /// The Kubernetes pod UID (with dashes), when the process is in a pod.
    pub pod_uid: Option<String>,
    /// `burstable`, `besteffort` or `guaranteed`, for pods.
    pub qos: Option<String>,
}

impl Container {
    /// Short form for tables and labels: `docker:3f2a9c1b7d4e`, `pod:8a2f4c1e-…`.
    pub fn short(&self) -> String {
        match (&self.id, &self.pod_uid) {
            (Some(id), _) => format!("{}:{}", self.runtime.as_deref().unwrap_or("container"), short12(id)),
            (None, Some(pod)) => format!("pod:{pod}"),
            (None, None) => "-".to_string(),
        }
    }

    /// The 12-digit container ID people know from `docker ps` / `crictl ps`.
    pub fn short_id(&self) -> Option<&str> {
        self.id.as_deref().map(short12)
    }
}

/// The first 12 characters; all of a shorter ID (a recording may hold anything).
fn short12(id: &str) -> &str {
    id.char_indices().nth(12).map_or(id, |(i, _)| &id[..i])
}

fn is_id(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// `8a2f4c1e-3b5d-4e6f-9a7b-1c2d3e4f5a6b` (systemd slices write `_` for `-`).
fn pod_uid(s: &str) -> Option<String> {
    let uid = s.replace('_', "-");
    let groups: Vec<&str> = uid.split('-').collect();
    let lens: Vec<usize> = groups.iter().map(|g| g.len()).collect();
    let hex = groups.iter().all(|g| g.bytes().all(|b| b.is_ascii_hexdigit()));
    (lens == [8, 4, 4, 4, 12] && hex).then(|| uid.to_ascii_lowercase())
}

/// A systemd scope or cgroupfs directory naming a container: (runtime, id).
fn scope(component: &str) -> Option<(Option<&'static str>, String)> {
    let name = component.strip_suffix(".scope").unwrap_or(component);
    const PREFIXES: [(&str, Option<&str>); 7] = [
        ("crio-conmon-", None),
        ("cri-containerd-", Some("containerd")),
        ("containerd-", Some("containerd")),
        ("nerdctl-", Some("containerd")),
        ("docker-", Some("docker")),
        ("crio-", Some("cri-o")),
        ("libpod-", Some("podman")),
    ];
    for (prefix, runtime) in PREFIXES {
        if let Some(id) = name.strip_prefix(prefix) {
            // CRI-O's monitor process is not the container.
            return (runtime.is_some() && is_id(id)).then(|| (runtime, id.to_ascii_lowercase()));
        }
    }
    None
}

/// Reads a container and pod out of a cgroup path (`/proc/PID/cgroup`'s path part), only where
/// the runtimes put them: a process may create cgroups below its own (a delegated subtree, a
/// systemd service with `Delegate=`), so a container is read only at its runtime's place — the
/// component right under `system.slice` / `machine.slice` / `docker` / `moby` / `default` /
/// `k8s.io`, or right under the pod in a kubelet tree — and nothing below it counts.
pub fn parse(path: &str) -> Option<Container> {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty() && *p != "..").collect();
    let first = *parts.first()?;
    if first == "kubepods" || first.starts_with("kubepods") {
        return parse_kubelet(&parts);
    }
    let runtime_of_bare_id = match first {
        "docker" | "moby" => Some("docker"),
        "default" | "k8s.io" => Some("containerd"),
        "system.slice" | "machine.slice" => None,
        _ => return None,
    };
    let under = *parts.get(1)?;
    let (runtime, id) = match scope(under) {
        Some(found) if matches!(first, "system.slice" | "machine.slice") => found,
        _ if runtime_of_bare_id.is_some() && is_id(under) => (runtime_of_bare_id, under.to_ascii_lowercase()),
        _ => return None,
    };
    Some(Container { runtime: runtime.map(str::to_string), id: Some(id), ..Default::default() })
}

/// A kubelet tree (systemd or cgroupfs driver, maybe seen through a cgroup namespace): QoS and
/// pod components, then the container right under the pod.
fn parse_kubelet(parts: &[&str]) -> Option<Container> {
    let mut c = Container::default();
    for (i, part) in parts.iter().enumerate() {
        let parent = i.checked_sub(1).map(|j| parts[j]);
        if let Some(rest) = part.strip_prefix("kubepods-").and_then(|p| p.strip_suffix(".slice")) {
            // kubepods-burstable.slice, kubepods-burstable-pod<uid>.slice, kubepods-pod<uid>.slice
            let (qos, pod) = match rest.split_once("pod") {
                Some((qos, uid)) => (qos.trim_end_matches('-'), pod_uid(uid)),
                None => (rest, None),
            };
            if !qos.is_empty() {
                c.qos = Some(qos.to_string());
            }
            if pod.is_some() {
                c.pod_uid = pod;
                c.qos.get_or_insert_with(|| "guaranteed".to_string());
            }
        } else if let Some(uid) = part.strip_prefix("pod").and_then(pod_uid) {
            c.pod_uid = Some(uid);
            c.qos = Some(match parent {
                Some(q @ ("burstable" | "besteffort")) => q.to_string(),
                _ => "guaranteed".to_string(),
            });
        } else if !matches!(*part, "kubepods" | "kubepods.slice" | "burstable" | "besteffort") {
            // Not a kubelet component before the pod: not a kubelet layout.
            return None;
        }
        if c.pod_uid.is_some() {
            // The pod's first child is its container (or CRI-O's conmon: none); below it,
            // whatever the container made of its cgroup does not count.
            if let Some(next) = parts.get(i + 1) {
                if let Some((runtime, id)) = scope(next) {
                    c.runtime = runtime.map(str::to_string);
                    c.id = Some(id);
                } else if is_id(next) {
                    c.id = Some(next.to_ascii_lowercase());
                }
            }
            return Some(c);
        }
    }
    None
}

/// The path of a process's cgroup from `/proc/PID/cgroup`: the unified (v2) line `0::PATH`,
/// else the v1 line that names a container (systemd's, memory's, ...), else the first path.
pub fn path_from_proc(text: &str) -> Option<String> {
    let entries: Vec<(&str, &str)> = text
        .lines()
        .filter_map(|l| {
            let mut it = l.splitn(3, ':');
            let (id, ctrl, path) = (it.next()?, it.next()?, it.next()?);
            Some((if id == "0" && ctrl.is_empty() { "" } else { ctrl }, path))
        })
        .collect();
    let unified = entries.iter().find(|(c, _)| c.is_empty()).map(|(_, p)| *p);
    // On a hybrid v1/v2 host the unified line may be just "/": prefer a v1 path that says more.
    let named = entries.iter().map(|(_, p)| *p).find(|p| parse(p).is_some());
    match (unified, named) {
        (Some(u), _) if parse(u).is_some() || named.is_none() => Some(u.to_string()),
        (_, Some(n)) => Some(n.to_string()),
        _ => entries.first().map(|(_, p)| p.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "3f2a9c1b7d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8";
    const POD: &str = "8a2f4c1e-3b5d-4e6f-9a7b-1c2d3e4f5a6b";
    const POD_: &str = "8a2f4c1e_3b5d_4e6f_9a7b_1c2d3e4f5a6b";

    #[test]
    fn short_forms_of_ids_a_recording_made_up_do_not_panic() {
        for (id, short) in [("abc", "abc"), ("", ""), ("ééééééééééééé", "éééééééééééé"), (ID, &ID[..12])]
        {
            let c = Container { runtime: Some("docker".into()), id: Some(id.into()), ..Default::default() };
            assert_eq!(c.short_id(), Some(short));
            assert_eq!(c.short(), format!("docker:{short}"));
        }
    }

    fn c(runtime: Option<&str>, id: bool, pod: bool, qos: Option<&str>) -> Option<Container> {
        Some(Container {
            runtime: runtime.map(str::to_string),
            id: id.then(|| ID.to_string()),
            pod_uid: pod.then(|| POD.to_string()),
            qos: qos.map(str::to_string),
        })
    }

    #[test]
    fn docker_systemd_and_cgroupfs() {
        let docker = c(Some("docker"), true, false, None);
        assert_eq!(parse(&format!("/system.slice/docker-{ID}.scope")), docker);
        assert_eq!(parse(&format!("/docker/{ID}")), docker);
        assert_eq!(parse(&format!("/moby/{ID}")), docker, "docker's containerd namespace");
        assert_eq!(docker.unwrap().short(), "docker:3f2a9c1b7d4e");
    }

    #[test]
    fn kubernetes_containerd_systemd_every_qos() {
        let p = format!(
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{POD_}.slice/cri-containerd-{ID}.scope"
        );
        assert_eq!(parse(&p), c(Some("containerd"), true, true, Some("burstable")));
        let p = format!("/kubepods.slice/kubepods-pod{POD_}.slice/cri-containerd-{ID}.scope");
        assert_eq!(parse(&p), c(Some("containerd"), true, true, Some("guaranteed")));
        let p = format!(
            "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{POD_}.slice/docker-{ID}.scope"
        );
        assert_eq!(parse(&p), c(Some("docker"), true, true, Some("besteffort")), "dockershim");
    }

    #[test]
    fn kubernetes_cgroupfs_and_crio() {
        assert_eq!(
            parse(&format!("/kubepods/burstable/pod{POD}/{ID}")),
            c(None, true, true, Some("burstable")),
            "a bare ID under a pod: runtime not named"
        );
        assert_eq!(parse(&format!("/kubepods/pod{POD}/{ID}")), c(None, true, true, Some("guaranteed")));
        assert_eq!(
            parse(&format!("/kubepods/besteffort/pod{POD}/crio-{ID}")),
            c(Some("cri-o"), true, true, Some("besteffort"))
        );
        let p = format!(
            "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{POD_}.slice/crio-{ID}.scope"
        );
        assert_eq!(parse(&p), c(Some("cri-o"), true, true, Some("besteffort")));
        let conmon = format!(
            "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{POD_}.slice/crio-conmon-{ID}.scope"
        );
        assert_eq!(parse(&conmon), c(None, false, true, Some("besteffort")), "conmon: the pod, no container");
    }

    #[test]
    fn pod_level_namespaced_podman_containerd_plain() {
        let pause = format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{POD_}.slice");
        let pod = parse(&pause).unwrap();
        assert_eq!((pod.id.as_deref(), pod.pod_uid.as_deref()), (None, Some(POD)));
        assert_eq!(pod.short(), format!("pod:{POD}"));
        // Read through the reader's cgroup namespace.
        let ns = format!("/../../kubepods-besteffort-pod{POD_}.slice/cri-containerd-{ID}.scope");
        assert_eq!(parse(&ns), c(Some("containerd"), true, true, Some("besteffort")));
        assert_eq!(
            parse(&format!("/machine.slice/libpod-{ID}.scope/container")),
            c(Some("podman"), true, false, None)
        );
        assert_eq!(parse(&format!("/default/{ID}")), c(Some("containerd"), true, false, None));
        assert_eq!(
            parse(&format!("/system.slice/nerdctl-{ID}.scope")),
            c(Some("containerd"), true, false, None)
        );
        for host in [
            "/",
            "/user.slice/user-1000.slice/session-3.scope",
            "/system.slice/containerd.service",
            "/init.scope",
        ] {
            assert_eq!(parse(host), None, "{host}");
        }
        assert_eq!(parse(&format!("/system.slice/docker-{}.scope", &ID[..63])), None, "63 digits: no ID");
    }

    #[test]
    fn cgroups_a_process_made_below_its_own_claim_nothing() {
        const B: &str = "9e8d7c6b5a4938271605f4e3d2c1b0a99e8d7c6b5a4938271605f4e3d2c1b0a9";
        let docker = c(Some("docker"), true, false, None);
        // Inside container ID, a delegated cgroup named like container B: still ID.
        assert_eq!(parse(&format!("/system.slice/docker-{ID}.scope/docker-{B}.scope")), docker);
        assert_eq!(parse(&format!("/docker/{ID}/{B}")), docker);
        // A systemd service or a user's delegated tree naming a container: nobody.
        for spoof in [
            format!("/system.slice/mine.service/docker-{B}.scope"),
            format!("/user.slice/user-1000.slice/user@1000.service/app.slice/docker-{B}.scope"),
            format!("/user.slice/kubepods.slice/kubepods-pod{POD_}.slice/cri-containerd-{B}.scope"),
            format!("/tenant/docker/{B}"),
            format!("/kubepods.slice/evil.slice/kubepods-pod{POD_}.slice/cri-containerd-{B}.scope"),
        ] {
            assert_eq!(parse(&spoof), None, "{spoof}");
        }
        // Below a pod's container: that container, not the one named deeper.
        let p = format!(
            "/kubepods.slice/kubepods-pod{POD_}.slice/cri-containerd-{ID}.scope/kubepods-pod{POD_}.slice/docker-{B}.scope"
        );
        assert_eq!(parse(&p), c(Some("containerd"), true, true, Some("guaranteed")));
    }

    #[test]
    fn path_from_proc_cgroup_v2_v1_hybrid() {
        assert_eq!(
            path_from_proc("0::/user.slice/session-1.scope\n").as_deref(),
            Some("/user.slice/session-1.scope")
        );
        let v1 = format!("12:pids:/docker/{ID}\n11:memory:/docker/{ID}\n1:name=systemd:/docker/{ID}\n");
        assert_eq!(path_from_proc(&v1), Some(format!("/docker/{ID}")));
        let hybrid = format!("1:name=systemd:/system.slice/docker-{ID}.scope\n0::/\n");
        assert_eq!(path_from_proc(&hybrid), Some(format!("/system.slice/docker-{ID}.scope")));
        assert_eq!(path_from_proc(""), None);
    }
}
