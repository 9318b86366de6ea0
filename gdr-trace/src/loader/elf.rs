//! Where a function lives in a shared library file, for uprobes.
//!
//! libibverbs exports versioned symbols: `ibv_reg_mr@IBVERBS_1.0` (the old ABI) and
//! `ibv_reg_mr@@IBVERBS_1.1` (what new binaries call). A lookup by bare name finds only one of
//! them; a tracer must hook every version, so this returns them all, as file offsets.

use std::path::Path;

use object::{Object, ObjectSegment, ObjectSymbol};

/// File offsets of every dynamic (or static) symbol named `name`, all versions, deduplicated.
pub fn symbol_file_offsets(path: &Path, name: &str) -> Result<Vec<u64>, String> {
    let data = std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let file = object::File::parse(&*data).map_err(|e| format!("parsing {}: {e}", path.display()))?;
    offsets_in(&file, path, name)
}

/// The offsets of each of `names` the library exports (read once); an error when none is there.
pub fn symbols_file_offsets<'n>(path: &Path, names: &[&'n str]) -> Result<Vec<(&'n str, Vec<u64>)>, String> {
    let data = std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let file = object::File::parse(&*data).map_err(|e| format!("parsing {}: {e}", path.display()))?;
    let found: Vec<(&str, Vec<u64>)> =
        names.iter().filter_map(|n| offsets_in(&file, path, n).ok().map(|o| (*n, o))).collect();
    if found.is_empty() {
        return Err(format!("{} has none of {}", path.display(), names.join(", ")));
    }
    Ok(found)
}

fn offsets_in(file: &object::File, path: &Path, name: &str) -> Result<Vec<u64>, String> {
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
            .ok_or_else(|| format!("{name} at {a:#x} is in no loadable segment of {}", path.display()))?;
        let (file_off, _) = seg.file_range();
        out.push(a - seg.address() + file_off);
    }
    if out.is_empty() {
        return Err(format!("{} has no symbol {name}", path.display()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_libc_function_and_rejects_missing() {
        let libc = ["/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6"]
            .into_iter()
            .map(Path::new)
            .find(|p| p.exists())
            .expect("libc present");
        let offs = symbol_file_offsets(libc, "getpid").unwrap();
        assert!(!offs.is_empty() && offs.iter().all(|&o| o > 0));
        let err = symbol_file_offsets(libc, "no_such_function_here").unwrap_err();
        assert!(err.contains("has no symbol"), "{err}");
    }
}
