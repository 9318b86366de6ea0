//! gdr-bench-floor: the benchmark's floor. Loads the floor's eBPF object (programs that do
//! nothing, built beside gdr-trace's own and never part of it) and attaches one to the hook
//! being measured:
//!   gdr-bench-floor tracepoint            syscalls:sys_exit_pread64
//!   gdr-bench-floor fexit SYMBOL          fexit on SYMBOL (e.g. __x64_sys_pread64)
//!   gdr-bench-floor uprobe FILE OFFSET    an empty uprobe at FILE + OFFSET (hex with 0x, or decimal)
//! Prints "attached", then holds the link until killed (SIGINT: the kernel drops the link).

use aya::{
    programs::{
        uprobe::{UProbeAttachLocation, UProbeScope},
        FExit, TracePoint, UProbe,
    },
    Btf, EbpfLoader,
};
use gdr_trace::loader::BENCH_FLOOR_OBJECT;

fn offset(s: &str) -> anyhow::Result<u64> {
    Ok(match s.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16)?,
        None => s.parse()?,
    })
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut ebpf = EbpfLoader::new().load(BENCH_FLOOR_OBJECT)?;
    match args.first().map(String::as_str) {
        Some("fexit") => {
            let symbol = args.get(1).ok_or_else(|| anyhow::anyhow!("fexit needs a symbol"))?;
            let p: &mut FExit = ebpf.program_mut("bench_floor_fexit").expect("in the object").try_into()?;
            p.load(symbol, &Btf::from_sys_fs()?)?;
            p.attach()?;
        }
        Some("uprobe") => {
            let (Some(file), Some(off)) = (args.get(1), args.get(2)) else {
                anyhow::bail!("uprobe needs FILE OFFSET");
            };
            let p: &mut UProbe = ebpf.program_mut("bench_floor_uprobe").expect("in the object").try_into()?;
            p.load()?;
            p.attach(UProbeAttachLocation::AbsoluteOffset(offset(off)?), file, UProbeScope::AllProcesses)?;
        }
        _ => {
            let p: &mut TracePoint = ebpf.program_mut("bench_floor_tp").expect("in the object").try_into()?;
            p.load()?;
            p.attach("syscalls", "sys_exit_pread64")?;
        }
    }
    println!("attached");
    loop {
        std::thread::park();
    }
}
