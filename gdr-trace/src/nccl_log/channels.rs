//! Channel lines: over the network (`via NET/IB/0/GDRDMA`) and between the GPUs of one node
//! (`via P2P/IPC`, `via P2P/CUMEM`, `via P2P/direct pointer`, `via SHM/direct/direct`), and
//! NCCL's `P2P is disabled between ... GPUs a and b`.
//!
//! Formats (NVIDIA/nccl src/transport/{net,p2p,shm}.cc, src/graph/paths.cc):
//! `Channel %02d/%01d : %d[%d] -> %d[%d] via P2P/IPC%s%s` (rank[nvmlDev], `/read`, `/CE`),
//! `... via P2P/%s%s%s` (CUMEM or MNNVL), `... via P2P/direct pointer%s`,
//! `Channel %02d : %d[%d] -> %d[%d] via SHM/%s/%s`; NCCL before 2.19 printed the bus id in hex in
//! the brackets (`0[18000]`).

use serde::Serialize;

/// A channel that goes over the network (`Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Channel {
    pub channel: String,
    pub from: String,
    pub to: String,
    /// `send` / `receive`, when printed.
    pub direction: Option<String>,
    /// The whole transport token, `NET/IB/0/GDRDMA`.
    pub via: String,
    /// `IB`, `Socket`, a plugin name.
    pub net: String,
    /// NCCL's net device index (see [`NcclLog::net_devices`]).
    pub dev: Option<u32>,
    pub gdr: bool,
    /// The `[cudaDev]` of the printing process, when the prefix has one.
    pub cuda_dev: Option<u32>,
    pub line: usize,
}

/// A GPU as NCCL names it in a channel line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum GpuRef {
    /// NVML's index: PCI bus order over the GPUs the process can see.
    NvmlIndex(u32),
    /// The PCI address, from an older NCCL's hex bus id (`18000` -> `0000:18:00.0`).
    BusId(String),
}

impl GpuRef {
    /// `[0]` is an NVML index; `[18000]`, `[1b000]` are bus ids (NCCL's busIdToInt64: domain,
    /// bus, device, function as hex digits).
    pub fn parse(s: &str) -> Option<Self> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        if s.len() <= 3 && s.bytes().all(|b| b.is_ascii_digit()) {
            return s.parse().ok().map(GpuRef::NvmlIndex);
        }
        let v = u64::from_str_radix(s, 16).ok()?;
        Some(GpuRef::BusId(format!(
            "{:04x}:{:02x}:{:02x}.{:x}",
            v >> 20,
            (v >> 12) & 0xff,
            (v >> 4) & 0xff,
            v & 0xf
        )))
    }
}

impl std::fmt::Display for GpuRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GpuRef::NvmlIndex(i) => write!(f, "GPU {i}"),
            GpuRef::BusId(b) => f.write_str(b),
        }
    }
}

/// How two GPUs of one node are connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PeerTransport {
    /// CUDA P2P: IPC handles, cuMem handles or (one process) direct pointers.
    P2p,
    /// Host memory shared between the processes: P2P was not available or not allowed.
    Shm,
}

/// `Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read`, `Channel 01 : 1[1] -> 0[0] via SHM/direct/direct`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct P2pChannel {
    pub channel: String,
    /// Ranks.
    pub from: String,
    pub to: String,
    pub from_gpu: Option<GpuRef>,
    pub to_gpu: Option<GpuRef>,
    pub transport: PeerTransport,
    /// What follows `P2P/` or `SHM/` up to the next `/`: `IPC`, `CUMEM`, `MNNVL`, `direct pointer`;
    /// for SHM the send side, `direct` or `CE`.
    pub mode: String,
    /// Everything after `via `.
    pub via: String,
    pub cuda_dev: Option<u32>,
    pub line: usize,
}

/// `P2P is disabled between connected GPUs 1 and 0` (INFO: NVML reports no P2P although the
/// topology would allow it) or `... between NVLINK connected GPUs 5 and 4` (WARN: NCCL stops).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct P2pDisabled {
    /// NVML indices.
    pub gpu_a: u32,
    pub gpu_b: u32,
    pub nvlink: bool,
    pub line: usize,
}

