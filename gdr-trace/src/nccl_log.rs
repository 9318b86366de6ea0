//! A parser for `NCCL_DEBUG=INFO` output: what NCCL *intended* (version, network, per-HCA and
//! per-GPU GDR decisions, DMA-BUF, channels `via NET/IB/<n>[/GDRDMA]`, GPU↔GPU channels
//! `via P2P/...` and `via SHM/...`, `P2P is disabled between ...`, environment overrides).
//! Channel lines are parsed in [`channels`].
//!
//! It never panics: any bytes are accepted (invalid UTF-8 is replaced), unknown lines are
//! ignored, and a truncated log yields what its complete lines say. Lines may carry NCCL's
//! `host:pid:tid [cudaDev] NCCL INFO ` prefix, a launcher prefix before it (`[default0]:`), or
//! none (grepped fragments).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

mod channels;
use channels::leading_u32;
pub use channels::{Channel, GpuRef, P2pChannel, P2pDisabled, PeerTransport};

/// A network device NCCL listed (`NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE ...`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NetDevice {
    /// `IB`, `Socket`, a plugin's name.
    pub transport: String,
    pub index: u32,
    pub name: String,
    pub port: Option<u32>,
    /// `IB` or `RoCE` for IB devices.
    pub link: Option<String>,
}

/// `NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'`: the NIC side can take GPU memory
/// (peer memory or DMA-BUF).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HcaGdr {
    pub transport: String,
    pub index: Option<u32>,
    pub name: String,
    pub enabled: bool,
    /// 1-based line number.
    pub line: usize,
}

/// `GPU Direct RDMA Disabled for GPU 0 / HCA 0 (distance 8 > 5)`: NCCL's per-pair decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuGdr {
    /// As printed: a rank/cuda device number, or a bus id in hex in older versions.
    pub gpu: String,
    /// As printed: a net device index (hex in newer versions).
    pub hca: String,
    pub enabled: bool,
    pub distance: Option<u32>,
    pub level: Option<u32>,
    pub line: usize,
}

/// Everything recognized in a log.
#[derive(Debug, Clone, Default, Serialize)]
pub struct NcclLog {
    pub version: Option<String>,
    /// `Using network IB` (last seen).
    pub network: Option<String>,
    pub net_devices: Vec<NetDevice>,
    pub hca_gdr: Vec<HcaGdr>,
    pub gpu_gdr: Vec<GpuGdr>,
    /// GPUs with `DMA-BUF is available on GPU device N`.
    pub dmabuf_gpus: BTreeSet<u32>,
    pub channels: Vec<Channel>,
    /// Channels between GPUs of one node: `via P2P/IPC`, `P2P/CUMEM`, `P2P/direct pointer`, `SHM/...`.
    pub p2p_channels: Vec<P2pChannel>,
    /// `P2P is disabled between [NVLINK] connected GPUs a and b` (INFO or WARN).
    pub p2p_disabled: Vec<P2pDisabled>,
    /// `NVLS multicast support is available on dev N`: the node's GPUs hang off NVSwitch, so
    /// every GPU pair there has NVLink.
    pub nvls: bool,
    /// `use ring PXN 0 GDR 1` (last seen).
    pub ring_gdr: Option<bool>,
    /// `NCCL_X set by environment to Y`.
    pub env: BTreeMap<String, String>,
    /// `NET/IB : No device found.`
    pub no_ib_device: bool,
    /// `NCCL WARN` messages (first 50).
    pub warnings: Vec<String>,
    /// `host:pid` of the processes that printed.
    pub processes: BTreeSet<String>,
    pub lines: usize,
    pub nccl_lines: usize,
    pub recognized: usize,
    /// The text ends without a newline: the last line may be cut short (its channel, if any,
    /// is not counted, since a cut removes the `/GDRDMA` suffix).
    pub truncated: bool,
}

impl NcclLog {
    /// The last per-HCA decision NCCL printed for `name`.
    pub fn hca_enabled(&self, name: &str) -> Option<bool> {
        self.hca_gdr.iter().rev().find(|h| h.name == name).map(|h| h.enabled)
    }

    /// Distinct HCA names with their last decision.
    pub fn hcas(&self) -> BTreeMap<String, bool> {
        self.hca_gdr.iter().map(|h| (h.name.clone(), h.enabled)).collect()
    }

    /// The RDMA device name of a net device index, from the `Using [n]name` list.
    pub fn net_device_name(&self, net: &str, index: u32) -> Option<&str> {
        self.net_devices
            .iter()
            .find(|d| d.index == index && d.transport.eq_ignore_ascii_case(net))
            .map(|d| d.name.as_str())
    }

