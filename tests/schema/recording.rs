//! Recordings (`record -o FILE`, `gdr-trace.recording/2`) follow the JSON Schemas in
//! docs/schema/recording/, one per line type (each variant of `gdr_trace::recording::Item`).
//! Validated on real recordings: one the real sink writes in-process (every line type), a busy
//! node's (counters and storage reports split into parts) and a live `record` of this machine.
//! Beyond what the schemas check, every field a line carries must be one its schema describes
//! (where the schema lists an object's fields): a field added to a line and not to its schema
//! fails here.

use std::collections::{BTreeMap, BTreeSet};

use gdr_trace::recording::Item;
use gdr_trace_tests::gdr_trace;
use serde_json::Value;

use super::{schemas_in, validate};

/// The line types a recording can hold, as `tag` names them.
const TAGS: [&str; 12] = [
    "header",
    "process",
    "record",
    "tick",
    "flush",
    "note",
    "storage",
    "cuda",
    "exit",
    "counters",
    "storage_summary",
    "end",
];

/// The tag of each line type: a variant added to `Item` does not compile here until it is named
/// (then it needs a schema, a row in docs/fleet.md and a place in `TAGS`).
fn tag(item: &Item) -> &'static str {
    match item {
        Item::Header(_) => "header",
        Item::Process(_) => "process",
        Item::Record(_) => "record",
        Item::Tick { .. } => "tick",
        Item::Flush => "flush",
        Item::Note { .. } => "note",
        Item::Storage { .. } => "storage",
        Item::Cuda { .. } => "cuda",
        Item::Exit { .. } => "exit",
        Item::Counters { .. } => "counters",
        Item::StorageSummary { .. } => "storage_summary",
        Item::End(_) => "end",
    }
}

type Schemas = BTreeMap<String, jsonschema::Validator>;

/// The schemas of docs/schema/recording/, and their JSON (to walk what each describes).
fn schemas() -> (Schemas, BTreeMap<String, Value>) {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/schema/recording");
    let json = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let path = e.unwrap().path();
            let event = path.file_name()?.to_str()?.strip_suffix(".schema.json")?.to_string();
            let schema: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            assert_eq!(
                schema["$id"],
                format!("urn:gdr-trace:schema:recording:1:{event}"),
                "{}",
                path.display()
            );
            Some((event, schema))
        })
        .collect();
    (schemas_in("recording"), json)
}

/// The fields of `value` its schema `node` does not describe (paths), following `$ref`s to
/// `$defs`, objects' `properties` (or `additionalProperties` as a schema), `items` and
/// `prefixItems`. An object schema that lists no fields describes none of them: not walked.
fn undescribed(root: &Value, node: &Value, value: &Value, path: &str, out: &mut Vec<String>) {
    let node = match node["$ref"].as_str().and_then(|r| r.strip_prefix("#/$defs/")) {
        Some(def) => &root["$defs"][def],
        None => node,
    };
    match value {
        Value::Object(fields) => {
            let (props, extra) = (&node["properties"], &node["additionalProperties"]);
            for (k, v) in fields {
                let here = format!("{path}/{k}");
                match (props.get(k), extra) {
                    (Some(sub), _) => undescribed(root, sub, v, &here, out),
                    (None, Value::Object(_)) => undescribed(root, extra, v, &here, out),
                    (None, Value::Null) if props.is_object() => out.push(here),
                    _ => {}
                }
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                let sub = node["prefixItems"].get(i).unwrap_or(&node["items"]);
                undescribed(root, sub, v, &format!("{path}/{i}"), out);
            }
        }
        _ => {}
    }
}

/// Validates every line of a recording against its schema, checks each field is described and
/// each line reads back as the `Item` of its tag; returns the line types seen and the flags
/// (`more`, `continued`) of the parts.
fn check(schemas: &(Schemas, BTreeMap<String, Value>), ndjson: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let seen = validate(&schemas.0, ndjson);
    let mut flags = BTreeSet::new();
    for line in ndjson.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        let event = v["event"].as_str().unwrap();
        let mut out = Vec::new();
        let schema = &schemas.1[event];
        undescribed(schema, schema, &v, "", &mut out);
        assert!(out.is_empty(), "{event}: fields its schema does not describe: {out:?}\n{line}");
        let item: Item = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert_eq!(tag(&item), event, "{line}");
        flags.extend(
            ["more", "continued"].into_iter().filter(|f| v[f] == true).map(|f| format!("{event}.{f}")),
        );
    }
    (seen, flags)
}

