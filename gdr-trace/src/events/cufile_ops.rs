//! What each cuFile call is: its name, which arguments and results it has (sinks show those
//! and nothing else: a driver open has no descriptor), and the error its return value names.

use gdr_trace_common::storage::GdsOp;

use crate::hooks::Call;

use super::{
    cufile_errors::{cuda_error, cufile_error, errno_error, Named},
    storage::GdsCall,
};

pub use crate::hooks::Shape;

/// The hook table's row of a cuFile operation (each has one: a test says so), found once per
/// run: sinks and the storage state ask it for every cuFile call.
fn row(op: GdsOp) -> Option<(&'static str, Shape)> {
    static BY_OP: std::sync::OnceLock<Vec<(GdsOp, &'static str, Shape)>> = std::sync::OnceLock::new();
    let rows = BY_OP.get_or_init(|| {
        crate::hooks::HOOKS
            .iter()
            .filter_map(|h| match h.call {
                Call::CuFile(o, shape) => Some((o, h.function, shape)),
                _ => None,
            })
            .collect()
    });
    rows.iter().find(|r| r.0 == op).map(|r| (r.1, r.2))
}

/// The cuFile function a call op is (its row's function).
pub fn op_name(op: GdsOp) -> &'static str {
    row(op).map_or("?", |r| r.0)
}

/// Which fields a call of `op` has (its row's shape).
pub fn shape(op: GdsOp) -> Shape {
    row(op).map_or(Shape::NONE, |r| r.1)
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