    /// Net channels as (with GDRDMA, without).
    pub fn channel_counts(&self) -> (usize, usize) {
        let gdr = self.channels.iter().filter(|c| c.gdr).count();
        (gdr, self.channels.len() - gdr)
    }

    /// GPU↔GPU channels as (via P2P, via SHM).
    pub fn p2p_counts(&self) -> (usize, usize) {
        let p2p = self.p2p_channels.iter().filter(|c| c.transport == PeerTransport::P2p).count();
        (p2p, self.p2p_channels.len() - p2p)
    }

    /// Whether anything at all was recognized.
    pub fn is_empty(&self) -> bool {
        self.recognized == 0
    }
}

/// Parses raw bytes (a file as read).
pub fn parse_bytes(bytes: &[u8]) -> NcclLog {
    parse(&String::from_utf8_lossy(bytes))
}

/// Parses log text.
pub fn parse(text: &str) -> NcclLog {
    let mut log = NcclLog { truncated: !text.is_empty() && !text.ends_with('\n'), ..Default::default() };
    let count = text.lines().count();
    for (i, raw) in text.lines().enumerate() {
        log.lines += 1;
        let partial = log.truncated && i + 1 == count;
        parse_line(&mut log, raw, i + 1, partial);
    }
    log
}

fn parse_line(log: &mut NcclLog, raw: &str, line: usize, partial: bool) {
    let raw = raw.trim_end_matches('\r');
    let (prefix, msg, warn) = if let Some((p, m)) = raw.split_once("NCCL INFO ") {
        (p, m, false)
    } else if let Some((p, m)) = raw.split_once("NCCL WARN ") {
        (p, m, true)
    } else {
        ("", raw, false)
    };
    let msg = msg.trim();
    if !prefix.is_empty() || raw.contains("NCCL INFO") || raw.contains("NCCL WARN") {
        log.nccl_lines += 1;
        if let Some(p) = process_of(prefix) {
            log.processes.insert(p);
        }
    }
    if warn {
        if log.warnings.len() < 50 {
            log.warnings.push(msg.to_string());
        }
        log.p2p_disabled.extend(channels::parse_p2p_disabled(msg, line));
        log.recognized += 1;
        return;
    }
    if partial && msg.starts_with("Channel ") {
        return;
    }
    if parse_message(log, msg, cuda_dev_of(prefix), line) {
        log.recognized += 1;
    }
}

/// `host:pid` from a prefix like `node01:4242:4290 [3] `.
fn process_of(prefix: &str) -> Option<String> {
    prefix.split_whitespace().find_map(|tok| {
        let tok = tok.rsplit("]:").next().unwrap_or(tok);
        let mut it = tok.rsplitn(3, ':');
        let (tid, pid, host) = (it.next()?, it.next()?, it.next()?);
        (is_num(tid) && is_num(pid) && !host.is_empty()).then(|| format!("{host}:{pid}"))
    })
}

/// The `[N]` cudaDev just before `NCCL INFO`.
fn cuda_dev_of(prefix: &str) -> Option<u32> {
    let tok = prefix.split_whitespace().last()?;
    tok.strip_prefix('[')?.strip_suffix(']')?.parse().ok()
}

