//! Builds the test cuFile library (cufile/libcufile.c, cufile/pool.c: its worker threads) with the system's C compiler and tells
//! the tests and workloads where it is (`GDR_TEST_LIBCUFILE`). The binaries run in the VM too,
//! which sees the host's files at the same paths.

use std::{path::PathBuf, process::Command};

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let lib = out.join("libcufile.so.0");
    let cc = std::env::var("CC").unwrap_or_else(|_| "gcc".into());
    let status = Command::new(&cc)
        .args([
            "-O2",
            "-g",
            "-Wall",
            "-Wextra",
            "-shared",
            "-fPIC",
            "-pthread",
            "-Wl,-soname,libcufile.so.0",
            "-Ikmod",
        ])
        .arg("-o")
        .arg(&lib)
        .args(["cufile/libcufile.c", "cufile/pool.c"])
        .status()
        .unwrap_or_else(|e| panic!("cannot run {cc} to build the test libcufile: {e}"));
    assert!(status.success(), "building tests/cufile/libcufile.c failed");
    println!("cargo:rustc-env=GDR_TEST_LIBCUFILE={}", lib.display());
    cuda(&out, &cc);
    hold_dereg(&out, &cc);
    for f in [
        "cufile/libcufile.c",
        "cufile/pool.c",
        "cufile/pool.h",
        "cufile/cufile.h",
        "kmod/gdrsim_uapi.h",
        "kmod/libcuda-sim.c",
        "kmod/libcuda-p2p.c",
        "kmod/cuda-workload.c",
        "kmod/cuda_types.h",
        "vm_rdma/hold_dereg.c",
    ] {
        println!("cargo:rerun-if-changed={f}");
    }
}

/// The test libcuda.so.1 (kmod/libcuda-sim.c + kmod/libcuda-p2p.c) and the CUDA workload linked
/// against it (`GDR_TEST_LIBCUDA`, `GDR_TEST_CUDA_WORKLOAD`); the workload links libibverbs when
/// its headers are there (its `host-mr` mode registers CUDA pinned host memory on rxe0).
fn cuda(out: &std::path::Path, cc: &str) {
    let dir = out.join("libcuda");
    std::fs::create_dir_all(&dir).expect("libcuda output folder");
    let lib = dir.join("libcuda.so.1");
    let flags = ["-O2", "-g", "-Wall", "-Wextra", "-Wno-unused-parameter"];
    let status = Command::new(cc)
        .args(flags)
        .args(["-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-Ikmod", "-o"])
        .arg(&lib)
        .args(["kmod/libcuda-sim.c", "kmod/libcuda-p2p.c", "-lpthread"])
        .status()
        .unwrap_or_else(|e| panic!("cannot run {cc} to build the test libcuda: {e}"));
    assert!(status.success(), "building the test libcuda failed");
    let workload = out.join("gdr-cuda-workload");
    let verbs = std::path::Path::new("/usr/include/infiniband/verbs.h").exists();
    let mut cmd = Command::new(cc);
    cmd.args(flags).arg("-o").arg(&workload).arg("kmod/cuda-workload.c").arg(&lib);
    cmd.arg(format!("-Wl,-rpath,{}", dir.display()));
    if verbs {
        cmd.arg("-libverbs");
    } else {
        cmd.arg("-DGDRSIM_NO_VERBS");
    }
    let status = cmd.status().unwrap_or_else(|e| panic!("cannot run {cc} to build the CUDA workload: {e}"));
    assert!(status.success(), "building kmod/cuda-workload.c failed");
    println!("cargo:rustc-env=GDR_TEST_LIBCUDA={}", lib.display());
    println!("cargo:rustc-env=GDR_TEST_CUDA_WORKLOAD={}", workload.display());
}

/// The preload that holds each MR live at its ibv_dereg_mr until the test has read the kernel's
/// MR list (vm_rdma/hold_dereg.c; `GDR_TEST_HOLD_DEREG`).
fn hold_dereg(out: &std::path::Path, cc: &str) {
    let lib = out.join("libgdr-hold-dereg.so");
    let status = Command::new(cc)
        .args(["-O2", "-g", "-Wall", "-Wextra", "-shared", "-fPIC", "-o"])
        .arg(&lib)
        .args(["vm_rdma/hold_dereg.c", "-ldl"])
        .status()
        .unwrap_or_else(|e| panic!("cannot run {cc} to build the dereg hold: {e}"));
    assert!(status.success(), "building tests/vm_rdma/hold_dereg.c failed");
    println!("cargo:rustc-env=GDR_TEST_HOLD_DEREG={}", lib.display());
}
