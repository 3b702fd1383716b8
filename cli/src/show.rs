//! What the client commands print: each docs/api.md object as a table for people
//! (`--output table`, the default) or as the API's JSON object, one line
//! (`--output json`).
//!
//! A Job or a Lease is a list of `label: value` rows, made by a function ([`job_rows`],
//! [`lease_rows`]) that the printer only lays out. Version 1.1's fields are rows only
//! when set (a run time, a priority other than 0, a backoff other than the default, an
//! error, a cancellation, a checkpoint), so a job that uses none of them prints exactly
//! as it did in version 1. The JSON output is the object as the API answered it, every
//! field present.

use leasehold_client::{ClusterStatus, Job, JobPage, Membership, WireLease};
use leasehold_statemachine::limits::BACKOFF_MS_MAX_DEFAULT;
use serde::Serialize;
use serde_json::Value;

use crate::common::{CliError, EXIT_UNAVAILABLE};

/// One `label: value` line of a table.
pub type Row = (&'static str, String);

pub fn print_json<T: Serialize>(v: &T) -> Result<(), CliError> {
    let text = serde_json::to_string(v).map_err(|e| CliError {
        code: EXIT_UNAVAILABLE,
        message: format!("encoding the output: {e}"),
    })?;
    println!("{text}");
    Ok(())
}

fn opt<T: std::fmt::Display>(v: &Option<T>) -> String {
    v.as_ref().map_or_else(|| "-".to_owned(), |v| v.to_string())
}

/// Free text a job carries (`last_error`, `cancel_reason`) on one line, its control
/// characters escaped: whoever failed or cancelled the job wrote it, and a terminal
/// must not act on the escape sequences it may hold.
pub fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// `rows` with the values in one column: labels padded to the longest one plus `": "`
/// (16 columns for a version 1 Job, as before).
fn print_rows(rows: &[Row]) {
    let width = rows.iter().map(|(label, _)| label.len()).max().unwrap_or(0) + 2;
    for (label, value) in rows {
        println!("{:<width$}{value}", format!("{label}:"));
    }
}

/// A Job's rows: version 1's fields always, then version 1.1's that are set.
pub fn job_rows(job: &Job) -> Vec<Row> {
    let mut rows = vec![
        ("id", job.id.clone()),
        ("queue", job.queue.clone()),
        ("state", job.state.as_str().to_owned()),
        ("owner", opt(&job.owner)),
        ("generation", job.generation.to_string()),
        ("lease_until_ms", opt(&job.lease_until_ms)),
        ("attempts", job.attempts.to_string()),
        ("max_attempts", opt(&job.max_attempts)),
        ("payload", opt(&job.payload)),
        ("result", opt(&job.result)),
        ("created_ms", job.created_ms.to_string()),
        ("updated_ms", job.updated_ms.to_string()),
        ("log_index", job.log_index.to_string()),
    ];
    rows.extend(lifecycle_rows(job));
    rows
}

/// Version 1.1's fields of a Job (docs/api.md "Job lifecycle"), each only when set.
fn lifecycle_rows(job: &Job) -> Vec<Row> {
    let default_backoff = job.backoff_ms == 0 && job.backoff_ms_max == BACKOFF_MS_MAX_DEFAULT;
    let candidates: [(&'static str, Option<String>); 9] = [
        ("run_at_ms", job.run_at_ms.map(|t| t.to_string())),
        (
            "priority",
            (job.priority != 0).then(|| job.priority.to_string()),
        ),
        (
            "backoff_ms",
            (!default_backoff).then(|| job.backoff_ms.to_string()),
        ),
        (
            "backoff_ms_max",
            (!default_backoff).then(|| job.backoff_ms_max.to_string()),
        ),
        ("last_error", job.last_error.as_deref().map(printable)),
        (
            "cancel_requested",
            job.cancel_requested.then(|| "true".into()),
        ),
        ("cancel_reason", job.cancel_reason.as_deref().map(printable)),
        ("progress", job.progress.as_ref().map(Value::to_string)),
        ("progress_ms", job.progress_ms.map(|t| t.to_string())),
    ];
    candidates
        .into_iter()
        .filter_map(|(label, value)| Some((label, value?)))
        .collect()
}

/// JSON text the store kept (a Lease's payload, progress) on one line.
fn compact(text: &str) -> String {
    serde_json::from_str::<Value>(text).map_or_else(|_| printable(text), |v| v.to_string())
}

/// A Lease's rows: version 1's fields always, then version 1.1's that are set (a claim
/// carries the payload, attempts and checkpoint; a renew may say the job was cancelled).
pub fn lease_rows(l: &WireLease) -> Vec<Row> {
    let mut rows = vec![
        ("job_id", l.job_id.clone()),
        ("owner", l.owner.clone()),
        ("generation", l.generation.to_string()),
        ("lease_until_ms", l.lease_until_ms.to_string()),
        ("ttl_ms", l.ttl_ms.to_string()),
        ("cluster_time_ms", l.cluster_time_ms.to_string()),
        ("log_index", l.log_index.to_string()),
    ];
    let candidates: [(&'static str, Option<String>); 5] = [
        (
            "cancel_requested",
            l.cancel_requested.then(|| "true".into()),
        ),
        ("attempts", l.attempts.map(|n| n.to_string())),
        ("payload", l.payload.as_deref().map(compact)),
        ("progress", l.progress.as_deref().map(compact)),
        (
            "progress_generation",
            l.progress_generation.map(|g| g.to_string()),
        ),
    ];
    rows.extend(
        candidates
            .into_iter()
            .filter_map(|(label, value)| Some((label, value?))),
    );
    rows
}

fn print_page(page: &JobPage) {
    println!(
        "{:<32} {:<12} {:<10} {:<16} {:>10} {:>8}",
        "ID", "QUEUE", "STATE", "OWNER", "GENERATION", "ATTEMPTS"
    );
    for j in &page.jobs {
        println!(
            "{:<32} {:<12} {:<10} {:<16} {:>10} {:>8}",
            j.id,
            j.queue,
            j.state.as_str(),
            opt(&j.owner),
            j.generation,
            j.attempts
        );
    }
    if let Some(t) = &page.next_page_token {
        println!("(more: --page-token {t})");
    }
}

fn print_cluster(s: &ClusterStatus) {
    println!("node_id:         {}", s.node_id);
    println!("leader_id:       {}", opt(&s.leader_id));
    println!("term:            {}", s.term);
    println!("commit_index:    {}", s.commit_index);
    println!("applied_index:   {}", s.applied_index);
    println!("cluster_time_ms: {}", s.cluster_time_ms);
    if let Some(c) = &s.cluster_id {
        println!("cluster_id:      {c}");
    }
    let ids = |v: &[u64]| v.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
    println!("voters:          {}", ids(&s.voters));
    println!("learners:        {}", ids(&s.learners));
    for (id, addr) in &s.nodes {
        let role = if Some(id.as_str()) == s.leader_id.map(|l| l.to_string()).as_deref() {
            " (leader)"
        } else {
            ""
        };
        println!("  node {id}: {addr}{role}");
    }
}

pub fn show_cluster(s: &ClusterStatus, json: bool) -> Result<(), CliError> {
    if json {
        return print_json(s);
    }
    print_cluster(s);
    Ok(())
}

pub fn show_membership(m: &Membership, json: bool) -> Result<(), CliError> {
    if json {
        return print_json(m);
    }
    let ids = |v: &[u64]| v.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
    println!("voters:   {}", ids(&m.voters));
    println!("learners: {}", ids(&m.learners));
    for (id, addr) in &m.nodes {
        println!("  node {id}: {addr}");
    }
    Ok(())
}

pub fn show_page(page: &JobPage, json: bool) -> Result<(), CliError> {
    if json {
        return print_json(page);
    }
    print_page(page);
    Ok(())
}

pub fn show_job(job: &Job, json: bool) -> Result<(), CliError> {
    if json {
        return print_json(job);
    }
    print_rows(&job_rows(job));
    Ok(())
}

pub fn show_lease(l: &WireLease, json: bool) -> Result<(), CliError> {
    if json {
        return print_json(l);
    }
    print_rows(&lease_rows(l));
    Ok(())
}

/// `queue redrive`'s answer: `retried N jobs`, or the API's `{"retried":N}`.
pub fn show_redrive(retried: u64, json: bool) -> Result<(), CliError> {
    if json {
        return print_json(&leasehold_statemachine::wire::RedriveReply { retried });
    }
    let jobs = if retried == 1 { "job" } else { "jobs" };
    println!("retried {retried} {jobs}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_client::JobState;
    use serde_json::json;

    fn v1_job() -> Job {
        serde_json::from_value(json!({"id":"a","queue":"default","state":"pending",
            "owner":null,"generation":0,"lease_until_ms":null,"attempts":0,
            "max_attempts":null,"payload":{"n":1},"result":null,"created_ms":1,
            "updated_ms":1,"log_index":3}))
        .unwrap()
    }

    fn labels(rows: &[Row]) -> Vec<&'static str> {
        rows.iter().map(|(label, _)| *label).collect()
    }

    #[test]
    fn a_job_without_lifecycle_fields_has_version_1_rows_only() {
        let rows = job_rows(&v1_job());
        assert_eq!(rows.len(), 13, "{rows:?}");
        assert_eq!(labels(&rows).last(), Some(&"log_index"));
        assert_eq!(rows[8], ("payload", r#"{"n":1}"#.to_owned()));
        // The column: "lease_until_ms: " is 16 wide, as version 1 printed it.
        let width = rows.iter().map(|(l, _)| l.len()).max().unwrap() + 2;
        assert_eq!(width, 16);
    }

    #[test]
    fn set_lifecycle_fields_are_rows_in_api_order() {
        let mut job = v1_job();
        job.state = JobState::Failed;
        job.run_at_ms = Some(99);
        job.priority = -5;
        job.backoff_ms = 1_000;
        job.last_error = Some("boom\n\x1b[31mred".into());
        job.cancel_requested = true;
        job.cancel_reason = Some("stop".into());
        job.progress = Some(json!({"step": 2}));
        job.progress_ms = Some(7);
        let rows = job_rows(&job);
        let tail = &rows[13..];
        assert_eq!(
            labels(tail),
            [
                "run_at_ms",
                "priority",
                "backoff_ms",
                "backoff_ms_max",
                "last_error",
                "cancel_requested",
                "cancel_reason",
                "progress",
                "progress_ms"
            ]
        );
        assert_eq!(tail[1].1, "-5");
        assert_eq!(tail[3].1, BACKOFF_MS_MAX_DEFAULT.to_string());
        assert_eq!(tail[4].1, r"boom\n\u{1b}[31mred", "escaped, one line");
        assert_eq!(tail[7].1, r#"{"step":2}"#);
    }

    #[test]
    fn a_backoff_cap_alone_is_shown_with_its_backoff() {
        let mut job = v1_job();
        job.backoff_ms_max = 60_000;
        let rows = job_rows(&job);
        assert_eq!(labels(&rows[13..]), ["backoff_ms", "backoff_ms_max"]);
        assert_eq!(rows[13].1, "0");
    }

    #[test]
    fn a_lease_shows_what_a_claim_carries_only_when_set() {
        let mut l: WireLease = serde_json::from_value(json!({"job_id":"a","owner":"w",
            "generation":2,"lease_until_ms":20,"ttl_ms":10,"cluster_time_ms":10,
            "log_index":4}))
        .unwrap();
        assert_eq!(lease_rows(&l).len(), 7);
        l.attempts = Some(2);
        l.payload = Some("{ \"n\" : 1 }".into());
        l.cancel_requested = true;
        let rows = lease_rows(&l);
        assert_eq!(
            labels(&rows[7..]),
            ["cancel_requested", "attempts", "payload"]
        );
        assert_eq!(rows[9].1, r#"{"n":1}"#);
    }
}