fn is_num(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

fn parse_message(log: &mut NcclLog, msg: &str, cuda_dev: Option<u32>, line: usize) -> bool {
    if let Some(rest) = msg.strip_prefix("NCCL version ") {
        log.version = rest.split_whitespace().next().map(str::to_string);
        return log.version.is_some();
    }
    if let Some(rest) = msg.strip_prefix("Using network ") {
        log.network = rest.split_whitespace().next().map(str::to_string);
        return log.network.is_some();
    }
    if let Some(rest) = msg.strip_prefix("DMA-BUF is available on GPU device ") {
        if let Some(n) = leading_u32(rest) {
            log.dmabuf_gpus.insert(n);
            return true;
        }
        return false;
    }
    if let Some((var, value)) = msg.split_once(" set by environment to ") {
        if var.starts_with("NCCL_") && !var.contains(' ') {
            log.env.insert(var.to_string(), value.trim().trim_end_matches('.').to_string());
            return true;
        }
    }
    if msg.starts_with("Channel ") && msg.contains(" via NET/") {
        let c = channels::parse_net(msg, cuda_dev, line);
        let found = c.is_some();
        log.channels.extend(c);
        return found;
    }
    if msg.starts_with("Channel ") && (msg.contains(" via P2P/") || msg.contains(" via SHM")) {
        let c = channels::parse_p2p(msg, cuda_dev, line);
        let found = c.is_some();
        log.p2p_channels.extend(c);
        return found;
    }
    if let Some(rest) = msg.strip_prefix("NVLS multicast support is ") {
        log.nvls |= rest.starts_with("available");
        return rest.starts_with("available") || rest.starts_with("not available");
    }
    if msg.starts_with("P2P is disabled between ") {
        let d = channels::parse_p2p_disabled(msg, line);
        let found = d.is_some();
        log.p2p_disabled.extend(d);
        return found;
    }
    if let Some(pos) = msg.find("GPU Direct RDMA ") {
        let (head, tail) = (&msg[..pos], &msg[pos + "GPU Direct RDMA ".len()..]);
        return parse_gdr(log, head, tail, line);
    }
    if let Some(pos) = msg.find("use ring PXN ") {
        let tail = &msg[pos..];
        if let Some(g) = tail.find(" GDR ").and_then(|i| leading_u32(&tail[i + 5..])) {
            log.ring_gdr = Some(g != 0);
            return true;
        }
        return false;
    }
    if let Some(rest) = msg.strip_prefix("NET/") {
        let Some((transport, body)) = rest.split_once(" : ") else {
            return false;
        };
        let body = body.trim();
        if body.starts_with("No device found") {
            log.no_ib_device = true;
            return true;
        }
        if let Some(list) = body.strip_prefix("Using ") {
            return parse_device_list(log, transport.trim(), list);
        }
    }
    false
}

/// `Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB eth0:10.0.0.1<0>`
fn parse_device_list(log: &mut NcclLog, transport: &str, list: &str) -> bool {
    let list = list.split(';').next().unwrap_or("");
    let mut found = false;
    for tok in list.split_whitespace() {
        let Some(rest) = tok.strip_prefix('[') else {
            continue;
        };
        let Some((idx, dev)) = rest.split_once(']') else {
            continue;
        };
        let (Ok(index), false) = (idx.parse::<u32>(), dev.is_empty()) else {
            continue;
        };
        let (name_port, link) = match dev.split_once('/') {
            Some((np, l)) => (np, Some(l.to_string())),
            None => (dev, None),
        };
        let (name, port) = match name_port.rsplit_once(':') {
            Some((n, p)) if is_num(p) => (n, p.parse().ok()),
            _ => (name_port, None),
        };
        log.net_devices.retain(|d| !(d.transport == transport && d.index == index));
        log.net_devices.push(NetDevice {
            transport: transport.to_string(),
            index,
            name: name.to_string(),
            port,
            link,
        });
        found = true;
    }
    found
}

/// `Enabled for HCA 0 'mlx5_0'` (head `NET/IB : `) or
/// `Disabled for GPU 0 / HCA 0 (distance 8 > 5)` (with optional `, read 1 mode Default`).
fn parse_gdr(log: &mut NcclLog, head: &str, tail: &str, line: usize) -> bool {
    let (enabled, rest) = if let Some(r) = tail.strip_prefix("Enabled for ") {
        (true, r)
    } else if let Some(r) = tail.strip_prefix("Disabled for ") {
        (false, r)
    } else {
        return false;
    };
    if let Some(r) = rest.strip_prefix("HCA ") {
        let index = leading_u32(r);
        let Some((_, quoted)) = r.split_once('\'') else {
            return false;
        };
        let Some((name, _)) = quoted.split_once('\'') else {
            return false;
        };
        if name.is_empty() {
            return false;
        }
        let transport = head
            .trim()
            .strip_prefix("NET/")
            .and_then(|t| t.split(':').next())
            .map_or("IB".to_string(), |t| t.trim().to_string());
        log.hca_gdr.push(HcaGdr { transport, index, name: name.to_string(), enabled, line });
        return true;
    }
    if let Some(r) = rest.strip_prefix("GPU ") {
        let Some((gpu, r)) = r.split_once(" / HCA ") else {
            return false;
        };
        let hca = r.split_whitespace().next().unwrap_or("").trim_end_matches(',');
        if gpu.trim().is_empty() || hca.is_empty() {
            return false;
        }
        let (mut distance, mut level) = (None, None);
        if let Some((_, d)) = r.split_once("(distance ") {
            let mut it = d.split_whitespace();
            distance = it.next().and_then(leading_u32);
            let _op = it.next();
            level = it.next().and_then(leading_u32);
        }
        log.gpu_gdr.push(GpuGdr {
            gpu: gpu.trim().to_string(),
            hca: hca.to_string(),
            enabled,
            distance,
            level,
            line,
        });
        return true;
    }
    false
}

#[cfg(test)]
mod tests;
