//! Names for the numbers cuFile calls return: `CUfileOpError` (cufile.h, 5000 + n), the CUDA
//! driver's `CUresult` (cuda.h) that comes with `CU_FILE_CUDA_DRIVER_ERROR`, and the negative
//! errno values of `cuFileRead`/`cuFileWrite`.

/// `CUfileOpError`: code, name, and the library's own description (`cufileop_status_error`).
/// Checked against the cufile.h of the `nvidia-cufile-cu12` wheel (tests/cufile_wheel.rs).
pub const CUFILE_ERRORS: &[(i64, &str, &str)] = &[
    (0, "CU_FILE_SUCCESS", "cufile success"),
    (
        5001,
        "CU_FILE_DRIVER_NOT_INITIALIZED",
        "nvidia-fs driver is not loaded. Set allow_compat_mode to true in cufile.json file to enable compatible mode",
    ),
    (5002, "CU_FILE_DRIVER_INVALID_PROPS", "invalid property"),
    (5003, "CU_FILE_DRIVER_UNSUPPORTED_LIMIT", "property range error"),
    (5004, "CU_FILE_DRIVER_VERSION_MISMATCH", "nvidia-fs driver version mismatch"),
    (5005, "CU_FILE_DRIVER_VERSION_READ_ERROR", "nvidia-fs driver version read error"),
    (5006, "CU_FILE_DRIVER_CLOSING", "driver shutdown in progress"),
    (5007, "CU_FILE_PLATFORM_NOT_SUPPORTED", "GPUDirect Storage not supported on current platform"),
    (5008, "CU_FILE_IO_NOT_SUPPORTED", "GPUDirect Storage not supported on current file"),
    (5009, "CU_FILE_DEVICE_NOT_SUPPORTED", "GPUDirect Storage not supported on current GPU"),
    (5010, "CU_FILE_NVFS_DRIVER_ERROR", "nvidia-fs driver ioctl error"),
    (5011, "CU_FILE_CUDA_DRIVER_ERROR", "CUDA Driver API error"),
    (5012, "CU_FILE_CUDA_POINTER_INVALID", "invalid device pointer"),
    (5013, "CU_FILE_CUDA_MEMORY_TYPE_INVALID", "invalid pointer memory type"),
    (5014, "CU_FILE_CUDA_POINTER_RANGE_ERROR", "pointer range exceeds allocated address range"),
    (5015, "CU_FILE_CUDA_CONTEXT_MISMATCH", "cuda context mismatch"),
    (5016, "CU_FILE_INVALID_MAPPING_SIZE", "access beyond maximum pinned size"),
    (5017, "CU_FILE_INVALID_MAPPING_RANGE", "access beyond mapped size"),
    (5018, "CU_FILE_INVALID_FILE_TYPE", "unsupported file type"),
    (5019, "CU_FILE_INVALID_FILE_OPEN_FLAG", "unsupported file open flags"),
    (5020, "CU_FILE_DIO_NOT_SET", "fd direct IO not set"),
    (5022, "CU_FILE_INVALID_VALUE", "invalid arguments"),
    (5023, "CU_FILE_MEMORY_ALREADY_REGISTERED", "device pointer already registered"),
    (5024, "CU_FILE_MEMORY_NOT_REGISTERED", "device pointer lookup failure"),
    (5025, "CU_FILE_PERMISSION_DENIED", "driver or file access error"),
    (5026, "CU_FILE_DRIVER_ALREADY_OPEN", "driver is already open"),
    (5027, "CU_FILE_HANDLE_NOT_REGISTERED", "file descriptor is not registered"),
    (5028, "CU_FILE_HANDLE_ALREADY_REGISTERED", "file descriptor is already registered"),
    (5029, "CU_FILE_DEVICE_NOT_FOUND", "GPU device not found"),
    (5030, "CU_FILE_INTERNAL_ERROR", "internal error"),
    (5031, "CU_FILE_GETNEWFD_FAILED", "failed to obtain new file descriptor"),
    (5033, "CU_FILE_NVFS_SETUP_ERROR", "NVFS driver initialization error"),
    (5034, "CU_FILE_IO_DISABLED", "GPUDirect Storage disabled by config on current file"),
    (5035, "CU_FILE_BATCH_SUBMIT_FAILED", "failed to submit batch operation"),
    (5036, "CU_FILE_GPU_MEMORY_PINNING_FAILED", "failed to allocate pinned GPU Memory"),
    (5037, "CU_FILE_BATCH_FULL", "queue full for batch operation"),
    (5038, "CU_FILE_ASYNC_NOT_SUPPORTED", "cuFile stream operation not supported"),
    (5039, "CU_FILE_IO_MAX_ERROR", "GPUDirect Storage Max Error"),
];

