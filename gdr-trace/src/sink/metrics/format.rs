//! The exposition format a scraper gets: OpenMetrics text when its Accept header asks for it
//! (Prometheus does), else the Prometheus text format 0.0.4 that every scraper reads.
//!
//! `prometheus-client` encodes OpenMetrics only; the 0.0.4 text is derived from it the way
//! Prometheus' own client_python does (`generate_latest`): a counter family `x` becomes
//! `x_total` (its samples already are), an info family `x` the gauge `x_info`, `unknown` is
//! `untyped`, and the OpenMetrics-only lines (`# UNIT`, `# EOF`) go. Samples are unchanged.

use std::collections::HashMap;

/// The same exposition with each family's samples sorted: `prometheus-client` keeps a family's
/// series in a hash map, so they came in a different order every scrape (a diff of two
/// scrapes, or a test, saw noise). Families stay where they were.
pub fn sorted_samples(body: &str) -> String {
    let mut out = String::with_capacity(body.len());
    let mut samples: Vec<&str> = Vec::new();
    let flush = |samples: &mut Vec<&str>, out: &mut String| {
        samples.sort_unstable();
        for l in samples.drain(..) {
            out.push_str(l);
            out.push('\n');
        }
    };
    for line in body.lines() {
        if line.starts_with('#') {
            flush(&mut samples, &mut out);
            out.push_str(line);
            out.push('\n');
        } else {
            samples.push(line);
        }
    }
    flush(&mut samples, &mut out);
    out
}

/// What `/metrics` answers in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Prometheus text format 0.0.4.
    Text,
    /// OpenMetrics 1.0.0 text.
    OpenMetrics,
}

impl Format {
    /// The format an `Accept` header asks for: the acceptable media range with the highest q
    /// (the first of equals); 0.0.4 text when there is no header or nothing in it we serve.
    pub fn negotiate(accept: Option<&str>) -> Self {
        let mut best: Option<(Self, f32)> = None;
        for range in accept.unwrap_or("").split(',') {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or("").to_ascii_lowercase();
            let (mut q, mut version) = (1.0_f32, None);
            for param in parts {
                let Some((k, v)) = param.split_once('=') else { continue };
                match k.trim().to_ascii_lowercase().as_str() {
                    "q" => q = v.trim().parse().unwrap_or(0.0),
                    "version" => version = Some(v.trim().trim_matches('"').to_string()),
                    _ => {}
                }
            }
            let format = match (media.as_str(), version.as_deref()) {
                ("application/openmetrics-text", None | Some("1.0.0" | "0.0.1")) => Self::OpenMetrics,
                ("text/plain", None | Some("0.0.4")) | ("text/*" | "*/*", _) => Self::Text,
                _ => continue,
            };
            if q > 0.0 && best.is_none_or(|(_, b)| q > b) {
                best = Some((format, q));
            }
        }
        best.map_or(Self::Text, |(f, _)| f)
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Self::Text => "text/plain; version=0.0.4; charset=utf-8",
            Self::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }

    /// The body in this format, from the OpenMetrics text `MetricsSink::render` made.
    pub fn body(self, openmetrics: &str) -> String {
        match self {
            Self::Text => text_004(openmetrics),
            Self::OpenMetrics => openmetrics.to_string(),
        }
    }
}

