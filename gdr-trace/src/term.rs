//! How text for people is laid out on stdout: tables as wide as the terminal, box lines only on
//! a terminal; in a pipe or a file plain aligned columns, not wrapped (every value whole on its
//! line, for grep and awk) unless `COLUMNS` gives a width. A leaf (imports nothing of this
//! crate): every table for people is made here.
//!
//! No colour: text for people goes through `crate::escape`, which writes every escape sequence
//! as visible text (a process name must not drive the terminal), colour codes included.

use std::{cell::Cell, io::IsTerminal, sync::OnceLock};

use comfy_table::{presets, ContentArrangement, Table};

/// The width of a terminal that does not tell its size (and `COLUMNS` does not either).
pub const DEFAULT_WIDTH: u16 = 100;
/// Narrower than this, tables can't hold their columns: they are laid out at this width.
const MIN_WIDTH: u16 = 40;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Style {
    /// Columns a line may take (None: lines are not wrapped).
    pub width: Option<u16>,
    /// Box-drawing borders (a terminal); else columns separated by spaces only.
    pub boxes: bool,
}

impl Style {
    /// What a pipe or a file gets: no box lines; wrapped only to a width `COLUMNS` gave.
    pub fn plain(width: Option<u16>) -> Self {
        Self { width: width.map(|w| w.max(MIN_WIDTH)), boxes: false }
    }

    /// What a terminal gets.
    pub fn terminal(width: u16) -> Self {
        Self { width: Some(width.max(MIN_WIDTH)), boxes: true }
    }

    /// From stdout and the environment: `COLUMNS` (when set to a number) wins over the
    /// terminal's own width, as in coreutils.
    fn detect() -> Self {
        let out = std::io::stdout();
        let env = |k: &str| std::env::var_os(k).map(|v| v.to_string_lossy().into_owned());
        let columns = env("COLUMNS").and_then(|c| c.trim().parse::<u16>().ok()).filter(|&c| c > 0);
        if !out.is_terminal() {
            return Self::plain(columns);
        }
        let tty = rustix::termios::tcgetwinsize(&out).ok().map(|w| w.ws_col).filter(|&c| c > 0);
        Self::terminal(columns.or(tty).unwrap_or(DEFAULT_WIDTH))
    }
}

/// The width `--help` is wrapped to: `COLUMNS`, else the terminal's, else 80 (a pipe or a file:
/// what a reader's terminal and a man page hold).
pub fn help_width() -> usize {
    usize::from(Style::detect().width.unwrap_or(HELP_WIDTH))
}

/// Help text outside a terminal (and without `COLUMNS`) is wrapped to this width.
pub const HELP_WIDTH: u16 = 80;

thread_local! {
    static OVERRIDE: Cell<Option<Style>> = const { Cell::new(None) };
}

/// The style for stdout (detected once), or the one [`with_style`] set on this thread.
pub fn current() -> Style {
    static DETECTED: OnceLock<Style> = OnceLock::new();
    OVERRIDE.with(Cell::get).unwrap_or_else(|| *DETECTED.get_or_init(Style::detect))
}

/// Runs `f` with `style` in place of stdout's (tests: output that does not depend on where
/// the test's own stdout goes).
pub fn with_style<R>(style: Style, f: impl FnOnce() -> R) -> R {
    let before = OVERRIDE.with(|o| o.replace(Some(style)));
    let r = f();
    OVERRIDE.with(|o| o.set(before));
    r
}

/// A table laid out for [`current`]: as wide as the line, wrapped within its cells (or, with
/// no width, each row on one line).
pub fn table() -> Table {
    let s = current();
    let mut t = Table::new();
    t.load_preset(if s.boxes { presets::UTF8_FULL_CONDENSED } else { presets::NOTHING });
    match s.width {
        Some(w) => t.set_content_arrangement(ContentArrangement::Dynamic).set_width(w),
        None => t.set_content_arrangement(ContentArrangement::Disabled),
    };
    // comfy-table would look at stdout itself (and colour cells); the style decided already.
    t.force_no_tty();
    t
}

/// Joins two words so [`wrap`] and tables ([`render`]) keep them on one line ("3 kprobe");
/// written as a space.
pub const GLUE: char = '\u{a0}';

/// A table's text: trailing spaces trimmed, glued words ([`glue`]) written with spaces.
pub fn render(t: &Table) -> String {
    t.trim_fmt().replace(GLUE, " ")
}

/// `s` with its spaces as [`GLUE`]: a cell's value ("2.0 MiB") that is not split over lines.
pub fn glue(s: &str) -> String {
    s.replace(' ', &GLUE.to_string())
}