/// The CUDA driver's `CUresult` values a cuFile call can pass on (cuda.h, CUDA 12).
pub const CUDA_ERRORS: &[(i32, &str, &str)] = &[
    (1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"),
    (2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"),
    (3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"),
    (4, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"),
    (34, "CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library"),
    (35, "CUDA_ERROR_INSUFFICIENT_DRIVER", "CUDA driver version is insufficient"),
    (36, "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER", "the call requires a newer driver"),
    (46, "CUDA_ERROR_DEVICE_UNAVAILABLE", "CUDA-capable device(s) busy or unavailable"),
    (100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"),
    (101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"),
    (201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"),
    (205, "CUDA_ERROR_MAP_FAILED", "mapping of buffer object failed"),
    (206, "CUDA_ERROR_UNMAP_FAILED", "unmapping of buffer object failed"),
    (208, "CUDA_ERROR_ALREADY_MAPPED", "resource already mapped"),
    (211, "CUDA_ERROR_NOT_MAPPED", "resource not mapped"),
    (214, "CUDA_ERROR_ECC_UNCORRECTABLE", "uncorrectable ECC error encountered"),
    (217, "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED", "peer access is not supported between these two devices"),
    (304, "CUDA_ERROR_OPERATING_SYSTEM", "OS call failed or operation not supported on this OS"),
    (400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"),
    (401, "CUDA_ERROR_ILLEGAL_STATE", "the operation cannot be performed in the present state"),
    (500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"),
    (600, "CUDA_ERROR_NOT_READY", "device not ready"),
    (700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"),
    (
        712,
        "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
        "part or all of the host memory is already registered",
    ),
    (713, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED", "the host pointer is not registered"),
    (719, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"),
    (800, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"),
    (801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"),
    (802, "CUDA_ERROR_SYSTEM_NOT_READY", "system not yet initialized"),
    (
        803,
        "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
        "system has unsupported display driver / cuda driver combination",
    ),
    (
        804,
        "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
        "forward compatibility was attempted on non supported HW",
    ),
    (999, "CUDA_ERROR_UNKNOWN", "unknown error"),
];

/// A named error: what JSON's `error` holds, and the words text adds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named {
    pub name: String,
    pub description: String,
}

fn named(name: &str, description: &str) -> Named {
    Named { name: name.to_string(), description: description.to_string() }
}

/// A `CUfileOpError` (sign ignored: `cuFileRead`/`cuFileWrite` return it negated).
pub fn cufile_error(code: i64) -> Option<Named> {
    let code = code.checked_abs()?;
    CUFILE_ERRORS.iter().find(|(c, ..)| *c == code).map(|(_, n, d)| named(n, d))
}

/// A `CUresult`: its name from the table, else `CUresult <n>`.
pub fn cuda_error(code: i32) -> Named {
    CUDA_ERRORS.iter().find(|(c, ..)| *c == code).map_or_else(
        || Named { name: format!("CUresult {code}"), description: "CUDA driver error".into() },
        |(_, n, d)| named(n, d),
    )
}

/// errno values a file read or write fails with, by name.
const ERRNOS: &[(i32, &str)] = &[
    (libc::EPERM, "EPERM"),
    (libc::ENOENT, "ENOENT"),
    (libc::EINTR, "EINTR"),
    (libc::EIO, "EIO"),
    (libc::ENXIO, "ENXIO"),
    (libc::EBADF, "EBADF"),
    (libc::EAGAIN, "EAGAIN"),
    (libc::ENOMEM, "ENOMEM"),
    (libc::EACCES, "EACCES"),
    (libc::EFAULT, "EFAULT"),
    (libc::EBUSY, "EBUSY"),
    (libc::ENODEV, "ENODEV"),
    (libc::EISDIR, "EISDIR"),
    (libc::EINVAL, "EINVAL"),
    (libc::EFBIG, "EFBIG"),
    (libc::ENOSPC, "ENOSPC"),
    (libc::ESPIPE, "ESPIPE"),
    (libc::EROFS, "EROFS"),
    (libc::EOVERFLOW, "EOVERFLOW"),
    (libc::EOPNOTSUPP, "EOPNOTSUPP"),
    (libc::ETIMEDOUT, "ETIMEDOUT"),
];

/// A negative errno (`cuFileRead`/`cuFileWrite`: `-errno` for POSIX errors).
pub fn errno_error(ret: i64) -> Option<Named> {
    let e = i32::try_from(ret.checked_neg()?).ok()?;
    let (_, name) = ERRNOS.iter().find(|(n, _)| *n == e)?;
    let text = std::io::Error::from_raw_os_error(e).to_string();
    let description = text.split(" (os error").next().unwrap_or(&text).to_string();
    Some(Named { name: name.to_string(), description })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_have_names() {
        let e = cufile_error(5033).unwrap();
        assert_eq!(
            (e.name.as_str(), e.description.as_str()),
            ("CU_FILE_NVFS_SETUP_ERROR", "NVFS driver initialization error")
        );
        assert_eq!(cufile_error(-5027).unwrap().name, "CU_FILE_HANDLE_NOT_REGISTERED");
        assert_eq!(cufile_error(5021), None, "5021 and 5032 are not in cufile.h");
        assert_eq!(cuda_error(100).name, "CUDA_ERROR_NO_DEVICE");
        assert_eq!(cuda_error(12345).name, "CUresult 12345");
        let io = errno_error(-5).unwrap();
        assert_eq!((io.name.as_str(), io.description.as_str()), ("EIO", "Input/output error"));
        assert_eq!(errno_error(-4000), None);
        assert_eq!(errno_error(i64::MIN), None);
        let mut codes: Vec<i64> = CUFILE_ERRORS.iter().map(|e| e.0).collect();
        codes.dedup();
        assert_eq!(codes.len(), CUFILE_ERRORS.len(), "one row per code");
    }
}
