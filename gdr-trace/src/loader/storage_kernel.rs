//! What the storage programs need to know of the running kernel, resolved before load: struct
//! offsets from BTF (descending into anonymous unions, where e.g. `file.f_flags` may sit),
//! syscall argument registers, tracepoint record layouts. Nothing is baked in: what can't be
//! resolved stays `OFFSET_UNKNOWN` and the programs skip what needs it.

use aya::EbpfLoader;
use gdr_trace_common::{
    storage::{globals as g, READ_SYSCALLS},
    OFFSET_UNKNOWN,
};
use serde::Serialize;

use super::btf::KernelBtf;
use crate::procfs;

/// The storage programs' globals, by name.
#[derive(Debug, Clone, Serialize)]
pub struct StorageGlobals {
    pub values: Vec<(&'static str, u32)>,
    /// read, pread64, readv, preadv, preadv2 on this ABI.
    pub read_nrs: [u32; READ_SYSCALLS],
    /// Parameters of `kiocb.ki_complete` in this kernel's BTF, so of nvidia-fs's
    /// `nvfs_io_complete` (built to match it: `KI_COMPLETE_HAS_3_PARAMETERS`): 2 on 5.16+, 3
    /// before; None without BTF. Its kprobe reads `res`, the second argument in both.
    pub ki_complete_params: Option<u32>,
}

impl StorageGlobals {
    pub fn resolve(kbtf: &KernelBtf) -> Self {
        let off = |s: &str, m: &str| kbtf.vmlinux_offset(s, m).unwrap_or(OFFSET_UNKNOWN);
        let tp = |cat: &str, name: &str, field: &str| {
            procfs::tracepoint_field_offset(cat, name, field).unwrap_or(OFFSET_UNKNOWN)
        };
        let regs = syscall_arg_offsets(kbtf);
        let fill = ("filemap", "mm_filemap_add_to_page_cache");
        let uring = |name: &'static str, field: &str| tp("io_uring", uring_tracepoint(name), field);
        let values = vec![
            (g::REGS_NR_OFF, regs[4]),
            (g::REGS_ARG0_OFF, regs[0]),
            (g::REGS_ARG1_OFF, regs[1]),
            (g::REGS_ARG2_OFF, regs[2]),
            (g::REGS_ARG3_OFF, regs[3]),
            (g::SYS_EXIT_RET_OFF, tp("syscalls", "sys_exit_read", "ret")),
            (g::FILL_INO_OFF, tp(fill.0, fill.1, "i_ino")),
            (g::FILL_DEV_OFF, tp(fill.0, fill.1, "s_dev")),
            (g::FILL_ORDER_OFF, tp(fill.0, fill.1, "order")),
            (g::TASK_FILES_OFF, off("task_struct", "files")),
            (g::TASK_TGID_OFF, off("task_struct", "tgid")),
            (g::FILES_FDT_OFF, off("files_struct", "fdt")),
            (g::FDT_MAX_FDS_OFF, off("fdtable", "max_fds")),
            (g::FDT_FD_OFF, off("fdtable", "fd")),
            (g::FILE_FLAGS_OFF, off("file", "f_flags")),
            (g::FILE_INODE_OFF, off("file", "f_inode")),
            (g::FILE_PRIVATE_DATA_OFF, off("file", "private_data")),
            (g::INODE_RDEV_OFF, off("inode", "i_rdev")),
            (g::INODE_MODE_OFF, off("inode", "i_mode")),
            (g::INODE_INO_OFF, off("inode", "i_ino")),
            (g::INODE_SB_OFF, off("inode", "i_sb")),
            (g::SB_DEV_OFF, off("super_block", "s_dev")),
            (g::SB_MAGIC_OFF, off("super_block", "s_magic")),
            (g::URING_SUBMIT_REQ_OFF, uring("io_uring_submit_req", "req")),
            (g::URING_SUBMIT_OPCODE_OFF, uring("io_uring_submit_req", "opcode")),
            (g::URING_FILE_REQ_OFF, uring("io_uring_file_get", "req")),
            (g::URING_FILE_FD_OFF, uring("io_uring_file_get", "fd")),
            (g::URING_DONE_REQ_OFF, uring("io_uring_complete", "req")),
            (g::URING_DONE_RES_OFF, uring("io_uring_complete", "res")),
            (g::KIOCB_FILP_OFF, off("kiocb", "ki_filp")),
            (g::KIOCB_POS_OFF, off("kiocb", "ki_pos")),
            (g::KIOCB_COMPLETE_OFF, off("kiocb", "ki_complete")),
        ];
        let ki_complete_params = kbtf.vmlinux_fn_params("kiocb", "ki_complete");
        Self { values, read_nrs: read_syscall_numbers(), ki_complete_params }
    }

