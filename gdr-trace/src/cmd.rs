//! One module per subcommand (dispatched from `cli::run`). Each wires a source to sinks;
//! shared logic lives elsewhere.

pub mod args;
pub mod audit;
pub mod check;
pub mod doctor;
pub mod examples;
pub mod generate;
pub mod probes;
pub mod record;
pub mod report;
pub mod serve;
pub mod watch;