/// `record -o FILE --duration 1` on this machine (root: BPF), with file I/O of its own for as
/// long as the tracer runs, its start-up included (the machine may be idle otherwise, and
/// loading is slow while other tests load tracers too).
fn live_recording() -> String {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let (file, io) = (dir.join("schema-recording.ndjson"), dir.join("schema-recording-io.bin"));
    // `record` never overwrites: a file left by an earlier run of this test goes first.
    let _ = std::fs::remove_file(&file);
    let script = format!("while :; do echo x > '{0}'; cat '{0}' > /dev/null; sleep 0.05; done", io.display());
    let mut writer = std::process::Command::new("sh").args(["-c", &script]).spawn().unwrap();
    let rec = std::process::Command::new(gdr_trace())
        .arg("record")
        .arg("-o")
        .arg(&file)
        .args(["--duration", "1"])
        .output()
        .unwrap();
    writer.kill().unwrap();
    writer.wait().unwrap();
    assert!(rec.status.success(), "{}", String::from_utf8_lossy(&rec.stderr));
    std::fs::read_to_string(&file).unwrap()
}

#[test]
fn every_recording_line_follows_its_schema() {
    let schemas = schemas();
    let files: BTreeSet<String> = schemas.0.keys().cloned().collect();
    let tags: BTreeSet<String> = TAGS.iter().map(|t| t.to_string()).collect();
    assert_eq!(files, tags, "one schema per line type, no other");

    let text = super::recorded::recording();
    let (written, mut flags) = check(&schemas, &text);
    for want in TAGS {
        assert!(written.contains(want), "the in-process recording has {want}: {written:?}");
    }
    for kind in ["Opened", "Closed", "Gds", "Nvfs", "Worker"] {
        assert!(text.contains(&format!("\"ev\":{{\"{kind}\"")), "a storage event {kind}: {text}");
    }
    // A busy node's: counters and a storage report too long for a line, written as parts.
    let mut busy = Vec::new();
    gdr_trace::recording::busy::busy_node(1, 1500, &mut busy);
    let (busy_seen, busy_flags) = check(&schemas, &String::from_utf8(busy).unwrap());
    flags.extend(busy_flags);
    for want in ["counters.more", "storage_summary.more", "storage_summary.continued"] {
        assert!(flags.contains(want), "{want}: {flags:?}");
    }
    let (live, _) = check(&schemas, &live_recording());
    for want in ["header", "storage", "counters", "storage_summary", "flush", "end"] {
        assert!(live.contains(want), "the live recording has {want}: {live:?}");
    }
    let all: BTreeSet<String> = written.iter().chain(&busy_seen).chain(&live).cloned().collect();
    assert_eq!(all, files, "every schema is exercised by a real recording");
    eprintln!("in-process: {written:?}\nbusy node: {busy_seen:?}\nlive: {live:?}\nparts: {flags:?}");
}

/// The check can fail: a line without a field its schema requires, a line with a field its
/// schema does not describe (at the top and inside a storage event), a storage event of no
/// known kind.
#[test]
fn a_line_unlike_its_schema_fails() {
    let schemas = schemas();
    let text = super::recorded::recording();
    let line = |event: &str| -> Value {
        let needle = format!("\"event\":\"{event}\"");
        serde_json::from_str(text.lines().find(|l| l.contains(&needle)).unwrap()).unwrap()
    };
    let fails = |v: &Value| {
        let event = v["event"].as_str().unwrap();
        let mut out = Vec::new();
        undescribed(&schemas.1[event], &schemas.1[event], v, "", &mut out);
        !schemas.0[event].is_valid(v) || !out.is_empty()
    };
    for event in TAGS {
        assert!(!fails(&line(event)), "{event} as written passes");
    }
    let mut end = line("end");
    end.as_object_mut().unwrap().remove("records");
    assert!(fails(&end), "a missing field");
    let mut tick = line("tick");
    tick["now_ms"] = 1.into();
    assert!(fails(&tick), "a field the schema does not describe");
    let mut storage = line("storage");
    let opened = storage["ev"].as_object_mut().unwrap().values_mut().next().unwrap();
    opened["inode"] = 1.into();
    assert!(fails(&storage), "a storage event's field the schema does not describe");
    let mut storage = line("storage");
    storage["ev"] = serde_json::json!({ "Renamed": {} });
    assert!(fails(&storage), "an unknown storage event");
    let mut record = line("record");
    record["kind"] = "bogus".into();
    assert!(fails(&record), "an unknown record kind");
}
