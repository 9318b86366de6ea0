//! One module per subcommand (dispatched from `cli::run`). Each wires a source to sinks; what
//! several share (options, the live sink, host facts) is `crate::options`, the help examples
//! `crate::examples`: no command imports another (`module_graph` checks it).

pub mod audit;
pub mod check;
pub mod doctor;
pub mod generate;
pub mod probes;
pub mod record;
pub mod report;
pub mod serve;
pub mod watch;
