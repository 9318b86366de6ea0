//! gdr-bench-floor: the benchmark's floor. Loads gdr-trace's own eBPF object the way gdr-trace
//! does and attaches a program that does nothing to the hook gdr-trace uses for pread64 here:
//!   gdr-bench-floor tracepoint      syscalls:sys_exit_pread64
//!   gdr-bench-floor fexit SYMBOL    fexit on SYMBOL (e.g. __x64_sys_pread64)
//! Prints "attached", then holds the link until killed (SIGINT: the kernel drops the link).

use aya::{
    programs::{FExit, TracePoint},
    Btf, EbpfLoader,
};
use gdr_trace::loader::EBPF_OBJECT;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut ebpf = EbpfLoader::new().load(EBPF_OBJECT)?;
    match args.first().map(String::as_str) {
        Some("fexit") => {
            let symbol = args.get(1).ok_or_else(|| anyhow::anyhow!("fexit needs a symbol"))?;
            let p: &mut FExit = ebpf.program_mut("bench_floor_fexit").expect("in the object").try_into()?;
            p.load(symbol, &Btf::from_sys_fs()?)?;
            p.attach()?;
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
