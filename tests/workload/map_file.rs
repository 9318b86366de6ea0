//! gdr-map-file: maps the first page of PATH executable (as the dynamic loader maps a library's
//! code), prints `mapped`, and holds it until a line arrives on stdin.
//!
//! Usage: gdr-map-file PATH

use std::io::BufRead;

#[path = "storage_io.rs"]
mod io;

fn main() {
    let Some(path) = std::env::args().nth(1) else { io::fail("usage: gdr-map-file PATH") };
    io::map_exec_page(&path);
    println!("mapped");
    let mut line = String::new();
    let _ = std::io::stdin().lock().read_line(&mut line);
}
