//! What each cuFile call is: its name, which arguments and results it has (sinks show those
//! and nothing else: a driver open has no descriptor), and the error its return value names.

use gdr_trace_common::storage::GdsOp;

use super::{
    cufile_errors::{cuda_error, cufile_error, errno_error, Named},
    storage::GdsCall,
};

/// The cuFile function a call op is.
pub fn op_name(op: GdsOp) -> &'static str {
    match op {
        GdsOp::DriverOpen => "cuFileDriverOpen",
        GdsOp::DriverClose => "cuFileDriverClose",
        GdsOp::DriverCloseV2 => "cuFileDriverClose_v2",
        GdsOp::HandleRegister => "cuFileHandleRegister",
        GdsOp::HandleDeregister => "cuFileHandleDeregister",
        GdsOp::BufRegister => "cuFileBufRegister",
        GdsOp::BufDeregister => "cuFileBufDeregister",
        GdsOp::Read => "cuFileRead",
        GdsOp::Write => "cuFileWrite",
        GdsOp::ReadAsync => "cuFileReadAsync",
        GdsOp::WriteAsync => "cuFileWriteAsync",
        GdsOp::BatchSetUp => "cuFileBatchIOSetUp",
        GdsOp::BatchSubmit => "cuFileBatchIOSubmit",
        GdsOp::BatchGetStatus => "cuFileBatchIOGetStatus",
        GdsOp::BatchCancel => "cuFileBatchIOCancel",
        GdsOp::BatchDestroy => "cuFileBatchIODestroy",
        GdsOp::StreamRegister => "cuFileStreamRegister",
        GdsOp::StreamDeregister => "cuFileStreamDeregister",
    }
}

/// Which fields a call has.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Shape {
    /// A `CUfileHandle_t`, and so a descriptor and a file.
    pub file: bool,
    /// A buffer address.
    pub buf: bool,
    /// A length (registration) or a size with file and buffer offsets (I/O).
    pub length: bool,
    pub offsets: bool,
    pub flags: bool,
    pub stream: bool,
    /// A `CUfileBatchHandle_t`.
    pub batch: bool,
    /// Entries asked for (SetUp) or returned (GetStatus).
    pub batch_count: bool,
    /// GetStatus: bytes completed and entries failed.
    pub completion: bool,
    /// A return value (every call but the two that return `void`).
    pub ret: bool,
}

pub const fn shape(op: GdsOp) -> Shape {
    let none = Shape {
        file: false,
        buf: false,
        length: false,
        offsets: false,
        flags: false,
        stream: false,
        batch: false,
        batch_count: false,
        completion: false,
        ret: true,
    };
    let io = Shape { file: true, buf: true, length: true, offsets: true, ..none };
    match op {
        GdsOp::DriverOpen | GdsOp::DriverClose | GdsOp::DriverCloseV2 => none,
        GdsOp::HandleRegister => Shape { file: true, ..none },
        GdsOp::HandleDeregister => Shape { file: true, ret: false, ..none },
        GdsOp::BufRegister => Shape { buf: true, length: true, flags: true, ..none },
        GdsOp::BufDeregister => Shape { buf: true, ..none },
        GdsOp::Read | GdsOp::Write => io,
        GdsOp::ReadAsync | GdsOp::WriteAsync => Shape { stream: true, ..io },
        GdsOp::BatchSetUp => Shape { batch: true, batch_count: true, ..none },
        GdsOp::BatchSubmit => Shape { batch: true, flags: true, ..io },
        GdsOp::BatchGetStatus => Shape { batch: true, batch_count: true, completion: true, ..none },
        GdsOp::BatchCancel => Shape { batch: true, ..none },
        GdsOp::BatchDestroy => Shape { batch: true, ret: false, ..none },
        GdsOp::StreamRegister => Shape { stream: true, flags: true, ..none },
        GdsOp::StreamDeregister => Shape { stream: true, ..none },
    }
}

/// Moves file data (its bytes count towards a verdict).
pub const fn moves_data(op: GdsOp) -> bool {
    matches!(op, GdsOp::Read | GdsOp::Write | GdsOp::ReadAsync | GdsOp::WriteAsync | GdsOp::BatchSubmit)
}

/// The error a call returned, named: a `CUfileOpError`, or for `cuFileRead`/`cuFileWrite` a
/// negative `CUfileOpError` or errno. None on success and for calls without a return value.
pub fn error(call: &GdsCall) -> Option<Named> {
    if !shape(call.op).ret || call.ret == 0 || (call.op.returns_ssize() && call.ret > 0) {
        return None;
    }
    if call.op.returns_ssize() {
        return cufile_error(call.ret).or_else(|| errno_error(call.ret));
    }
    Some(cufile_error(call.ret).unwrap_or_else(|| Named {
        name: format!("CUfileOpError {}", call.ret),
        description: "unknown cufile error".into(),
    }))
}

/// The CUDA driver's error that came with it (`CUfileError_t.cu_err`), if any.
pub fn cuda(call: &GdsCall) -> Option<Named> {
    (shape(call.op).ret && !call.op.returns_ssize() && call.detail.cu_err != 0)
        .then(|| cuda_error(call.detail.cu_err))
}
