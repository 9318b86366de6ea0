//! What loading found: the running kernel's facts and how each hook attached. A leaf (imports
//! nothing of this crate): the loader fills these, sinks and recordings show them.

use serde::Serialize;

/// How one hook ended up.
#[derive(Debug, Clone, Serialize)]
pub struct HookStatus {
    pub hook: &'static str,
    /// "kernel" or "user".
    pub side: &'static str,
    /// Where the function was found: "vmlinux", a module name, or a library path.
    pub location: Option<String>,
    /// "fexit", "fentry", "kprobe+kretprobe", "kprobe", "uprobe+uretprobe"; None: not attached.
    pub attached: Option<String>,
    /// Why a preferred mode was not used, or why nothing attached (program, symbol, errno).
    pub reasons: Vec<String>,
    pub optional: bool,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct KernelFacts {
    pub kernel: String,
    pub vmlinux_btf: bool,
    /// `struct ib_device.name` offset, when BTF describes it.
    pub ib_device_name_off: Option<u32>,
    /// Whether BTF describes the dma-buf exporter chain (else: "exporter unknown (no BTF)").
    pub dmabuf_exporter_readable: bool,
    /// Why kprobes can't be used here (None: they can).
    pub kprobe_unavailable: Option<String>,
    /// Why fentry/fexit can't be used here (None: a test program loaded).
    pub fentry_unavailable: Option<String>,
    /// Storage-program offsets this kernel's BTF / tracepoint formats didn't give (what needs
    /// them is skipped, and `probes` says so on the rows concerned).
    pub storage_offsets_unknown: Vec<&'static str>,
}
