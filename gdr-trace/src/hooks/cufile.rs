//! libcufile's rows of the hook table (`Path::Storage`): every entry point of NVIDIA's
//! `libcufile.so.0` (cufile.h; the `nvidia-cufile-cu12` wheel ships both) that moves data or
//! changes what can move it, and the list of its other exports with why they are not hooked
//! (a test checks both against the real library: nothing exported is left unclassified).

use gdr_trace_common::{storage::GdsOp, HookId};

use super::{row, Call, Hook, Library, Path, Programs, Role, Shape};

/// One cuFile function: a uprobe + uretprobe pair named after it.
const fn call(
    id: HookId,
    (op, shape): (GdsOp, Shape),
    function: &'static str,
    progs: (&'static str, &'static str),
    feeds: &'static str,
) -> Hook {
    row(
        id,
        Role::CuFileCall,
        Path::Storage,
        function,
        "libcufile.so.0",
        Programs::UserReturn { lib: Library::Cufile, uprobe: progs.0, uretprobe: progs.1 },
        feeds,
    )
    .op(Call::CuFile(op, shape))
}

pub const CUFILE: &[Hook] = &[
    // CUDA 11.4+ (the first cufile.h).
    call(
        HookId::CuFileDriverOpen,
        (GdsOp::DriverOpen, Shape::NONE),
        "cuFileDriverOpen",
        ("gds_uprobe_cufile_driver_open", "gds_uretprobe_cufile_driver_open"),
        "gds_io: cuFile opened (POSIX or nvidia-fs behind it: see the I/O)",
    ),
    // CUDA 11.4+; since 12.x cufile.h `#define`s it to cuFileDriverClose_v2, and the library's
    // own cuFileDriverClose jumps there (reported once, as the call the application made).
    call(
        HookId::CuFileDriverClose,
        (GdsOp::DriverClose, Shape::NONE),
        "cuFileDriverClose",
        ("gds_uprobe_cufile_driver_close", "gds_uretprobe_cufile_driver_close"),
        "gds_io: cuFile closed (no cuFile I/O after it)",
    ),
    call(
        HookId::CuFileDriverCloseV2,
        (GdsOp::DriverCloseV2, Shape::NONE),
        "cuFileDriverClose_v2",
        ("gds_uprobe_cufile_driver_close_v2", "gds_uretprobe_cufile_driver_close_v2"),
        "gds_io: cuFile closed (what cuFileDriverClose compiles to since CUDA 12)",
    ),
    call(
        HookId::CuFileHandleRegister,
        (GdsOp::HandleRegister, Shape { file: true, ..Shape::NONE }),
        "cuFileHandleRegister",
        ("gds_uprobe_cufile_handle_register", "gds_uretprobe_cufile_handle_register"),
        "gds_io: the fd behind each CUfileHandle_t",
    ),
    call(
        HookId::CuFileHandleDeregister,
        (GdsOp::HandleDeregister, Shape { file: true, ret: false, ..Shape::NONE }),
        "cuFileHandleDeregister",
        ("gds_uprobe_cufile_handle_deregister", "gds_uretprobe_cufile_handle_deregister"),
        "gds_io: a CUfileHandle_t released (its fd no longer does cuFile I/O)",
    ),
    call(
        HookId::CuFileBufRegister,
        (GdsOp::BufRegister, Shape { buf: true, length: true, flags: true, ..Shape::NONE }),
        "cuFileBufRegister",
        ("gds_uprobe_cufile_buf_register", "gds_uretprobe_cufile_buf_register"),
        "gds_io: GPU buffer registration (nvidia-fs MAP or nothing)",
    ),
    call(
        HookId::CuFileBufDeregister,
        (GdsOp::BufDeregister, Shape { buf: true, ..Shape::NONE }),
        "cuFileBufDeregister",
        ("gds_uprobe_cufile_buf_deregister", "gds_uretprobe_cufile_buf_deregister"),
        "gds_io: a GPU buffer's registration released",
    ),
    call(
        HookId::CuFileRead,
        (GdsOp::Read, Shape::IO),
        "cuFileRead",
        ("gds_uprobe_cufile_read", "gds_uretprobe_cufile_read"),
        "gds_io: gds-nvfs or gds-compat per read",
    ),
    call(
        HookId::CuFileWrite,
        (GdsOp::Write, Shape::IO),
        "cuFileWrite",
        ("gds_uprobe_cufile_write", "gds_uretprobe_cufile_write"),
        "gds_io: gds-nvfs or gds-compat per write",
    ),
    // CUDA 12.2+ stream API.
    call(
        HookId::CuFileReadAsync,
        (GdsOp::ReadAsync, Shape { stream: true, ..Shape::IO }),
        "cuFileReadAsync",
        ("gds_uprobe_cufile_read_async", "gds_uretprobe_cufile_read_async"),
        "gds_io: stream-ordered reads (classified by the worker-thread I/O attributed to them)",
    ),
    call(
        HookId::CuFileWriteAsync,
        (GdsOp::WriteAsync, Shape { stream: true, ..Shape::IO }),
        "cuFileWriteAsync",
        ("gds_uprobe_cufile_write_async", "gds_uretprobe_cufile_write_async"),
        "gds_io: stream-ordered writes (classified by the worker-thread I/O attributed to them)",
    ),
    call(
        HookId::CuFileStreamRegister,
        (GdsOp::StreamRegister, Shape { stream: true, flags: true, ..Shape::NONE }),
        "cuFileStreamRegister",
        ("gds_uprobe_cufile_stream_register", "gds_uretprobe_cufile_stream_register"),
        "gds_io: a CUDA stream set up for cuFile I/O, with its flags",
    ),
    call(
        HookId::CuFileStreamDeregister,
        (GdsOp::StreamDeregister, Shape { stream: true, ..Shape::NONE }),
        "cuFileStreamDeregister",
        ("gds_uprobe_cufile_stream_deregister", "gds_uretprobe_cufile_stream_deregister"),
        "gds_io: a CUDA stream's cuFile resources released",
    ),
    // CUDA 11.6+ batch API.
    call(
        HookId::CuFileBatchIoSetUp,
        (GdsOp::BatchSetUp, Shape { batch: true, batch_count: true, ..Shape::NONE }),
        "cuFileBatchIOSetUp",
        ("gds_uprobe_cufile_batch_io_set_up", "gds_uretprobe_cufile_batch_io_set_up"),
        "gds_io: a batch handle and its size",
    ),
    call(
        HookId::CuFileBatchIoSubmit,
        (GdsOp::BatchSubmit, Shape { batch: true, flags: true, ..Shape::IO }),
        "cuFileBatchIOSubmit",
        ("gds_uprobe_cufile_batch_io_submit", "gds_uretprobe_cufile_batch_io_submit"),
        "gds_io: one per batch entry (classified by the worker-thread I/O attributed to it)",
    ),
    call(
        HookId::CuFileBatchIoGetStatus,
        (GdsOp::BatchGetStatus, Shape { batch: true, batch_count: true, completion: true, ..Shape::NONE }),
        "cuFileBatchIOGetStatus",
        ("gds_uprobe_cufile_batch_io_get_status", "gds_uretprobe_cufile_batch_io_get_status"),
        "gds_io: entries completed, their bytes and failures (I/O done inside is classified)",
    ),
    call(
        HookId::CuFileBatchIoCancel,
        (GdsOp::BatchCancel, Shape { batch: true, ..Shape::NONE }),
        "cuFileBatchIOCancel",
        ("gds_uprobe_cufile_batch_io_cancel", "gds_uretprobe_cufile_batch_io_cancel"),
        "gds_io: a batch's outstanding I/O cancelled",
    ),
    call(
        HookId::CuFileBatchIoDestroy,
        (GdsOp::BatchDestroy, Shape { batch: true, ret: false, ..Shape::NONE }),
        "cuFileBatchIODestroy",
        ("gds_uprobe_cufile_batch_io_destroy", "gds_uretprobe_cufile_batch_io_destroy"),
        "gds_io: a batch handle released",
    ),
];

