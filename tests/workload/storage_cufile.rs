//! The cuFile side of gdr-storage-workload: dlopen libcufile.so.0 (as frameworks do), "GPU"
//! memory (a /dev/nvidia0 mapping from the simulated driver, else host memory), and one cuFile
//! read or write per step, the way an application issues them.

use std::{
    ffi::{c_int, c_uint, c_void, CString},
    os::fd::AsRawFd,
    path::Path,
    sync::OnceLock,
};

use super::io::{emit, fail, open, Aligned};

#[repr(C)]
#[derive(Clone, Copy)]
struct CuFileError {
    err: c_int,
    cu_err: c_int,
}

/// `CUfileDescr_t`: type, union { fd, handle }, fs_ops.
#[repr(C)]
struct Descr {
    kind: c_int,
    fd: u64,
    fs_ops: *const c_void,
}

/// `CUfileIOParams_t`.
#[repr(C)]
struct IoParams {
    mode: c_int,
    buf: *mut c_void,
    file_offset: i64,
    buf_offset: i64,
    size: usize,
    fh: *mut c_void,
    opcode: c_int,
    cookie: *mut c_void,
}

/// `CUfileIOEvents_t`.
#[repr(C)]
#[derive(Clone, Copy)]
struct IoEvent {
    cookie: *mut c_void,
    status: c_int,
    ret: usize,
}

type AsyncIo = unsafe extern "C" fn(
    *mut c_void,
    *mut c_void,
    *mut usize,
    *mut i64,
    *mut i64,
    *mut isize,
    *mut c_void,
) -> CuFileError;

struct Api {
    driver_open: unsafe extern "C" fn() -> CuFileError,
    driver_close: unsafe extern "C" fn() -> CuFileError,
    handle_register: unsafe extern "C" fn(*mut *mut c_void, *mut Descr) -> CuFileError,
    handle_deregister: unsafe extern "C" fn(*mut c_void),
    buf_register: unsafe extern "C" fn(*const c_void, usize, c_int) -> CuFileError,
    buf_deregister: unsafe extern "C" fn(*const c_void) -> CuFileError,
    read: unsafe extern "C" fn(*mut c_void, *mut c_void, usize, i64, i64) -> isize,
    write: unsafe extern "C" fn(*mut c_void, *const c_void, usize, i64, i64) -> isize,
    read_async: AsyncIo,
    write_async: AsyncIo,
    stream_register: unsafe extern "C" fn(*mut c_void, c_uint) -> CuFileError,
    stream_deregister: unsafe extern "C" fn(*mut c_void) -> CuFileError,
    batch_setup: unsafe extern "C" fn(*mut *mut c_void, c_uint) -> CuFileError,
    batch_submit: unsafe extern "C" fn(*mut c_void, c_uint, *mut IoParams, c_uint) -> CuFileError,
    batch_get_status: unsafe extern "C" fn(
        *mut c_void,
        c_uint,
        *mut c_uint,
        *mut IoEvent,
        *const libc::timespec,
    ) -> CuFileError,
    batch_cancel: unsafe extern "C" fn(*mut c_void) -> CuFileError,
    batch_destroy: unsafe extern "C" fn(*mut c_void),
}

static API: OnceLock<Api> = OnceLock::new();

fn sym<T>(lib: *mut c_void, name: &str) -> T {
    let c = CString::new(name).unwrap();
    // SAFETY: dlsym on a dlopen handle; the caller names the right function type.
    let p = unsafe { libc::dlsym(lib, c.as_ptr()) };
    if p.is_null() {
        fail(&format!("libcufile has no {name}"));
    }
    // SAFETY: a function pointer of the declared type.
    unsafe { std::mem::transmute_copy(&p) }
}

