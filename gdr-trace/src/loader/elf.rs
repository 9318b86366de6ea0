//! Where a function lives in a shared library file, for uprobes.
//!
//! libibverbs exports versioned symbols: `ibv_reg_mr@IBVERBS_1.0` (the old ABI) and
//! `ibv_reg_mr@@IBVERBS_1.1` (what new binaries call). A lookup by bare name finds only one of
//! them; a tracer must hook every version, so this returns them all, as file offsets.

use object::{Object, ObjectSegment, ObjectSymbol};

/// File offsets of every dynamic (or static) symbol named `name`, all versions, deduplicated,
/// in `data`: the bytes of a library read through one descriptor (`crate::libfile`), called
/// `shown` in messages.
pub fn symbol_file_offsets(data: &[u8], shown: &str, name: &str) -> Result<Vec<u64>, String> {
    let file = object::File::parse(data).map_err(|e| format!("parsing {shown}: {e}"))?;
    let mut addrs: Vec<u64> = file
        .dynamic_symbols()
        .chain(file.symbols())
        .filter(|s| s.is_definition() && s.name() == Ok(name))
        .map(|s| s.address())
        .collect();
    addrs.sort_unstable();
    addrs.dedup();
    let mut out = Vec::new();
    for a in addrs {
        let seg = file
            .segments()
            .find(|s| s.address() <= a && a < s.address() + s.size())
            .ok_or_else(|| format!("{name} at {a:#x} is in no loadable segment of {shown}"))?;
        let (file_off, _) = seg.file_range();
        out.push(a - seg.address() + file_off);
    }
    if out.is_empty() {
        return Err(format!("{shown} has no symbol {name}"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn finds_libc_function_and_rejects_missing() {
        let libc = ["/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6"]
            .into_iter()
            .map(Path::new)
            .find(|p| p.exists())
            .expect("libc present");
        let data = std::fs::read(libc).unwrap();
        let offs = symbol_file_offsets(&data, "libc", "getpid").unwrap();
        assert!(!offs.is_empty() && offs.iter().all(|&o| o > 0));
        let err = symbol_file_offsets(&data, "libc", "no_such_function_here").unwrap_err();
        assert!(err.contains("has no symbol"), "{err}");
        let err = symbol_file_offsets(b"\x7fELF garbage", "junk", "getpid").unwrap_err();
        assert!(err.contains("parsing junk"), "{err}");
    }
}
