//! Present so the crate has a library target that userspace can build-depend on (for rebuild
//! tracking); the programs are in the `gdr-trace` binary target, `main.rs`.
#![no_std]