/// dlopens the library: `path`, else the test one unless $GDR_LIBCUFILE names another. cuFile
/// calls go to the first library loaded; without a path, a loaded one is kept.
pub fn load(path: Option<&str>) {
    if path.is_none() && API.get().is_some() {
        return;
    }
    let path = path.map(str::to_string).unwrap_or_else(|| {
        std::env::var("GDR_LIBCUFILE").unwrap_or_else(|_| env!("GDR_TEST_LIBCUFILE").to_string())
    });
    let c = CString::new(path.clone()).unwrap();
    // SAFETY: plain dlopen.
    let lib = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW) };
    if lib.is_null() {
        fail(&format!("dlopen {path} failed"));
    }
    let _ = API.set(Api {
        driver_open: sym(lib, "cuFileDriverOpen"),
        driver_close: sym(lib, "cuFileDriverClose"),
        handle_register: sym(lib, "cuFileHandleRegister"),
        handle_deregister: sym(lib, "cuFileHandleDeregister"),
        buf_register: sym(lib, "cuFileBufRegister"),
        buf_deregister: sym(lib, "cuFileBufDeregister"),
        read: sym(lib, "cuFileRead"),
        write: sym(lib, "cuFileWrite"),
        read_async: sym(lib, "cuFileReadAsync"),
        write_async: sym(lib, "cuFileWriteAsync"),
        stream_register: sym(lib, "cuFileStreamRegister"),
        stream_deregister: sym(lib, "cuFileStreamDeregister"),
        batch_setup: sym(lib, "cuFileBatchIOSetUp"),
        batch_submit: sym(lib, "cuFileBatchIOSubmit"),
        batch_get_status: sym(lib, "cuFileBatchIOGetStatus"),
        batch_cancel: sym(lib, "cuFileBatchIOCancel"),
        batch_destroy: sym(lib, "cuFileBatchIODestroy"),
    });
}

fn api() -> &'static Api {
    API.get().expect("cufile::load first")
}

/// Memory a cuFile buffer lives in: GPU memory of the simulated driver, or host memory.
enum Memory {
    Gpu { va: *mut c_void, len: usize },
    Host(Aligned),
}

impl Memory {
    fn alloc(len: usize) -> Self {
        if !Path::new("/dev/nvidia0").exists() {
            return Self::Host(Aligned::new(len));
        }
        // cudaMalloc: a 2 MiB aligned mapping of /dev/nvidia0, 64 KiB multiple.
        let len = (len + 0xffff) & !0xffff;
        let align = 2 << 20;
        let gpu = open("/dev/nvidia0", libc::O_RDWR);
        // SAFETY: reserve, then map the device over an aligned part, then trim.
        unsafe {
            let resv = libc::mmap(
                std::ptr::null_mut(),
                len + align,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            );
            if resv == libc::MAP_FAILED {
                fail("reserving GPU address space");
            }
            let va = ((resv as usize + align - 1) & !(align - 1)) as *mut c_void;
            let p = libc::mmap(
                va,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_FIXED,
                gpu.as_raw_fd(),
                0,
            );
            if p == libc::MAP_FAILED {
                fail(&format!("mmap /dev/nvidia0: {}", std::io::Error::last_os_error()));
            }
            Self::Gpu { va, len }
        }
    }

    fn ptr(&self) -> *mut c_void {
        match self {
            Self::Gpu { va, .. } => *va,
            Self::Host(a) => a.ptr as *mut c_void,
        }
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        if let Self::Gpu { va, len } = self {
            // SAFETY: the mapping made in alloc.
            unsafe { libc::munmap(*va, *len) };
        }
    }
}

pub struct Session;

impl Session {
    pub fn open() -> Self {
        load(None);
        // SAFETY: a cuFile API call with no arguments.
        let r = unsafe { (api().driver_open)() };
        emit(serde_json::json!({ "step": "cufile_driver_open", "err": r.err, "cu_err": r.cu_err }));
        Session
    }

    /// `cuFileDriverClose` (the name binaries built before CUDA 12 call).
    pub fn close(self) {
        // SAFETY: a cuFile API call with no arguments.
        let r = unsafe { (api().driver_close)() };
        emit(serde_json::json!({ "step": "cufile_driver_close", "err": r.err }));
    }

