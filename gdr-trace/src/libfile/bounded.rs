//! Reading a library for its symbols without reading it whole: the ELF parser asks
//! for byte ranges (headers, the symbol and string tables) and gets them from the file with
//! `pread`, each range once, all of them together at most a cap. A file that claims a table
//! bigger than the cap, or a sparse "library" of a gigabyte, costs at most the cap and an error,
//! never a gigabyte of the tracer's memory.

use std::{cell::RefCell, collections::HashMap, fs::File, ops::Range, os::unix::fs::FileExt};

use object::ReadRef;

/// The most bytes read from one library for its symbols (libcuda's dynamic symbol and string
/// tables are a few MiB).
pub const MAX_SYMBOL_BYTES: u64 = 64 << 20;

/// The longest symbol or section name read.
const MAX_NAME: u64 = 4096;
/// Names are read this many bytes at a time.
const NAME_CHUNK: usize = 64;

/// A library's bytes, read on demand and kept (see the module's comment). `&BoundedElf` is an
/// `object::ReadRef`: parse it with `object::File::parse(&reader)`.
#[derive(Debug)]
pub struct BoundedElf {
    file: File,
    len: u64,
    cap: u64,
    state: RefCell<State>,
}

#[derive(Debug, Default)]
struct State {
    used: u64,
    bufs: HashMap<(u64, u64), Box<[u8]>>,
    strings: HashMap<(u64, u8), Box<[u8]>>,
}

impl BoundedElf {
    pub fn new(file: File, len: u64, cap: u64) -> Self {
        Self { file, len, cap, state: RefCell::default() }
    }

    /// Bytes read so far.
    pub fn used(&self) -> u64 {
        self.state.borrow().used
    }

    /// Charges `n` bytes to the cap: false (nothing read) when they would go over it.
    fn charge(state: &mut State, cap: u64, n: u64) -> bool {
        match state.used.checked_add(n) {
            Some(total) if total <= cap => {
                state.used = total;
                true
            }
            _ => false,
        }
    }
}

/// Extends a cached buffer's borrow to the reader's: buffers are boxed (they never move) and
/// never removed or changed while the reader lives.
fn keep<'a>(b: &[u8]) -> &'a [u8] {
    // SAFETY: see above; the box outlives every borrow of the reader.
    unsafe { std::mem::transmute::<&[u8], &'a [u8]>(b) }
}

impl<'a> ReadRef<'a> for &'a BoundedElf {
    fn len(self) -> Result<u64, ()> {
        Ok(self.len)
    }

    fn read_bytes_at(self, offset: u64, size: u64) -> Result<&'a [u8], ()> {
        if size == 0 {
            return Ok(&[]);
        }
        if offset.checked_add(size).is_none_or(|end| end > self.len) {
            return Err(());
        }
        let mut st = self.state.borrow_mut();
        if let Some(b) = st.bufs.get(&(offset, size)) {
            return Ok(keep(b));
        }
        if !BoundedElf::charge(&mut st, self.cap, size) {
            return Err(());
        }
        let mut buf = vec![0u8; usize::try_from(size).map_err(|_| ())?].into_boxed_slice();
        self.file.read_exact_at(&mut buf, offset).map_err(|_| ())?;
        let b = st.bufs.entry((offset, size)).or_insert(buf);
        Ok(keep(b))
    }

    fn read_bytes_at_until(self, range: Range<u64>, delimiter: u8) -> Result<&'a [u8], ()> {
        if range.start > range.end || range.end > self.len {
            return Err(());
        }
        let mut st = self.state.borrow_mut();
        if let Some(b) = st.strings.get(&(range.start, delimiter)) {
            return Ok(keep(b));
        }
        // Names are short: read a small chunk at a time, charging what is read.
        let want = (range.end - range.start).min(MAX_NAME) as usize;
        let mut buf = Vec::new();
        let end = loop {
            let from = buf.len();
            let chunk = (want - from).min(NAME_CHUNK);
            if chunk == 0 || !BoundedElf::charge(&mut st, self.cap, chunk as u64) {
                return Err(());
            }
            buf.resize(from + chunk, 0);
            let n = self.file.read_at(&mut buf[from..], range.start + from as u64).map_err(|_| ())?;
            buf.truncate(from + n);
            if let Some(i) = buf[from..].iter().position(|&c| c == delimiter) {
                break from + i;
            }
            if n == 0 {
                return Err(());
            }
        };
        buf.truncate(end);
        let b = st.strings.entry((range.start, delimiter)).or_insert(buf.into_boxed_slice());
        Ok(keep(b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn libc() -> std::path::PathBuf {
        ["/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6"]
            .into_iter()
            .map(std::path::PathBuf::from)
            .find(|p| p.exists())
            .expect("libc present")
    }

    #[test]
    fn symbols_come_from_a_small_part_of_the_file_and_match_a_whole_read() {
        let path = libc();
        let whole = std::fs::read(&path).unwrap();
        let r = BoundedElf::new(File::open(&path).unwrap(), whole.len() as u64, MAX_SYMBOL_BYTES);
        let a = crate::loader::elf::symbol_file_offsets(&r, "libc", "getpid").unwrap();
        let b = crate::loader::elf::symbol_file_offsets(whole.as_slice(), "libc", "getpid").unwrap();
        assert_eq!(a, b);
        assert!(r.used() < whole.len() as u64 / 2, "read {} of {} bytes", r.used(), whole.len());
    }

    #[test]
    fn a_reader_over_its_cap_fails_instead_of_reading() {
        let path = libc();
        let len = std::fs::metadata(&path).unwrap().len();
        let r = BoundedElf::new(File::open(&path).unwrap(), len, 4096);
        let e = crate::loader::elf::symbol_file_offsets(&r, "libc", "getpid").unwrap_err();
        assert!(r.used() <= 4096, "{}", r.used());
        assert!(!e.is_empty());
    }
}