/// `Channel 00/0 : <from> -> <to> [dir]` before ` via `: (channel, from, to, direction, via).
fn split_channel(msg: &str) -> Option<(&str, &str, &str, Option<String>, &str)> {
    let (left, via) = msg.split_once(" via ")?;
    let (channel, peers) = left.strip_prefix("Channel ")?.split_once(" : ")?;
    let (from, to_part) = peers.split_once(" -> ")?;
    let mut to_it = to_part.split_whitespace();
    let to = to_it.next().unwrap_or("");
    let direction = to_it.next().and_then(|d| d.strip_prefix('[')?.strip_suffix(']')).map(str::to_string);
    Some((channel.trim(), from.trim(), to, direction, via.trim()))
}

/// `Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA`
pub(super) fn parse_net(msg: &str, cuda_dev: Option<u32>, line: usize) -> Option<Channel> {
    let (channel, from, to, direction, via_part) = split_channel(msg)?;
    let via = via_part.split_whitespace().next()?;
    let comps: Vec<&str> = via.split('/').collect();
    if comps.first() != Some(&"NET") || comps.len() < 2 || comps[1].is_empty() {
        return None;
    }
    Some(Channel {
        channel: channel.to_string(),
        from: from.to_string(),
        to: to.to_string(),
        direction,
        via: via.to_string(),
        net: comps[1].to_string(),
        dev: comps.get(2).and_then(|d| leading_u32(d)),
        gdr: comps.iter().skip(2).any(|c| *c == "GDRDMA"),
        cuda_dev,
        line,
    })
}

/// `rank[dev]` -> (rank, the GPU).
fn rank_gpu(s: &str) -> (String, Option<GpuRef>) {
    match s.split_once('[') {
        Some((rank, rest)) => (rank.to_string(), rest.strip_suffix(']').and_then(GpuRef::parse)),
        None => (s.to_string(), None),
    }
}

/// `Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read`, `... via SHM/direct/direct`.
pub(super) fn parse_p2p(msg: &str, cuda_dev: Option<u32>, line: usize) -> Option<P2pChannel> {
    let (channel, from, to, _, via) = split_channel(msg)?;
    let (transport, rest) = if let Some(r) = via.strip_prefix("P2P/") {
        (PeerTransport::P2p, r)
    } else if let Some(r) = via.strip_prefix("SHM/") {
        (PeerTransport::Shm, r)
    } else {
        return None;
    };
    let mode = rest.split('/').next().unwrap_or("").trim();
    if mode.is_empty() || from.is_empty() || to.is_empty() {
        return None;
    }
    let ((from, from_gpu), (to, to_gpu)) = (rank_gpu(from), rank_gpu(to));
    Some(P2pChannel {
        channel: channel.to_string(),
        from,
        to,
        from_gpu,
        to_gpu,
        transport,
        mode: mode.to_string(),
        via: via.to_string(),
        cuda_dev,
        line,
    })
}

/// `P2P is disabled between [NVLINK ]connected GPUs 1 and 0. You can ...`
pub(super) fn parse_p2p_disabled(msg: &str, line: usize) -> Option<P2pDisabled> {
    let rest = msg.strip_prefix("P2P is disabled between ")?;
    let nvlink = rest.starts_with("NVLINK ");
    let (_, gpus) = rest.split_once("GPUs ")?;
    let (a, b) = gpus.split_once(" and ")?;
    let (Some(gpu_a), Some(gpu_b)) = (leading_u32(a), leading_u32(b)) else {
        return None;
    };
    Some(P2pDisabled { gpu_a, gpu_b, nvlink, line })
}