/// `text` wrapped to the current width (if any) at spaces; lines after the first start with
/// `indent`. Words joined by [`GLUE`] stay together; a word longer than a whole line (a deep
/// path) is cut where the line ends, as a table cuts it.
pub fn wrap(text: &str, indent: &str) -> String {
    wrap_to(text, indent, current().width.map_or(usize::MAX, usize::from))
}

fn wrap_to(text: &str, indent: &str, width: usize) -> String {
    // Leading spaces are kept (an indented line stays indented).
    let body = text.trim_start_matches(' ');
    let mut out = text[..text.len() - body.len()].to_string();
    let mut line_len = out.len();
    let mut fresh = true;
    let room = width.saturating_sub(indent.chars().count()).max(1);
    let words = body.split(' ').filter(|w| !w.is_empty()).flat_map(|w| {
        let chars: Vec<char> = w.chars().collect();
        chars.chunks(room).map(|c| c.iter().collect::<String>()).collect::<Vec<_>>()
    });
    for word in words {
        let n = word.chars().count();
        if !fresh && line_len + 1 + n > width {
            out.push('\n');
            out.push_str(indent);
            line_len = indent.chars().count();
        } else if !fresh {
            out.push(' ');
            line_len += 1;
        }
        out.push_str(&word);
        line_len += n;
        fresh = false;
    }
    out.replace(GLUE, " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrap_keeps_every_line_within_the_width_and_every_word() {
        let text = "fentry unavailable on this kernel: capability_fentry: the BPF_PROG_LOAD syscall \
                    returned Operation not permitted (os error 1)";
        let w = wrap_to(text, "    ", 30);
        assert!(w.lines().all(|l| l.chars().count() <= 30), "{w}");
        assert!(w.lines().skip(1).all(|l| l.starts_with("    ") && !l.starts_with("     ")), "{w}");
        assert_eq!(w.split_whitespace().collect::<Vec<_>>(), text.split_whitespace().collect::<Vec<_>>());
        assert_eq!(wrap_to("short", "  ", 30), "short");
        assert_eq!(wrap_to("  ! a b", "    ", 5), "  ! a\n    b");
        assert_eq!(wrap_to(&format!("a 3{GLUE}kprobe"), "", 8), "a\n3 kprobe");
        let deep = format!("sysfs /{}/sys, procfs", "d".repeat(70));
        let w = wrap_to(&deep, "    ", 40);
        assert!(w.lines().all(|l| l.chars().count() <= 40), "{w}");
        assert_eq!(w.replace("\n    ", "").replace(' ', ""), deep.replace(' ', ""), "nothing lost: {w}");
    }

    #[test]
    fn glued_values_stay_whole_in_a_narrow_cell_and_read_with_spaces() {
        let text = with_style(Style::terminal(40), || {
            let mut t = table();
            t.set_header(["A", "B"]);
            let sizes = ["1.0 MiB", "2.5 GiB", "4.0 KiB", "8.0 MiB", "16.0 KiB"].map(glue).join(", ");
            t.add_row(["x".repeat(20), sizes]);
            render(&t)
        });
        assert!(!text.contains(GLUE), "{text}");
        for size in ["1.0 MiB", "2.5 GiB", "4.0 KiB", "8.0 MiB", "16.0 KiB"] {
            assert!(text.contains(size), "{size} whole:\n{text}");
        }
        assert!(text.lines().all(|l| l.chars().count() <= 40), "{text}");
    }

    #[test]
    fn tables_have_box_lines_only_on_a_terminal_and_never_colour() {
        let render = |style| {
            with_style(style, || {
                let mut t = table();
                t.set_header(["A", "B"]);
                t.add_row(vec![
                    comfy_table::Cell::new("x".repeat(70)),
                    comfy_table::Cell::new("red").fg(comfy_table::Color::Red),
                ]);
                t.to_string()
            })
        };
        let plain = render(Style::plain(Some(60)));
        assert!(plain.lines().all(|l| l.chars().count() <= 60), "{plain}");
        assert!(!plain.contains('\u{1b}') && !plain.chars().any(|c| ('\u{2500}'..='\u{257f}').contains(&c)));
        let unwrapped = render(Style::plain(None));
        assert_eq!(unwrapped.lines().count(), 2, "a row a line without a width:\n{unwrapped}");
        assert!(unwrapped.contains(&"x".repeat(70)), "{unwrapped}");
        let boxed = render(Style::terminal(60));
        assert!(boxed.lines().all(|l| l.chars().count() <= 60), "{boxed}");
        assert!(boxed.contains('│') && !boxed.contains('\u{1b}'), "{boxed}");
    }
}