    /// Patches every global into the object about to be loaded.
    pub fn apply<'a>(&'a self, loader: &mut EbpfLoader<'a>) {
        for (name, value) in &self.values {
            loader.override_global(name, value, true);
        }
        loader.override_global(g::READ_SYSCALL_NRS, &self.read_nrs, true);
    }

    /// Names of the globals that could not be resolved.
    pub fn unknown(&self) -> Vec<&'static str> {
        self.values.iter().filter(|(_, v)| *v == OFFSET_UNKNOWN).map(|(n, _)| *n).collect()
    }
}

fn read_syscall_numbers() -> [u32; READ_SYSCALLS] {
    [libc::SYS_read, libc::SYS_pread64, libc::SYS_readv, libc::SYS_preadv, libc::SYS_preadv2]
        .map(|n| n as u32)
}

/// Offsets in `struct pt_regs` of syscall arguments 0..=3 as they are at syscall exit, and of
/// the syscall number.
fn syscall_arg_offsets(kbtf: &KernelBtf) -> [u32; 5] {
    let off = |m: &str| kbtf.vmlinux_offset("pt_regs", m).unwrap_or(OFFSET_UNKNOWN);
    if cfg!(target_arch = "aarch64") {
        // x0 holds the return value at exit; the first argument survives in orig_x0.
        let regs = off("regs");
        let at = |i: u32| if regs == OFFSET_UNKNOWN { OFFSET_UNKNOWN } else { regs + 8 * i };
        [off("orig_x0"), at(1), at(2), at(3), off("syscallno")]
    } else {
        // x86-64 syscall ABI: rdi, rsi, rdx, r10; the number in orig_ax.
        [off("di"), off("si"), off("dx"), off("r10"), off("orig_ax")]
    }
}

/// The name this kernel gives an io_uring tracepoint: `io_uring_submit_req` was
/// `io_uring_submit_sqe` before 6.2 (with the same fields since 5.19), so Debian 12's 6.1 has
/// the old name.
pub fn uring_tracepoint(name: &'static str) -> &'static str {
    const RENAMED: &[(&str, &str)] = &[("io_uring_submit_req", "io_uring_submit_sqe")];
    let has_req = |n: &str| procfs::tracepoint_field_offset("io_uring", n, "req").is_some();
    match RENAMED.iter().find(|(new, _)| *new == name) {
        Some((_, old)) if !has_req(name) && has_req(old) => old,
        _ => name,
    }
}

/// The kernel entry point of system call `name` (`__x64_sys_pread64`).
pub fn syscall_symbol(name: &str) -> String {
    let prefix = if cfg!(target_arch = "aarch64") { "__arm64_sys_" } else { "__x64_sys_" };
    format!("{prefix}{name}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loader::btf::offset_in;

    #[test]
    fn resolves_the_walk_on_this_kernel_when_it_has_btf() {
        let kbtf = KernelBtf::open();
        let Some(btf) = kbtf.vmlinux() else {
            // Only a kernel without BTF may skip, and the skip is said, not silent.
            let sys = std::path::Path::new("/sys/kernel/btf/vmlinux");
            assert!(!sys.exists(), "{} exists but its BTF did not parse", sys.display());
            eprintln!("SKIP resolves_the_walk_on_this_kernel_when_it_has_btf: no {}", sys.display());
            return;
        };
        for (s, m) in [("task_struct", "files"), ("file", "f_flags"), ("file", "f_inode"), ("inode", "i_ino")]
        {
            assert!(offset_in(btf, s, m).is_some(), "{s}.{m}");
        }
        assert!(offset_in(btf, "file", "no_such_member").is_none());
        let params = crate::loader::btf::fn_member_params(btf, "kiocb", "ki_complete");
        assert!(matches!(params, Some(2 | 3)), "kiocb.ki_complete takes 2 or 3 parameters: {params:?}");
        let regs = syscall_arg_offsets(&kbtf);
        assert!(regs.iter().all(|&o| o != OFFSET_UNKNOWN), "{regs:?}");
    }

    #[test]
    fn syscall_symbols_carry_the_arch_prefix() {
        assert!(syscall_symbol("pread64").ends_with("_sys_pread64"));
    }
}