/// The decimal number at the start of `s`.
pub(crate) fn leading_u32(s: &str) -> Option<u32> {
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    s[..end].parse().ok()
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::*;

    #[test]
    fn p2p_and_shm_channels_in_every_format() {
        let log = parse(
            "h:1:9 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read\n\
             h:1:9 [0] NCCL INFO Channel 01/1 : 0[0] -> 1[1] via P2P/CUMEM/read/CE\n\
             h:1:9 [2] NCCL INFO Channel 02/0 : 2[2] -> 3[3] via P2P/direct pointer\n\
             h:1:9 [3] NCCL INFO Channel 03 : 3[3] -> 4[4] via SHM/direct/direct\n\
             h:1:9 [4] NCCL INFO Channel 04 : 4[3d000] -> 5[98000] via SHM/CE/direct\n\
             h:1:9 [4] NCCL INFO Channel 05/0 : 4[4] -> 12[4] [send] via NET/IB/0/GDRDMA\n",
        );
        assert_eq!(log.p2p_counts(), (3, 2));
        assert_eq!(log.channel_counts(), (1, 0), "NET channels stay apart");
        let c = &log.p2p_channels;
        assert_eq!((c[0].mode.as_str(), c[0].via.as_str()), ("IPC", "P2P/IPC/read"));
        assert_eq!((c[0].from.as_str(), c[0].to.as_str()), ("0", "1"));
        assert_eq!(c[1].mode, "CUMEM");
        assert_eq!((c[2].mode.as_str(), c[2].cuda_dev), ("direct pointer", Some(2)));
        assert_eq!(
            (c[3].transport, c[3].mode.as_str(), c[3].channel.as_str()),
            (PeerTransport::Shm, "direct", "03")
        );
        assert_eq!(c[3].from_gpu, Some(GpuRef::NvmlIndex(3)));
        assert_eq!(
            c[4].from_gpu,
            Some(GpuRef::BusId("0000:3d:00.0".into())),
            "NCCL < 2.19 prints the bus id"
        );
        assert_eq!(c[4].to_gpu, Some(GpuRef::BusId("0000:98:00.0".into())));
        assert_eq!(c[4].line, 5);
        assert_eq!(log.recognized, 6);
    }

    #[test]
    fn p2p_disabled_lines_info_and_warn() {
        let log = parse(
            "h:1:9 [1] NCCL INFO P2P is disabled between connected GPUs 1 and 2. You can repress this message with NCCL_IGNORE_DISABLED_P2P=1.\n\
             h:1:9 [5] NCCL WARN P2P is disabled between NVLINK connected GPUs 5 and 4. This should not be the case given their connectivity, and is probably due to a hardware issue. If you still want to proceed, you can set NCCL_IGNORE_DISABLED_P2P=1.\n\
             h:1:9 [5] NCCL INFO P2P is disabled between connected GPUs x and 4.\n",
        );
        assert_eq!(
            log.p2p_disabled,
            vec![
                P2pDisabled { gpu_a: 1, gpu_b: 2, nvlink: false, line: 1 },
                P2pDisabled { gpu_a: 5, gpu_b: 4, nvlink: true, line: 2 },
            ]
        );
        assert_eq!(log.warnings.len(), 1);
        assert_eq!(log.recognized, 2, "a line without two GPU numbers is not recognized");
    }

    #[test]
    fn malformed_p2p_lines_are_ignored() {
        for l in [
            "Channel 00/0 : 0[0] -> 1[1] via P2P/",
            "Channel 00/0 : 0[0] ->  via SHM/direct/direct",
            "Channel 00/0 0[0] -> 1[1] via P2P/IPC",
            "Channel 00/0 : 0[zz] -> 1[1] via P2P/IPC",
        ] {
            let log = parse(&format!("{l}\n"));
            assert!(log.p2p_channels.iter().all(|c| c.from_gpu.is_none() || c.mode == "IPC"), "{l}");
            if l.contains("0[zz]") {
                assert_eq!(log.p2p_channels[0].from_gpu, None);
            } else {
                assert!(log.p2p_channels.is_empty(), "{l}: {:?}", log.p2p_channels);
            }
        }
        assert_eq!(GpuRef::parse("18000"), Some(GpuRef::BusId("0000:18:00.0".into())));
        assert_eq!(GpuRef::parse("1b001"), Some(GpuRef::BusId("0000:1b:00.1".into())));
        assert_eq!(GpuRef::parse("10018000"), Some(GpuRef::BusId("0100:18:00.0".into())));
        assert_eq!(GpuRef::parse("7"), Some(GpuRef::NvmlIndex(7)));
        assert_eq!(GpuRef::parse(""), None);
    }
}
