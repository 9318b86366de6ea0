//! Perf events for tracepoints and uprobes, opened on threads all at once before their programs
//! are attached.
//!
//! Opening a tracepoint's or a uprobe's perf event takes the kernel's event mutex, which every
//! other tracer starting or stopping takes too (a release holds it for an RCU grace period,
//! 30-100 ms on a busy machine). One after another, each open waited behind the others'
//! releases (0.1-0.5 s each on the build machine with other tracers running); opened together,
//! they queue once. A program is attached to its event with `PERF_EVENT_IOC_SET_BPF`, which
//! takes a different mutex. The perf event is then the link: closing it detaches the program
//! (its descriptor goes to `Tracer::extra_links` with the others, released by `teardown`).

use std::{
    collections::HashMap,
    ffi::CString,
    os::{
        fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd},
        unix::ffi::OsStrExt,
    },
    path::{Path, PathBuf},
    sync::Mutex,
    thread::JoinHandle,
};

use aya_obj::generated::{
    perf_event_attr, perf_event_sample_format::PERF_SAMPLE_RAW, perf_type_id::PERF_TYPE_TRACEPOINT,
    PERF_EVENT_IOC_ENABLE, PERF_EVENT_IOC_SET_BPF, PERF_FLAG_FD_CLOEXEC,
};

/// One perf event: a tracepoint, or a uprobe (or uretprobe) at an offset of a file.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Event {
    Tracepoint { category: String, name: String },
    Uprobe { target: PathBuf, offset: u64, ret: bool },
}

impl Event {
    pub fn tracepoint(category: &str, name: &str) -> Self {
        Event::Tracepoint { category: category.into(), name: name.into() }
    }
}

impl std::fmt::Display for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Event::Tracepoint { category, name } => write!(f, "tracepoint {category}:{name}"),
            Event::Uprobe { target, offset, ret } => {
                let kind = if *ret { "uretprobe" } else { "uprobe" };
                write!(f, "{kind} {}+{offset:#x}", target.display())
            }
        }
    }
}

/// An event being opened on its thread.
type Opening = JoinHandle<Result<OwnedFd, String>>;
/// Events being opened ahead.
static AHEAD: Mutex<Option<HashMap<Event, Opening>>> = Mutex::new(None);
/// Events with a program attached (and events opened ahead but never used), until `take_links`.
static LINKS: Mutex<Vec<OwnedFd>> = Mutex::new(Vec::new());

/// Starts opening these events (disabled: nothing runs until a program is attached and the
/// event enabled), each on a thread of its own.
pub fn open_ahead(events: impl IntoIterator<Item = Event>) {
    let mut ahead = AHEAD.lock().unwrap_or_else(|e| e.into_inner());
    let map = ahead.get_or_insert_with(HashMap::new);
    for ev in events {
        if !map.contains_key(&ev) {
            let key = ev.clone();
            map.insert(key, std::thread::spawn(move || open(&ev)));
        }
    }
}

/// The event, opened ahead or now.
pub fn take(ev: &Event) -> Result<OwnedFd, String> {
    let ahead = AHEAD.lock().unwrap_or_else(|e| e.into_inner()).as_mut().and_then(|m| m.remove(ev));
    match ahead {
        Some(h) => h.join().unwrap_or_else(|_| Err(format!("{ev}: the thread opening it panicked"))),
        None => open(ev),
    }
}

