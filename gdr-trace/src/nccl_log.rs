//! A parser for `NCCL_DEBUG=INFO` output: what NCCL *intended* (version, network, per-HCA and
//! per-GPU GDR decisions, DMA-BUF, channels `via NET/IB/<n>[/GDRDMA]`, environment overrides).
//!
//! It never panics: any bytes are accepted (invalid UTF-8 is replaced), unknown lines are
//! ignored, and a truncated log yields what its complete lines say. Lines may carry NCCL's
//! `host:pid:tid [cudaDev] NCCL INFO ` prefix, a launcher prefix before it (`[default0]:`), or
//! none (grepped fragments).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

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

fn leading_u32(s: &str) -> Option<u32> {
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    s[..end].parse().ok()
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
        return parse_channel(log, msg, cuda_dev, line);
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

/// `Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA`
fn parse_channel(log: &mut NcclLog, msg: &str, cuda_dev: Option<u32>, line: usize) -> bool {
    let Some((left, via_part)) = msg.split_once(" via ") else {
        return false;
    };
    let Some(via) = via_part.split_whitespace().next() else {
        return false;
    };
    let Some(rest) = left.strip_prefix("Channel ") else {
        return false;
    };
    let Some((channel, peers)) = rest.split_once(" : ") else {
        return false;
    };
    let Some((from, to_part)) = peers.split_once(" -> ") else {
        return false;
    };
    let mut to_it = to_part.split_whitespace();
    let to = to_it.next().unwrap_or("").to_string();
    let direction = to_it.next().and_then(|d| d.strip_prefix('[')?.strip_suffix(']')).map(str::to_string);
    let comps: Vec<&str> = via.split('/').collect();
    if comps.first() != Some(&"NET") || comps.len() < 2 || comps[1].is_empty() {
        return false;
    }
    log.channels.push(Channel {
        channel: channel.trim().to_string(),
        from: from.trim().to_string(),
        to,
        direction,
        via: via.to_string(),
        net: comps[1].to_string(),
        dev: comps.get(2).and_then(|d| leading_u32(d)),
        gdr: comps.iter().skip(2).any(|c| *c == "GDRDMA"),
        cuda_dev,
        line,
    });
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    const ENABLED: &str = "\
node01:4242:4242 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
node01:4242:4290 [0] NCCL INFO NCCL_NET_GDR_LEVEL set by environment to PHB
node01:4242:4290 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB eth0:10.0.0.1<0>
node01:4242:4290 [0] NCCL INFO Using network IB
node01:4242:4290 [0] NCCL INFO DMA-BUF is available on GPU device 0
node01:4242:4290 [0] NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'
node01:4242:4290 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 1 'mlx5_1'
node01:4242:4290 [0] NCCL INFO GPU Direct RDMA Enabled for GPU 0 / HCA 0 (distance 4 <= 5), read 1 mode Default
node01:4242:4290 [0] NCCL INFO GPU Direct RDMA Disabled for GPU 0 / HCA 1 (distance 9 > 5)
node01:4242:4290 [0] NCCL INFO Channel 00/0 : 8[0] -> 0[0] [receive] via NET/IB/0/GDRDMA
node01:4242:4290 [0] NCCL INFO Channel 01/0 : 0[0] -> 8[0] [send] via NET/IB/1
node01:4242:4290 [0] NCCL INFO Channel 02/0 : 0[0] -> 1[1] via P2P/IPC
node01:4242:4290 [0] NCCL INFO Connected all rings, use ring PXN 0 GDR 1
node01:4242:4290 [0] NCCL WARN NET/IB : Got completion from peer with error 12
";

    #[test]
    fn parses_every_kind_of_line() {
        let log = parse(ENABLED);
        assert_eq!(log.version.as_deref(), Some("2.21.5+cuda12.4"));
        assert_eq!(log.network.as_deref(), Some("IB"));
        assert_eq!(log.env.get("NCCL_NET_GDR_LEVEL").map(String::as_str), Some("PHB"));
        assert_eq!(log.net_devices.len(), 2);
        assert_eq!(log.net_devices[1].name, "mlx5_1");
        assert_eq!(log.net_devices[1].port, Some(1));
        assert_eq!(log.net_devices[1].link.as_deref(), Some("RoCE"));
        assert_eq!(log.hca_enabled("mlx5_0"), Some(true));
        assert_eq!(log.hca_enabled("mlx5_1"), Some(false));
        assert_eq!(log.hca_gdr[0].index, Some(0));
        assert_eq!(log.gpu_gdr.len(), 2);
        assert_eq!((log.gpu_gdr[1].distance, log.gpu_gdr[1].level), (Some(9), Some(5)));
        assert!(!log.gpu_gdr[1].enabled);
        assert_eq!(log.dmabuf_gpus.iter().copied().collect::<Vec<_>>(), vec![0]);
        assert_eq!(log.channels.len(), 2, "P2P channels are not network channels");
        assert!(log.channels[0].gdr);
        assert_eq!(log.channels[0].direction.as_deref(), Some("receive"));
        assert_eq!(log.channels[1].dev, Some(1));
        assert_eq!(log.channels[1].cuda_dev, Some(0));
        assert_eq!(log.channel_counts(), (1, 1));
        assert_eq!(log.net_device_name("IB", 1), Some("mlx5_1"));
        assert_eq!(log.ring_gdr, Some(true));
        assert_eq!(log.warnings.len(), 1);
        assert!(log.processes.contains("node01:4242"));
        assert_eq!(log.lines, 14);
        assert_eq!(log.recognized, 13);
    }

    #[test]
    fn older_and_prefixed_formats() {
        let text = "[default3]:host-a:81:126 [3] NCCL INFO NET/IB : GPU Direct RDMA Disabled for GPU 1b000 / HCA 0 (distance 4 >= 4)\n\
                    Channel 00/0 : 0[0] -> 1[0] [send] via NET/IBext_v8/2(1)/GDRDMA/Shared\n\
                    NET/Socket : Using [0]eth0:10.1.15.172<0>\n";
        let log = parse(text);
        assert_eq!(log.gpu_gdr[0].gpu, "1b000");
        assert_eq!(log.gpu_gdr[0].hca, "0");
        assert!(log.processes.contains("host-a:81"));
        assert_eq!(log.channels[0].net, "IBext_v8");
        assert_eq!(log.channels[0].dev, Some(2));
        assert!(log.channels[0].gdr);
        assert_eq!(log.net_devices[0].transport, "Socket");
        assert_eq!(log.net_devices[0].name, "eth0:10.1.15.172<0>");
    }

    #[test]
    fn unknown_lines_are_ignored_and_truncation_keeps_whole_lines() {
        let log = parse("hello\nNCCL INFO Something new we do not know\n\n");
        assert!(log.is_empty());
        assert!(!log.truncated);
        assert_eq!(log.nccl_lines, 1);
        // A channel line cut before its /GDRDMA suffix is not counted as a host-staged channel.
        let cut = ENABLED.find("/GDRDMA").unwrap();
        let log = parse(&ENABLED[..cut]);
        assert!(log.truncated);
        assert!(log.channels.is_empty());
        // Cut in the middle of the HCA line: the quote never closes, the line is dropped.
        let cut = ENABLED.find("'mlx5_0'").unwrap() + 4;
        let log = parse(&ENABLED[..cut]);
        assert_eq!(log.version.as_deref(), Some("2.21.5+cuda12.4"));
        assert!(log.hca_gdr.is_empty());
        assert_eq!(log.dmabuf_gpus.len(), 1);
    }

    /// xorshift64*: deterministic, no dependency.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n.max(1) as u64) as usize
        }
    }

    const TOKENS: [&str; 24] = [
        "NCCL INFO ",
        "NCCL WARN ",
        "GPU Direct RDMA ",
        "Enabled for ",
        "Disabled for ",
        "HCA ",
        "GPU ",
        " / HCA ",
        "'",
        "(distance ",
        " > ",
        "Channel ",
        " : ",
        " -> ",
        " via ",
        "NET/",
        "IB/",
        "/GDRDMA",
        "[",
        "]",
        "Using ",
        " set by environment to ",
        "use ring PXN ",
        " GDR ",
    ];

    #[test]
    fn fuzz_never_panics() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let seed = ENABLED.as_bytes();
        for round in 0..4000 {
            let mut bytes: Vec<u8> = match round % 4 {
                // Random bytes, including invalid UTF-8 and control characters.
                0 => (0..rng.below(300)).map(|_| rng.next() as u8).collect(),
                // Random splices of the tokens the parser looks for.
                1 => (0..rng.below(40))
                    .flat_map(|_| {
                        let t = TOKENS[rng.below(TOKENS.len())];
                        let mut v = t.as_bytes().to_vec();
                        if rng.below(3) == 0 {
                            v.extend(format!("{}", rng.next() % 100_000).bytes());
                        }
                        if rng.below(8) == 0 {
                            v.push(b'\n');
                        }
                        v
                    })
                    .collect(),
                // Mutations of a real log: byte flips, deletions, insertions.
                2 => {
                    let mut v = seed.to_vec();
                    for _ in 0..rng.below(20) + 1 {
                        let i = rng.below(v.len());
                        match rng.below(3) {
                            0 => v[i] = rng.next() as u8,
                            1 => {
                                v.remove(i);
                            }
                            _ => v.insert(i, rng.next() as u8),
                        }
                    }
                    v
                }
                // Truncations at every kind of offset, mid-UTF-8 included.
                _ => {
                    let mut v = seed.to_vec();
                    v.extend("é€😀 NCCL INFO GPU Direct RDMA Enabled for HCA 7 'ml".as_bytes());
                    v.truncate(rng.below(v.len() + 1));
                    v
                }
            };
            if rng.below(10) == 0 {
                bytes.extend_from_slice(b"\r\n");
            }
            let log = parse_bytes(&bytes);
            assert!(log.recognized <= log.lines);
            let _ = serde_json::to_string(&log).unwrap();
        }
    }

    #[test]
    fn every_line_prefix_of_a_log_parses_to_a_subset() {
        let full = parse(ENABLED);
        let mut end = 0;
        for l in ENABLED.split_inclusive('\n') {
            end += l.len();
            let part = parse(&ENABLED[..end]);
            assert!(part.recognized <= full.recognized);
            assert!(part.channels.len() <= full.channels.len());
            assert!(part.hca_gdr.iter().all(|h| full.hca_gdr.contains(h)));
        }
    }
}
