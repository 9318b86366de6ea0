//! fentry/fexit on functions that live in kernel modules (ib_uverbs, ib_core, nvidia...), the
//! fentry capability probe, and the library follower's programs for uprobe_multi links.
//!
//! aya 0.14 targets vmlinux BTF only (it never sets `attach_btf_obj_fd`). This loads the same
//! program from the same embedded object, relocated against the maps aya already created (so
//! it shares EVENTS, the filter and the globals), with `attach_btf_obj_fd` = the module's BTF
//! object, then attaches it with BPF_RAW_TRACEPOINT_OPEN. It passes no program BTF
//! (`func_info`): a program calling a global subprogram needs one (the storage system call
//! programs do; they go on vmlinux functions, through aya). [`probe`] asks the kernel whether
//! it allows fentry at all with a program of two instructions (no aya parse of vmlinux BTF
//! for that: btf-rs has the type id, mapped where the kernel allows).

use std::{
    collections::HashSet,
    ffi::CString,
    os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd},
};

use aya::{maps::Map, Ebpf};
use aya_obj::generated::{bpf_attach_type, bpf_cmd, bpf_insn, bpf_prog_type};

use super::options::EBPF_OBJECT;

/// `union bpf_attr` for BPF_PROG_LOAD, up to `attach_btf_obj_fd` (uapi/linux/bpf.h).
#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
    prog_btf_fd: u32,
    func_info_rec_size: u32,
    func_info: u64,
    func_info_cnt: u32,
    line_info_rec_size: u32,
    line_info: u64,
    line_info_cnt: u32,
    attach_btf_id: u32,
    attach_btf_obj_fd: u32,
    _pad: u32,
}

/// The bpf(2) system call: `attr` is `size` bytes laid out as `cmd`'s part of `union bpf_attr`.
pub(super) fn bpf(cmd: bpf_cmd, attr: *mut u8, size: usize) -> Result<RawFd, std::io::Error> {
    // SAFETY: attr points to a zero-initialised attr struct of `size` bytes for this command.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd as libc::c_long, attr, size as libc::c_uint) };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r as RawFd)
    }
}

fn owned(fd: RawFd) -> OwnedFd {
    // SAFETY: a fresh fd returned by the bpf syscall, owned by nobody else.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// The fd of the kernel's BTF object named `module` (BPF_BTF_GET_NEXT_ID + GET_FD_BY_ID +
/// OBJ_GET_INFO_BY_FD).
fn module_btf_fd(module: &str) -> Result<OwnedFd, String> {
    #[repr(C)]
    #[derive(Default)]
    struct IdAttr {
        id: u32,
        next_id: u32,
        open_flags: u32,
    }
    #[repr(C)]
    #[derive(Default)]
    struct InfoAttr {
        bpf_fd: u32,
        info_len: u32,
        info: u64,
    }
    #[repr(C)]
    #[derive(Default)]
    struct BtfInfo {
        btf: u64,
        btf_size: u32,
        id: u32,
        name: u64,
        name_len: u32,
        kernel_btf: u32,
    }
    let mut id = 0u32;
    loop {
        let mut a = IdAttr { id, ..Default::default() };
        match bpf(bpf_cmd::BPF_BTF_GET_NEXT_ID, (&raw mut a).cast(), size_of::<IdAttr>()) {
            Ok(_) => id = a.next_id,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                return Err(format!("no kernel BTF object named {module}"));
            }
            Err(e) => return Err(format!("BPF_BTF_GET_NEXT_ID: {e}")),
        }
        let mut g = IdAttr { id, ..Default::default() };
        let Ok(fd) = bpf(bpf_cmd::BPF_BTF_GET_FD_BY_ID, (&raw mut g).cast(), size_of::<IdAttr>()) else {
            continue; // unloaded meanwhile
        };
        let fd = owned(fd);
        let mut name = [0u8; 64];
        let mut info =
            BtfInfo { name: name.as_mut_ptr() as u64, name_len: name.len() as u32, ..Default::default() };
        let mut ia = InfoAttr {
            bpf_fd: fd.as_raw_fd() as u32,
            info_len: size_of::<BtfInfo>() as u32,
            info: (&raw mut info) as u64,
        };
        if bpf(bpf_cmd::BPF_OBJ_GET_INFO_BY_FD, (&raw mut ia).cast(), size_of::<InfoAttr>()).is_err() {
            continue;
        }
        let n = name.iter().position(|&b| b == 0).unwrap_or(name.len());
        if info.kernel_btf != 0 && &name[..n] == module.as_bytes() {
            return Ok(fd);
        }
    }
}

