//! `gdr-own-root ROOT LIBRARY TARGET`: a process that plays a hostile container for the
//! security tests. In its own mount namespace it mounts a tmpfs at ROOT, copies LIBRARY to
//! ROOT/lib/libibverbs.so.1, makes ROOT its root as a container runtime does (pivot_root, old
//! root detached: /proc/PID/maps then names the library /lib/libibverbs.so.1), maps the
//! library and deletes that name; with TARGET other than `-`, it then makes the name an
//! absolute symlink to TARGET (a path outside its root). It prints `ready PID` and waits for
//! stdin to close.

use std::{ffi::CString, io::Read, os::fd::AsRawFd};

fn cstr(s: &str) -> CString {
    CString::new(s).expect("no NUL in argument")
}

fn check(what: &str, r: libc::c_int) {
    if r != 0 {
        eprintln!("gdr-own-root: {what}: {}", std::io::Error::last_os_error());
        std::process::exit(1);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, root, library, target] = &args[..] else {
        eprintln!("usage: gdr-own-root ROOT LIBRARY TARGET|-");
        std::process::exit(2);
    };
    // SAFETY: plain syscalls on NUL-terminated strings that outlive the calls.
    unsafe {
        check("unshare(CLONE_NEWNS)", libc::unshare(libc::CLONE_NEWNS));
        let none = std::ptr::null();
        check(
            "make / private",
            libc::mount(none, cstr("/").as_ptr(), none, libc::MS_REC | libc::MS_PRIVATE, std::ptr::null()),
        );
        check(
            "mount tmpfs",
            libc::mount(
                cstr("tmpfs").as_ptr(),
                cstr(root).as_ptr(),
                cstr("tmpfs").as_ptr(),
                0,
                std::ptr::null(),
            ),
        );
    }
    let lib_dir = format!("{root}/lib");
    std::fs::create_dir(&lib_dir).expect("mkdir lib");
    let inside = format!("{lib_dir}/libibverbs.so.1");
    std::fs::copy(library, &inside).expect("copy library in");
    std::fs::create_dir(format!("{root}/oldroot")).expect("mkdir oldroot");
    // SAFETY: as above.
    unsafe {
        let (new, old) = (cstr(root), cstr(&format!("{root}/oldroot")));
        check("pivot_root", libc::syscall(libc::SYS_pivot_root, new.as_ptr(), old.as_ptr()) as libc::c_int);
        check("chdir /", libc::chdir(cstr("/").as_ptr()));
        check("detach the old root", libc::umount2(cstr("/oldroot").as_ptr(), libc::MNT_DETACH));
    }
    let file = std::fs::File::open("/lib/libibverbs.so.1").expect("open library");
    let len = file.metadata().expect("stat").len() as usize;
    // SAFETY: a fresh read-only private mapping of a file we opened; never unmapped.
    let map = unsafe {
        libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_PRIVATE, file.as_raw_fd(), 0)
    };
    assert_ne!(map, libc::MAP_FAILED, "mmap: {}", std::io::Error::last_os_error());
    drop(file);
    std::fs::remove_file("/lib/libibverbs.so.1").expect("delete the mapped name");
    if target != "-" {
        std::os::unix::fs::symlink(target, "/lib/libibverbs.so.1").expect("plant the symlink");
    }
    println!("ready {}", std::process::id());
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
}
