//! Host tests for the security hardening: a traced process, a recording or a network
//! client that tries to steer the privileged tracer. Run as root, one at a time.

#[path = "security/caps.rs"]
mod caps;
#[path = "security/cli.rs"]
mod cli;
#[path = "security/copy_bomb.rs"]
mod copy_bomb;
#[path = "security/cufile_stash.rs"]
mod cufile_stash;
#[path = "security/deploy.rs"]
mod deploy;
#[path = "security/files.rs"]
mod files;
#[path = "security/follower.rs"]
mod follower;
#[path = "security/http.rs"]
mod http;
#[path = "security/library.rs"]
mod library;
#[path = "security/readers.rs"]
mod readers;
#[path = "security/stash.rs"]
mod stash;
#[path = "security/text.rs"]
mod text;
#[path = "security/tracked.rs"]
mod tracked;