fn map_fd(map: &Map) -> Option<RawFd> {
    Some(super::map_set::data(map)?.fd().as_fd().as_raw_fd())
}

/// The embedded object, parsed and relocated against the maps aya created (made once, used for
/// every module-function program).
pub struct Relocated {
    obj: aya_obj::Object,
    btf_fds: std::collections::HashMap<String, OwnedFd>,
}

impl Relocated {
    pub fn new(ebpf: &Ebpf) -> Result<Self, String> {
        Self::with_maps(|name| ebpf.map(name).and_then(map_fd))
    }

    /// Relocated against the maps `fd_of` names (each map's descriptor, which must stay open
    /// while programs are loaded from this).
    pub fn with_maps(fd_of: impl Fn(&str) -> Option<RawFd>) -> Result<Self, String> {
        let mut obj =
            aya_obj::Object::parse(EBPF_OBJECT).map_err(|e| format!("parsing the eBPF object: {e}"))?;
        let text_sections: HashSet<usize> = obj.functions.keys().map(|(s, _)| *s).collect();
        let maps = std::mem::take(&mut obj.maps);
        let mut with_fds = Vec::new();
        for (name, m) in &maps {
            let fd = fd_of(name).ok_or_else(|| format!("map {name} not loaded"))?;
            with_fds.push((name.as_str(), fd, m));
        }
        obj.relocate_maps(with_fds.into_iter(), &text_sections)
            .map_err(|e| format!("relocating maps: {e}"))?;
        obj.relocate_calls(&text_sections).map_err(|e| format!("relocating calls: {e}"))?;
        Ok(Self { obj, btf_fds: Default::default() })
    }

    /// Loads program `prog` as a kprobe-type program for uprobe_multi links
    /// (`BPF_TRACE_UPROBE_MULTI`, Linux 6.6+): the library follower's hooks (`uprobe_multi`).
    pub fn load_uprobe_multi(&self, prog: &str) -> Result<OwnedFd, String> {
        let key = self
            .obj
            .programs
            .get(prog)
            .ok_or_else(|| format!("program {prog} missing from object"))?
            .function_key();
        let insns: &[bpf_insn] = &self.obj.functions[&key].instructions;
        let kind = (bpf_prog_type::BPF_PROG_TYPE_KPROBE, bpf_attach_type::BPF_TRACE_UPROBE_MULTI);
        load_raw(prog, insns, kind, 0, None).map_err(|e| format!("{prog}: BPF_PROG_LOAD (uprobe_multi): {e}"))
    }

    /// Loads program `prog` as fentry (or fexit) on BTF function `btf_id` of `module` (None:
    /// vmlinux) and attaches it. The returned fd is the link: dropping it detaches.
    pub fn load_and_attach(
        &mut self,
        prog: &str,
        is_exit: bool,
        module: Option<&str>,
        btf_id: u32,
    ) -> Result<OwnedFd, String> {
        let obj = &self.obj;
        let key = obj
            .programs
            .get(prog)
            .ok_or_else(|| format!("program {prog} missing from object"))?
            .function_key();
        let insns: &[bpf_insn] = &obj.functions[&key].instructions;
        let btf_fd = match module {
            Some(module) => {
                if !self.btf_fds.contains_key(module) {
                    self.btf_fds.insert(module.to_string(), module_btf_fd(module)?);
                }
                Some(self.btf_fds[module].as_raw_fd())
            }
            None => None,
        };
        let t = std::time::Instant::now();
        let prog_fd = load_tracing(prog, insns, is_exit, btf_id, btf_fd)
            .map_err(|e| format!("{prog}: BPF_PROG_LOAD ({} BTF id {btf_id}): {e}", module_name(module)))?;
        tracing::debug!("{prog}: {} instructions verified and loaded in {:?}", insns.len(), t.elapsed());
        #[repr(C)]
        #[derive(Default)]
        struct RawTpAttr {
            name: u64,
            prog_fd: u32,
            _pad: u32,
            cookie: u64,
        }
        let mut tp = RawTpAttr { prog_fd: prog_fd.as_raw_fd() as u32, ..Default::default() };
        let link = bpf(bpf_cmd::BPF_RAW_TRACEPOINT_OPEN, (&raw mut tp).cast(), size_of::<RawTpAttr>())
            .map_err(|e| format!("{prog}: attach (BPF_RAW_TRACEPOINT_OPEN): {e}"))?;
        // The link holds the program; the program fd can close.
        Ok(owned(link))
    }
}

fn module_name(module: Option<&str>) -> String {
    module.map_or_else(|| "vmlinux".into(), |m| format!("module {m}"))
}

