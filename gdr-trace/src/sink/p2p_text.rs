//! Text for the GPU↔GPU path: a line per import of GPU memory from another process, and the
//! P2P section of the summary (copies per device pair with their verdict, peer access).

use crate::{
    p2p::{GpuIpc, P2pReport},
    units::human_bytes,
};

/// Command names come from the traced processes: no control characters reach the terminal.
fn esc(s: &str) -> String {
    crate::escape::field(s).into_owned()
}

pub fn ipc_line(ipc: &GpuIpc) -> String {
    let c = &ipc.ctx;
    let exporter = match (ipc.exporter_pid, ipc.exporter_uid) {
        (Some(pid), Some(uid)) => format!(
            "exported by pid {pid} ({}) uid {uid}{}",
            esc(ipc.exporter_comm.as_deref().unwrap_or("?")),
            if uid != c.uid { " (another user)" } else { "" }
        ),
        _ => "exporter unknown".into(),
    };
    format!(
        "IPC pid {} ({}) uid {} {} len {} {exporter} => {}",
        c.pid,
        esc(&c.comm),
        c.uid,
        ipc.op,
        ipc.length.map_or("?".into(), human_bytes),
        if ipc.ret == 0 { "ok".to_string() } else { format!("CUresult {}", ipc.ret) },
    )
}

/// The P2P section (None when no process copied between devices or enabled peer access).
pub fn summary(report: &P2pReport, last: bool) -> Option<String> {
    if report.processes.is_empty() {
        return None;
    }
    let mut t = crate::term::table();
    t.set_header(["PID", "COMM", "GPU PAIR", "VERDICT", "CALLS", "BYTES", "PEER ACCESS"]);
    for p in &report.processes {
        let peers: Vec<String> =
            p.peer_access.iter().map(|a| format!("{}->{}", a.device, a.peer_device)).collect();
        let peers = if peers.is_empty() { "none".to_string() } else { peers.join(" ") };
        if p.pairs.is_empty() {
            t.add_row([
                p.pid.to_string(),
                esc(&p.comm),
                "-".into(),
                "-".into(),
                "0".into(),
                "0 B".into(),
                peers,
            ]);
            continue;
        }
        for pair in &p.pairs {
            t.add_row([
                p.pid.to_string(),
                esc(&p.comm),
                format!("GPU{} -> GPU{}", pair.src_device, pair.dst_device),
                pair.verdict.to_string(),
                pair.calls.to_string(),
                human_bytes(pair.bytes),
                peers.clone(),
            ]);
        }
    }
    let mut text =
        format!("-- P2P {} --\n{}", if last { "summary" } else { "so far" }, crate::term::render(&t));
    for p in report.processes.iter().filter(|p| p.staged_bytes() > 0) {
        text.push_str(&format!(
            "\n  hint: pid {} copied {} between GPUs without peer access: the driver staged it through host memory (enable peer access, or check `gdr-trace check` for the pair)",
            p.pid,
            human_bytes(p.staged_bytes())
        ));
    }
    Some(text)
}
