//! Each subcommand's EXAMPLES, as `--help` ends and as its man page's EXAMPLES section
//! (`generate`). Every one starts with [`HEADING`]; a line of two leading spaces is a
//! command, a deeper one says what it does.

/// How every subcommand's examples begin (`generate` turns it into `.SH EXAMPLES`).
pub const HEADING: &str = "Examples:";

pub const ROOT: &str = "\
Examples:
  sudo gdr-trace watch
      every RDMA registration and file I/O on this machine, live
  sudo gdr-trace attach 4242 --duration 30
      one training process (and its children), 30 seconds
  sudo gdr-trace attach 4242 --json | jq .
      NDJSON for machines (docs/schema/)
  sudo gdr-trace probes
      which hooks attach here, how, or why not
  gdr-trace check
      preflight: peermem, PCIe distance, ACS, IOMMU, BAR1, GDS
  sudo gdr-trace audit --duration 60 --fail-on high
      security audit with findings; exit 1 if any is high
  sudo gdr-trace record -o trace.ndjson
      record the event stream; `gdr-trace report trace.ndjson` replays it
  sudo gdr-trace serve --listen 127.0.0.1:9477
      Prometheus metrics for this node (see the README before listening on other addresses)

Exit codes: 0 ok; 1 a problem was found (check/doctor; audit/report with --fail-on); \
2 could not run or cannot tell (bad input, unknown PID, missing privilege, a corrupt recording, \
a question this host's hooks cannot answer). GDR_TRACE_LOG=debug shows internals.";

pub const WATCH: &str = "\
Examples:
  sudo gdr-trace watch
      every process's registrations, live; the summary every 5 s and at Ctrl-C
  sudo gdr-trace watch --duration 30 --interval 0
      30 seconds, one summary at the end
  sudo gdr-trace watch --files --duration 10
      also the per-file storage table of every process
  sudo gdr-trace watch --compact --duration 10
      one line per process, as nvidia-smi shows GPUs
  sudo gdr-trace watch --json | jq 'select(.event == \"mr_register\")'
      NDJSON for machines (docs/schema/)";

pub const ATTACH: &str = "\
Examples:
  sudo gdr-trace attach 4242
      one training rank, its threads and children, until it exits or Ctrl-C
  sudo gdr-trace attach 4242 --duration 60 --no-storage
      registrations only, for a minute
  sudo gdr-trace attach 4242 --json > rank0.ndjson
      the same as NDJSON";

pub const PROBES: &str = "\
Examples:
  sudo gdr-trace probes
      how many hooks attach here, grouped by family, and why the others don't
  sudo gdr-trace probes -v
      one row per hook with its own short reason
  sudo gdr-trace probes --wide
      every column and every reason in full, not wrapped
  sudo gdr-trace probes -p 4242 --json
      the libraries process 4242 maps, as JSON";

pub const CHECK: &str = "\
Examples:
  gdr-trace check
      GPUDirect prerequisites of this node; exit 1 when one fails
  gdr-trace check -v --nccl-gdr-level PHB
      every detail, judging GPU-NIC distance as NCCL_NET_GDR_LEVEL=PHB would
  gdr-trace check --sysfs-root node7/sys --proc-root node7/proc --json
      a captured node's tree, as JSON";

pub const DOCTOR: &str = "\
Examples:
  gdr-trace doctor
      the troubleshooting order on this node, ranked
  gdr-trace doctor --nccl-log nccl.log
      also what NCCL's NCCL_DEBUG=INFO log says it did
  sudo gdr-trace doctor --nccl-log nccl.log -p 4242 --duration 20
      and what process 4242 really registers, for 20 seconds";

pub const AUDIT: &str = "\
Examples:
  sudo gdr-trace audit --duration 60
      who exposes GPU memory to NICs, with what access, for a minute
  sudo gdr-trace audit --duration 60 --fail-on high
      for CI: exit 1 when a finding is high or critical
  sudo gdr-trace audit --duration 60 --log audit.ndjson
      also every finding as NDJSON in audit.ndjson";

pub const RECORD: &str = "\
Examples:
  sudo gdr-trace record -o node7.ndjson --duration 60
      every process for a minute, to a file (mode 0600) for `gdr-trace report`
  sudo gdr-trace record -o rank0.ndjson -p 4242
      one process and its children, until it exits or Ctrl-C";

pub const REPORT: &str = "\
Examples:
  gdr-trace report node7.ndjson
      the summary and findings of a recording (no privilege needed)
  gdr-trace report node7.ndjson --events
      also every registration and release
  gdr-trace report node7.ndjson --files
      every process's per-file storage table (--compact: a line per process)
  gdr-trace report node7.ndjson --json --fail-on medium
      NDJSON; exit 1 when a finding is medium or worse";

pub const SERVE: &str = "\
Examples:
  sudo gdr-trace serve
      Prometheus metrics on 127.0.0.1:9477 (/metrics, /healthz)
  sudo gdr-trace serve --listen 127.0.0.1:0 --interval 15
      any free port (printed on stderr), metrics refreshed every 15 s
  sudo gdr-trace serve --listen 0.0.0.0:9477 --web-config /etc/gdr-trace/web.yml
      TLS and basic auth (the exporter toolkit's web config); /healthz needs no password
  curl -s localhost:9477/healthz
      ok, warn: (a kernel hook that decides verdicts is missing) or an error";