    /// One cuFile read or write of `len` bytes at `offset` of `path`, its own handle and buffer.
    pub fn io(&mut self, write: bool, path: &str, len: u64, offset: u64, flags: &[String]) {
        let has = |f: &str| flags.iter().any(|x| x == f);
        let direct = if has("buffered") { 0 } else { libc::O_DIRECT };
        let mode = if write { libc::O_WRONLY | libc::O_CREAT } else { libc::O_RDONLY };
        let file = open(path, mode | direct);
        let fd = file.as_raw_fd();
        let a = api();
        let mut descr = Descr { kind: 1, fd: fd as u64, fs_ops: std::ptr::null() };
        let mut fh: *mut c_void = std::ptr::null_mut();
        // SAFETY: cuFile API calls with valid pointers that outlive them.
        let reg = unsafe { (a.handle_register)(&mut fh, &mut descr) };
        let mem = Memory::alloc(len as usize);
        // SAFETY: as above.
        let breg = unsafe { (a.buf_register)(mem.ptr(), len as usize, 0) };
        if has("hold") {
            // A test's handshake: the buffer is registered (and mapped); go on at its word.
            emit(serde_json::json!({ "step": "hold" }));
            let mut line = String::new();
            let _ = std::io::BufRead::read_line(&mut std::io::stdin().lock(), &mut line);
        }
        let (op, ret) = if has("batch") {
            ("batch", self.batch(fh, &mem, len, offset, write))
        } else if has("async") {
            // A CUstream: any handle will do for the test library. The I/O runs on its worker
            // threads after the call returns; deregistering the stream waits for it (where a
            // CUDA application would synchronize the stream), and only then is `done` written.
            let stream = &mut descr as *mut Descr as *mut c_void;
            let (mut size, mut off, mut boff, mut done) = (len as usize, offset as i64, 0i64, 0isize);
            let call = if write { a.write_async } else { a.read_async };
            // SAFETY: as above; the out-pointers live on this stack frame.
            let r = unsafe {
                (a.stream_register)(stream, 0xf);
                let r = call(fh, mem.ptr(), &mut size, &mut off, &mut boff, &mut done, stream);
                (a.stream_deregister)(stream);
                r
            };
            // SAFETY: a local the library's worker wrote through the pointer it was given.
            let done = unsafe { std::ptr::read_volatile(&done) };
            ("async", if r.err == 0 { done as i64 } else { -(r.err as i64) })
        } else if write {
            // SAFETY: as above.
            ("write", unsafe { (a.write)(fh, mem.ptr(), len as usize, offset as i64, 0) } as i64)
        } else {
            // SAFETY: as above.
            ("read", unsafe { (a.read)(fh, mem.ptr(), len as usize, offset as i64, 0) } as i64)
        };
        // SAFETY: as above.
        unsafe {
            (a.buf_deregister)(mem.ptr());
            (a.handle_deregister)(fh);
        }
        drop(mem);
        drop(file);
        emit(serde_json::json!({
            "step": if write { "cufile_write" } else { "cufile_read" },
            "op": op, "path": path, "fd": fd, "size": len, "offset": offset, "o_direct": direct != 0,
            "handle": fh as u64, "handle_err": reg.err, "buf_err": breg.err, "ret": ret,
            // SAFETY: gettid has no preconditions.
            "tid": unsafe { libc::gettid() },
            "nvidia_fs": Path::new("/dev/nvidia-fs0").exists(),
        }));
    }

    /// Two entries of len/2: one cuFileBatchIOSubmit.
    fn batch(&mut self, fh: *mut c_void, mem: &Memory, len: u64, offset: u64, write: bool) -> i64 {
        let a = api();
        let half = len / 2;
        let mut params: Vec<IoParams> = (0..2u64)
            .map(|i| IoParams {
                mode: 1,
                buf: mem.ptr(),
                file_offset: (offset + i * half) as i64,
                buf_offset: (i * half) as i64,
                size: half as usize,
                fh,
                opcode: c_int::from(write),
                cookie: std::ptr::null_mut(),
            })
            .collect();
        let mut batch: *mut c_void = std::ptr::null_mut();
        // SAFETY: cuFile batch calls with valid pointers that outlive them.
        unsafe {
            let r = (a.batch_setup)(&mut batch, 2);
            if r.err != 0 {
                return -(r.err as i64);
            }
            let r = (a.batch_submit)(batch, 2, params.as_mut_ptr(), 0);
            let mut events = [IoEvent { cookie: std::ptr::null_mut(), status: 0, ret: 0 }; 2];
            let mut nr: c_uint = 2;
            let st = (a.batch_get_status)(batch, 2, &mut nr, events.as_mut_ptr(), std::ptr::null());
            let done: usize = events[..nr as usize].iter().filter(|e| e.status == 0x10).map(|e| e.ret).sum();
            (a.batch_cancel)(batch);
            (a.batch_destroy)(batch);
            emit(serde_json::json!({
                "step": "cufile_batch_status", "batch": batch as u64, "err": st.err, "nr": nr, "done": done,
            }));
            -(r.err as i64)
        }
    }
}
