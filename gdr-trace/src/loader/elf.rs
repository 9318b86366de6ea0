//! Where a function lives in a shared library file, for uprobes.
//!
//! libibverbs exports versioned symbols: `ibv_reg_mr@IBVERBS_1.0` (the old ABI) and
//! `ibv_reg_mr@@IBVERBS_1.1` (what new binaries call). A lookup by bare name finds only one of
//! them; a tracer must hook every version, so this returns them all, as file offsets.

use object::{Object, ObjectSegment, ObjectSymbol, ReadRef};

/// File offsets of every dynamic (or static) symbol named `name`, all versions, deduplicated,
/// in `data`: a library read through one descriptor (`crate::libfile`, only the parts the
/// parser asks for), called `shown` in messages.
pub fn symbol_file_offsets<'a, R: ReadRef<'a>>(data: R, shown: &str, name: &str) -> Result<Vec<u64>, String> {
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

/// The offsets of each of `names` the library exports; an error when none of them is there.
pub fn symbols_file_offsets<'a, 'n, R: ReadRef<'a>>(
    data: R,
    shown: &str,
    names: &[&'n str],
) -> Result<Vec<(&'n str, Vec<u64>)>, String> {
    if let [one] = names {
        return Ok(vec![(*one, symbol_file_offsets(data, shown, one)?)]);
    }
    let found: Vec<(&str, Vec<u64>)> =
        names.iter().filter_map(|n| symbol_file_offsets(data, shown, n).ok().map(|o| (*n, o))).collect();
    if found.is_empty() {
        return Err(format!("{shown} has none of {}", names.join(", ")));
    }
    Ok(found)
}

/// The file offsets of every one of `names` that `data` defines, from one parse (a library
/// copy found later is hooked for all its functions at once: libcuda is ~100 MB of symbols).
pub fn offsets_by_name<'a, 'n, R: ReadRef<'a>>(
    data: R,
    shown: &str,
    names: &[&'n str],
) -> Result<std::collections::BTreeMap<&'n str, Vec<u64>>, String> {
    let file = object::File::parse(data).map_err(|e| format!("parsing {shown}: {e}"))?;
    let segs: Vec<(u64, u64, u64)> =
        file.segments().map(|s| (s.address(), s.address() + s.size(), s.file_range().0)).collect();
    let mut out: std::collections::BTreeMap<&str, Vec<u64>> = Default::default();
    for sym in file.dynamic_symbols().chain(file.symbols()).filter(|s| s.is_definition()) {
        let Some(name) = sym.name().ok().and_then(|n| names.iter().find(|w| **w == n)) else { continue };
        let a = sym.address();
        if let Some((start, _, off)) = segs.iter().find(|(s, e, _)| *s <= a && a < *e) {
            out.entry(*name).or_default().push(a - start + off);
        }
    }
    for v in out.values_mut() {
        v.sort_unstable();
        v.dedup();
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
        let data = data.as_slice();
        let offs = symbol_file_offsets(data, "libc", "getpid").unwrap();
        assert!(!offs.is_empty() && offs.iter().all(|&o| o > 0));
        let err = symbol_file_offsets(data, "libc", "no_such_function_here").unwrap_err();
        assert!(err.contains("has no symbol"), "{err}");
        let many = offsets_by_name(data, "libc", &["getpid", "no_such_function_here"]).unwrap();
        assert_eq!((many.len(), many.get("getpid")), (1, Some(&offs)), "one parse, same offsets");
        let err = symbol_file_offsets(&b"\x7fELF garbage"[..], "junk", "getpid").unwrap_err();
        assert!(err.contains("parsing junk"), "{err}");
    }
}
