//! Compiles `gdr-trace-ebpf` for the BPF target (nightly + bpf-linker, see `cargo xtask setup`)
//! and leaves the object in OUT_DIR, where `loader.rs` embeds it.
fn main() -> anyhow::Result<()> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../gdr-trace-ebpf");
    aya_build::build_ebpf(
        [aya_build::Package { name: "gdr-trace-ebpf", root_dir: root, ..Default::default() }],
        aya_build::Toolchain::default(),
    )
}