/// Why an export of libcufile.so.0 is not hooked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotHooked {
    /// Reads or sets a setting, a version or a count: moves no data, and what it changes shows
    /// in the calls that do (nvidia-fs ioctls or POSIX I/O inside them).
    Configuration,
    /// Not in cufile.h: the host side of the library's own CUDA kernels and stream callbacks,
    /// run inside the stream API's calls (hooked) on the library's behalf.
    Internal,
}

/// Every other `cuFile*` export of libcufile.so.0 (1.14, CUDA 12.9), with why it is left out.
pub const CUFILE_NOT_HOOKED: &[(&str, NotHooked)] = &[
    ("cuFileDriverGetProperties", NotHooked::Configuration),
    ("cuFileDriverSetPollMode", NotHooked::Configuration),
    ("cuFileDriverSetMaxDirectIOSize", NotHooked::Configuration),
    ("cuFileDriverSetMaxCacheSize", NotHooked::Configuration),
    ("cuFileDriverSetMaxPinnedMemSize", NotHooked::Configuration),
    ("cuFileGetParameterBool", NotHooked::Configuration),
    ("cuFileGetParameterSizeT", NotHooked::Configuration),
    ("cuFileGetParameterString", NotHooked::Configuration),
    ("cuFileSetParameterBool", NotHooked::Configuration),
    ("cuFileSetParameterSizeT", NotHooked::Configuration),
    ("cuFileSetParameterString", NotHooked::Configuration),
    ("cuFileGetVersion", NotHooked::Configuration),
    ("cuFileUseCount", NotHooked::Configuration),
    ("cuFileCopyGpu", NotHooked::Internal),
    ("cuFileCopyGpuPosixIORetry", NotHooked::Internal),
    ("cuFileCopyGpuWrap", NotHooked::Internal),
    ("cuFileCopyGpuWrapPosixIORetry", NotHooked::Internal),
    ("cuFileGpuWaitValue32", NotHooked::Internal),
    ("cuFileInlineGpu", NotHooked::Internal),
    ("cuFileSparseGpu", NotHooked::Internal),
    ("cuFileStreamHandleInline", NotHooked::Internal),
    ("cuFileStreamHandleSparse", NotHooked::Internal),
    ("cuFileStreamWaitValue32", NotHooked::Internal),
];