/// OpenMetrics text as Prometheus text 0.0.4 (see the module comment).
pub fn text_004(openmetrics: &str) -> String {
    let types: HashMap<&str, &str> =
        openmetrics.lines().filter_map(|l| l.strip_prefix("# TYPE ")?.split_once(' ')).collect();
    let renamed = |name: &str| -> (String, &'static str) {
        match types.get(name).copied().unwrap_or("unknown") {
            "counter" => (format!("{name}_total"), "counter"),
            "info" => (format!("{name}_info"), "gauge"),
            "stateset" | "gauge" => (name.to_string(), "gauge"),
            "gaugehistogram" | "histogram" => (name.to_string(), "histogram"),
            "summary" => (name.to_string(), "summary"),
            _ => (name.to_string(), "untyped"),
        }
    };
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            out.push_str(&format!("# HELP {} {help}\n", renamed(name).0));
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let name = rest.split_once(' ').map_or(rest, |(n, _)| n);
            let (name, kind) = renamed(name);
            out.push_str(&format!("# TYPE {name} {kind}\n"));
        } else if line.starts_with('#') {
            // `# UNIT`, `# EOF`: OpenMetrics only.
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROMETHEUS_2_42: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
         version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

    #[test]
    fn accept_header_picks_the_format() {
        use Format::{OpenMetrics, Text};
        for (accept, want) in [
            (None, Text),
            (Some(""), Text),
            (Some("*/*"), Text),
            (Some("text/plain"), Text),
            (Some("text/plain;version=0.0.4;q=0.5,*/*;q=0.1"), Text),
            (Some(PROMETHEUS_2_42), OpenMetrics),
            (Some("application/openmetrics-text"), OpenMetrics),
            (Some("Application/OpenMetrics-Text; version=\"0.0.1\""), OpenMetrics),
            (Some("text/plain;q=0.9, application/openmetrics-text;q=0.3"), Text),
            (Some("text/plain;q=0.3, application/openmetrics-text;q=0.9"), OpenMetrics),
            (Some("application/openmetrics-text;q=0"), Text),
            (Some("application/openmetrics-text;version=2.0.0"), Text),
            (Some("application/json"), Text),
            (Some("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily"), Text),
        ] {
            assert_eq!(Format::negotiate(accept), want, "{accept:?}");
        }
        assert!(OpenMetrics.content_type().starts_with("application/openmetrics-text; version=1.0.0"));
        assert!(Text.content_type().starts_with("text/plain; version=0.0.4"));
    }

    #[test]
    fn text_004_renames_families_and_keeps_every_sample() {
        let om = "# HELP gdr_trace_registered_bytes Bytes registered (successful registrations).\n\
                  # TYPE gdr_trace_registered_bytes counter\n\
                  # UNIT gdr_trace_registered_bytes bytes\n\
                  gdr_trace_registered_bytes_total{comm=\"a\\\"b\",verdict=\"host\"} 4096\n\
                  # HELP gdr_trace_other_processes Processes whose series are summed under comm=\"other\"\n\
                  # TYPE gdr_trace_other_processes gauge\n\
                  gdr_trace_other_processes 0\n\
                  # HELP gdr_trace_build gdr-trace version and the kernel it traces.\n\
                  # TYPE gdr_trace_build info\n\
                  gdr_trace_build_info{version=\"0.1.0\",kernel=\"6.1.0\"} 1\n\
                  # EOF\n";
        let text = text_004(om);
        assert_eq!(
            text,
            "# HELP gdr_trace_registered_bytes_total Bytes registered (successful registrations).\n\
             # TYPE gdr_trace_registered_bytes_total counter\n\
             gdr_trace_registered_bytes_total{comm=\"a\\\"b\",verdict=\"host\"} 4096\n\
             # HELP gdr_trace_other_processes Processes whose series are summed under comm=\"other\"\n\
             # TYPE gdr_trace_other_processes gauge\n\
             gdr_trace_other_processes 0\n\
             # HELP gdr_trace_build_info gdr-trace version and the kernel it traces.\n\
             # TYPE gdr_trace_build_info gauge\n\
             gdr_trace_build_info{version=\"0.1.0\",kernel=\"6.1.0\"} 1\n"
        );
        let samples =
            |s: &str| s.lines().filter(|l| !l.starts_with('#')).map(String::from).collect::<Vec<_>>();
        assert_eq!(samples(om), samples(&text));
        assert_eq!(Format::OpenMetrics.body(om), om);
    }
}
