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
    assert_eq!(log.p2p_counts(), (1, 0));
    assert_eq!(log.p2p_channels[0].to_gpu, Some(GpuRef::NvmlIndex(1)));
    assert_eq!(log.lines, 14);
    assert_eq!(log.recognized, 14, "the P2P/IPC channel line counts too");
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

const TOKENS: [&str; 31] = [
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
    "P2P/",
    "IPC",
    "direct pointer",
    "SHM/",
    "direct/",
    "P2P is disabled between ",
    "connected GPUs ",
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
