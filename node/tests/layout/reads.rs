//! Client reads go through the viewer (issue 45 item 3): in `node/src/http`, the reads of
//! the applied state that a tenant scope must filter — a job, its history, a page of
//! jobs, the event feed, the recent rejections — are made by `viewer.rs` alone, which
//! holds the caller's scope. `client_auth.rs`, the scope check itself, may read a stored
//! job to judge a command. A handler that reads one past the viewer fails here, with its
//! line; so does any other read of the machine in `node/src/http` that is not listed as
//! showing no tenant's jobs (`UNSCOPED_READS`), so a new read fails closed. Imports
//! `files`.

use crate::files::{rust_files, workspace_dir};

/// The machine's and the store's reads that must see the caller's scope.
const SCOPED_READS: [&str; 7] = [
    "machine.job(",
    "machine.history(",
    "machine.list(",
    "machine.events(",
    "machine.events_shared(",
    "rejections.view(",
    "list_in_scope(",
];

/// The files of `node/src/http` that may make them.
const READERS: [&str; 2] = ["viewer.rs", "client_auth.rs"];

/// The machine's reads a handler may make itself: none names a job, a history or an
/// event (counts, versions, the snapshot a backup streams to the admin, whether a
/// queue has a claimable job — that one takes the scope). Any other `machine.<read>(`
/// outside the readers fails [`every_other_machine_read_is_listed`]: a new read goes
/// through the viewer, or is added here on purpose.
const UNSCOPED_READS: [&str; 7] = [
    "snapshot_source",
    "stats",
    "has_claimable_for",
    "idempotency_full",
    "cluster_version",
    "last_event_seq",
    "queue_stats",
];

#[test]
fn client_reads_go_through_the_viewer() {
    let http = workspace_dir().join("node/src/http");
    let mut past_the_viewer = Vec::new();
    let mut seen = Vec::new();
    for file in rust_files(&http) {
        let text = joined_chains(&std::fs::read_to_string(&file).expect("read a source"));
        let name = file.file_name().expect("a file").to_string_lossy();
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for read in SCOPED_READS.iter().filter(|r| line.contains(**r)) {
                seen.push(*read);
                if !READERS.contains(&name.as_ref()) {
                    let shown = file
                        .strip_prefix(workspace_dir())
                        .expect("in the workspace");
                    past_the_viewer.push(format!("{}:{}: {}", shown.display(), n + 1, line.trim()));
                }
            }
        }
    }
    // A scan that finds nothing would pass: the viewer makes each read but the list's
    // machine read (inside `list_in_scope`, in `security::scope`) itself.
    for read in SCOPED_READS.iter().filter(|r| **r != "machine.list(") {
        assert!(seen.contains(read), "{read} not seen in node/src/http");
    }
    assert!(
        past_the_viewer.is_empty(),
        "reads of the applied state that a tenant scope must filter, made past the viewer \
         (node/src/http/viewer.rs): read through viewer::read instead\n{}",
        past_the_viewer.join("\n")
    );
}

/// Fail closed: a read of the machine that is neither made by a reader nor listed as
/// unscoped is a new read that no one decided about (a new read route's handler reading
/// the state past the viewer fails here, whatever the read is called).
#[test]
fn every_other_machine_read_is_listed() {
    let http = workspace_dir().join("node/src/http");
    let mut unlisted = Vec::new();
    for file in rust_files(&http) {
        let name = file
            .file_name()
            .expect("a file")
            .to_string_lossy()
            .into_owned();
        if READERS.contains(&name.as_str()) {
            continue;
        }
        let text = joined_chains(&std::fs::read_to_string(&file).expect("read a source"));
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for read in machine_reads(line) {
                if !UNSCOPED_READS.contains(&read) {
                    unlisted.push(format!("http/{name}:{}: machine.{read}(", n + 1));
                }
            }
        }
    }
    assert!(
        unlisted.is_empty(),
        "reads of the machine past the viewer that UNSCOPED_READS does not list: read \
         through node/src/http/viewer.rs, or list it if it shows no tenant's jobs\n{}",
        unlisted.join("\n")
    );
}

/// The method names of every `machine.<name>(` on a line.
fn machine_reads(line: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("machine.") {
        let tail = &rest[at + "machine.".len()..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        if tail[end..].starts_with('(') && end > 0 {
            out.push(&tail[..end]);
        }
        rest = &tail[end..];
    }
    out
}

/// `text` with each method-chain line (`    .events_shared(…)`) joined to the line its
/// chain starts on, as rustfmt may split `state.machine.events_shared(…)`; the joined
/// lines are left empty, so line numbers stay.
fn joined_chains(text: &str) -> String {
    let mut lines: Vec<String> = Vec::new();
    let mut start = None;
    for line in text.lines() {
        match (line.trim_start().strip_prefix('.'), start) {
            (Some(rest), Some(at)) => {
                let head: &mut String = &mut lines[at];
                head.push('.');
                head.push_str(rest);
                lines.push(String::new());
            }
            _ => {
                start = Some(lines.len());
                lines.push(line.to_owned());
            }
        }
    }
    lines.join("\n")
}