/// Attaches the loaded program `prog_fd` to the event and enables it: the event is the link.
pub fn attach_to(prog_fd: BorrowedFd<'_>, ev: &Event, event: &OwnedFd) -> Result<(), String> {
    let fd = event.as_raw_fd();
    // SAFETY: ioctls on our own perf event descriptor; SET_BPF takes a program descriptor.
    if unsafe { libc::ioctl(fd, PERF_EVENT_IOC_SET_BPF as _, prog_fd.as_raw_fd()) } != 0 {
        return Err(format!("PERF_EVENT_IOC_SET_BPF ({ev}): {}", std::io::Error::last_os_error()));
    }
    // SAFETY: as above.
    if unsafe { libc::ioctl(fd, PERF_EVENT_IOC_ENABLE as _, 0) } != 0 {
        return Err(format!("PERF_EVENT_IOC_ENABLE ({ev}): {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// [`take`] then [`attach_to`]; the link is kept until [`take_links`].
pub fn attach(prog_fd: BorrowedFd<'_>, ev: &Event) -> Result<(), String> {
    let event = take(ev)?;
    attach_to(prog_fd, ev, &event)?;
    keep(event);
    Ok(())
}

/// Keeps a link until [`take_links`].
pub fn keep(link: OwnedFd) {
    LINKS.lock().unwrap_or_else(|e| e.into_inner()).push(link);
}

/// The events attached so far, and any opened ahead but not used (disabled: they run
/// nothing, and are released with the hooks rather than now, which would wait on the mutex).
pub fn take_links() -> Vec<OwnedFd> {
    let pending: Vec<_> =
        AHEAD.lock().unwrap_or_else(|e| e.into_inner()).take().into_iter().flatten().collect();
    let mut links = std::mem::take(&mut *LINKS.lock().unwrap_or_else(|e| e.into_inner()));
    links.extend(pending.into_iter().filter_map(|(_, h)| h.join().ok()?.ok()));
    links
}

/// The uprobe PMU's type and the bit of `config` that makes a uretprobe (None: no PMU, and
/// aya's legacy tracefs path is the way).
pub fn uprobe_pmu() -> Option<(u32, u32)> {
    static PMU: std::sync::OnceLock<Option<(u32, u32)>> = std::sync::OnceLock::new();
    *PMU.get_or_init(|| {
        let dir = Path::new("/sys/bus/event_source/devices/uprobe");
        let ty = std::fs::read_to_string(dir.join("type")).ok()?.trim().parse().ok()?;
        let bit = std::fs::read_to_string(dir.join("format/retprobe")).ok()?;
        Some((ty, bit.trim().strip_prefix("config:")?.parse().ok()?))
    })
}

/// Opens the event, disabled, for all processes on CPU 0 (as aya does).
fn open(ev: &Event) -> Result<OwnedFd, String> {
    // SAFETY: all-zero is a valid perf_event_attr (every field is an integer or a union of them).
    let mut attr: perf_event_attr = unsafe { std::mem::zeroed() };
    attr.size = size_of::<perf_event_attr>() as u32;
    attr.set_disabled(1);
    let _path: CString;
    match ev {
        Event::Tracepoint { category, name } => {
            let id: u64 = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
                .iter()
                .find_map(|root| std::fs::read_to_string(format!("{root}/events/{category}/{name}/id")).ok())
                .ok_or_else(|| format!("{ev}: not found in tracefs"))?
                .trim()
                .parse()
                .map_err(|e| format!("{ev}: bad id: {e}"))?;
            attr.type_ = PERF_TYPE_TRACEPOINT as u32;
            attr.config = id;
            attr.sample_type = PERF_SAMPLE_RAW as u64;
            attr.__bindgen_anon_1.sample_period = 0;
            attr.__bindgen_anon_2.wakeup_events = 1;
        }
        Event::Uprobe { target, offset, ret } => {
            let (ty, ret_bit) = uprobe_pmu().ok_or_else(|| format!("{ev}: no uprobe PMU"))?;
            _path = CString::new(target.as_os_str().as_bytes()).map_err(|e| format!("{ev}: {e}"))?;
            attr.type_ = ty;
            attr.config = if *ret { 1 << ret_bit } else { 0 };
            attr.__bindgen_anon_3.config1 = _path.as_ptr() as u64;
            attr.__bindgen_anon_4.config2 = *offset;
        }
    }
    // SAFETY: attr is a valid perf_event_attr of the size it states (the path it points to
    // lives until the call returns); pid -1, cpu 0, no group.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &raw const attr,
            -1,
            0,
            -1,
            PERF_FLAG_FD_CLOEXEC as libc::c_ulong,
        )
    };
    if fd < 0 {
        return Err(format!("perf_event_open ({ev}): {}", std::io::Error::last_os_error()));
    }
    // SAFETY: a fresh descriptor from perf_event_open, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}
