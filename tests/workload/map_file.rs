//! gdr-map-file: maps the first page of each PATH executable (as the dynamic loader maps a
//! library's code), prints `mapped`, and holds them until a line arrives on stdin.
//!
//! Usage: gdr-map-file PATH...

use std::io::BufRead;

#[path = "storage_io.rs"]
mod io;

fn main() {
    let paths: Vec<String> = std::env::args().skip(1).collect();
    if paths.is_empty() {
        io::fail("usage: gdr-map-file PATH...");
    }
    for path in &paths {
        io::map_exec_page(path);
    }
    println!("mapped");
    let mut line = String::new();
    let _ = std::io::stdin().lock().read_line(&mut line);
}