/// `r0 = 0; exit`.
fn return_zero() -> [bpf_insn; 2] {
    let insn = |code: u8| {
        // SAFETY: bpf_insn is plain integers: all zero is r0, r0, offset 0, immediate 0.
        let mut i: bpf_insn = unsafe { std::mem::zeroed() };
        i.code = code;
        i
    };
    // BPF_ALU64|BPF_MOV|BPF_K (r0 = 0), BPF_JMP|BPF_EXIT.
    [insn(0xb7), insn(0x95)]
}

/// Whether the kernel loads an fentry program on vmlinux function `btf_id`: the error if not.
/// The program (`r0 = 0; exit`, named `name`) is closed at once, never attached.
pub fn probe(name: &str, btf_id: u32) -> Result<(), String> {
    load_tracing(name, &return_zero(), false, btf_id, None)
        .map(drop)
        .map_err(|e| format!("{name}: BPF_PROG_LOAD: {e}"))
}

/// A program that does nothing, for uprobe_multi links (the capability probe of `uprobe_multi`).
pub fn return_zero_uprobe_multi() -> Result<OwnedFd, String> {
    let kind = (bpf_prog_type::BPF_PROG_TYPE_KPROBE, bpf_attach_type::BPF_TRACE_UPROBE_MULTI);
    load_raw("gdr_multi_probe", &return_zero(), kind, 0, None)
}

/// BPF_PROG_LOAD of a tracing program: fexit (`is_exit`) or fentry on BTF function `btf_id`
/// of the BTF object `btf_fd` (None: vmlinux).
fn load_tracing(
    prog: &str,
    insns: &[bpf_insn],
    is_exit: bool,
    btf_id: u32,
    btf_fd: Option<RawFd>,
) -> Result<OwnedFd, String> {
    let attach = if is_exit { bpf_attach_type::BPF_TRACE_FEXIT } else { bpf_attach_type::BPF_TRACE_FENTRY };
    load_raw(prog, insns, (bpf_prog_type::BPF_PROG_TYPE_TRACING, attach), btf_id, btf_fd)
}

/// BPF_PROG_LOAD of `insns` as program type and expected attach type `kind`, on BTF function
/// `btf_id` of the BTF object `btf_fd` (0 and None where the type has no BTF target).
fn load_raw(
    prog: &str,
    insns: &[bpf_insn],
    kind: (bpf_prog_type, bpf_attach_type),
    btf_id: u32,
    btf_fd: Option<RawFd>,
) -> Result<OwnedFd, String> {
    let license = CString::new("GPL").expect("no NUL");
    let mut name = [0u8; 16];
    let short = &prog.as_bytes()[..prog.len().min(15)];
    name[..short.len()].copy_from_slice(short);
    // First without a verifier log (a full log buffer itself fails the load with ENOSPC), then,
    // only to explain a failure, again with a large one.
    let load = |log: &mut [u8], level: u32| {
        let mut attr = ProgLoadAttr {
            prog_type: kind.0 as u32,
            insn_cnt: insns.len() as u32,
            insns: insns.as_ptr() as u64,
            license: license.as_ptr() as u64,
            log_level: if log.is_empty() { 0 } else { level },
            log_size: log.len() as u32,
            log_buf: if log.is_empty() { 0 } else { log.as_mut_ptr() as u64 },
            prog_name: name,
            expected_attach_type: kind.1 as u32,
            attach_btf_id: btf_id,
            attach_btf_obj_fd: btf_fd.map_or(0, |fd| fd as u32),
            ..Default::default()
        };
        bpf(bpf_cmd::BPF_PROG_LOAD, (&raw mut attr).cast(), size_of::<ProgLoadAttr>())
    };
    // With debug logging, the verifier's statistics (BPF_LOG_STATS: a few lines) come along:
    // what a slow load cost it.
    let mut stats = if tracing::enabled!(tracing::Level::DEBUG) { vec![0u8; 4096] } else { vec![] };
    match load(&mut stats, 4) {
        Ok(fd) => {
            if !stats.is_empty() {
                let n = stats.iter().position(|&b| b == 0).unwrap_or(0);
                let text = String::from_utf8_lossy(&stats[..n]);
                tracing::debug!("{prog}: verifier: {}", text.trim().replace('\n', " | "));
            }
            Ok(owned(fd))
        }
        Err(e) => {
            let mut log = vec![0u8; 4 << 20];
            let _ = load(&mut log, 1);
            let n = log.iter().position(|&b| b == 0).unwrap_or(0);
            let text = String::from_utf8_lossy(&log[..n]);
            let tail: Vec<&str> = text.lines().rev().take(3).collect();
            Err(if tail.is_empty() { e.to_string() } else { format!("{e} (verifier: {})", tail.join(" | ")) })
        }
    }
}
