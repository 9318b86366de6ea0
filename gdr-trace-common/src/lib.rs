//! Wire types shared by the eBPF programs and userspace.
//!
//! Every record in the ring buffer starts with [`EventHeader`]; its `kind` says which payload
//! follows. All structs are `#[repr(C)]` with explicit padding fields so that no byte is
//! implicit, and userspace decodes them with unaligned reads (see [`decode`]).
#![no_std]

pub mod hooks;
pub mod kinds;
pub mod lost;
pub mod mr;
pub mod p2p;
pub mod queues;
pub mod storage;
pub mod wire;

#[cfg(feature = "user")]
pub mod decode;

pub use hooks::*;
pub use kinds::*;
pub use mr::{DeregArgs, LiveUmem, MrArgs, MrEvent};
pub use wire::*;
