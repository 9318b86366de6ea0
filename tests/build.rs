//! Builds the test cuFile library (cufile/libcufile.c) with the system's C compiler and tells
//! the tests and workloads where it is (`GDR_TEST_LIBCUFILE`). The binaries run in the VM too,
//! which sees the host's files at the same paths.

use std::{path::PathBuf, process::Command};

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let lib = out.join("libcufile.so.0");
    let cc = std::env::var("CC").unwrap_or_else(|_| "gcc".into());
    let status = Command::new(&cc)
        .args(["-O2", "-g", "-Wall", "-Wextra", "-shared", "-fPIC", "-Wl,-soname,libcufile.so.0", "-Ikmod"])
        .arg("-o")
        .arg(&lib)
        .arg("cufile/libcufile.c")
        .status()
        .unwrap_or_else(|e| panic!("cannot run {cc} to build the test libcufile: {e}"));
    assert!(status.success(), "building tests/cufile/libcufile.c failed");
    println!("cargo:rustc-env=GDR_TEST_LIBCUFILE={}", lib.display());
    for f in ["cufile/libcufile.c", "cufile/cufile.h", "kmod/gdrsim_uapi.h"] {
        println!("cargo:rerun-if-changed={f}");
    }
}
