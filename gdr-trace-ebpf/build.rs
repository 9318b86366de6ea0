//! Rebuild the eBPF object when bpf-linker changes (it is the linker, cargo can't see it).
fn main() {
    if let Ok(linker) = which::which("bpf-linker") {
        println!("cargo:rerun-if-changed={}", linker.display());
    }
}
