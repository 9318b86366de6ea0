//! Attach errors as people read them.

/// An aya error with its whole source chain (the errno and the verifier log are in there).
pub(crate) fn explain(prog: &str, e: impl std::error::Error) -> String {
    let mut s = format!("{prog}: {e}");
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(&format!(": {inner}"));
        src = inner.source();
    }
    s
}
