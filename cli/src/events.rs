//! `leasehold job history ID` and `leasehold events`: docs/api.md "History and the event
//! feed" from the command line, through [`leasehold_client::Client::history`],
//! [`Client::events_page`] and [`Client::events`].
//!
//! Both print one line per event, `kubectl get -w` style: a header, then `SEQ TIME JOB
//! EVENT GENERATION OWNER DETAIL` (`job history` leaves out JOB, the same on every
//! line). TIME is the event's cluster time as UTC; DETAIL the event's particulars as
//! `name=value` (texts quoted and escaped: whoever failed or cancelled the job wrote
//! them). `--output json` prints the API's objects instead: `job history` the
//! `{"events":[…]}` object, `events` one Event object per line.
//!
//! `events` without `--follow` reads what the feed holds after `--after`, page by page,
//! and exits; with `--follow` it follows the feed through the client's [`EventStream`]
//! (long polls, resumed on another node from the last seq seen) until Ctrl-C. A reader
//! that closes the pipe (`| head`) ends it quietly.
//!
//! [`EventStream`]: leasehold_client::EventStream

use std::io::Write;

use clap::Args;
use leasehold_client::{Client, Event, EventsQuery};
use leasehold_statemachine::limits::{self, EVENTS_LIMIT_MAX};
use leasehold_statemachine::wire::History;

use crate::common::{CliError, ClientOpts, Output, EXIT_UNAVAILABLE};

/// `leasehold events`.
#[derive(Debug, Args)]
pub struct EventsArgs {
    /// Only the events of this queue.
    #[arg(long, value_parser = parse_queue)]
    pub queue: Option<String>,
    /// Only the events of this job.
    #[arg(long = "job", value_name = "ID", value_parser = parse_job_id)]
    pub job: Option<String>,
    /// Only events with a seq above SEQ (`cluster status --output json` has the newest,
    /// `event_seq`); default 0, from the oldest the cluster keeps.
    #[arg(long, value_name = "SEQ", default_value_t = 0)]
    pub after: u64,
    /// Keep following the feed (Ctrl-C stops), resuming on another node when one fails.
    #[arg(long)]
    pub follow: bool,
}

fn parse_queue(s: &str) -> Result<String, String> {
    limits::validate_queue(s).map_err(|e| e.message)?;
    Ok(s.to_owned())
}

fn parse_job_id(s: &str) -> Result<String, String> {
    limits::validate_job_id(s).map_err(|e| e.message)?;
    Ok(s.to_owned())
}

/// `ms` of Unix time as UTC, `YYYY-MM-DDTHH:MM:SS.mmmZ` (cluster time counts from the
/// Unix epoch).
pub fn utc(ms: u64) -> String {
    let secs = ms / 1_000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days);
    let (h, min, s) = (rem / 3_600, rem % 3_600 / 60, rem % 60);
    format!(
        "{y:04}-{m:02}-{d:02}T{h:02}:{min:02}:{s:02}.{:03}Z",
        ms % 1_000
    )
}

/// Year, month, day of the `days`th day after 1970-01-01 (H. Hinnant's `civil_from_days`,
/// for days on or after the epoch).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

/// An event's `detail` as `name=value` pairs in docs/api.md's order; `-` when it has none.
pub fn detail_text(e: &Event) -> String {
    let Some(d) = &e.detail else {
        return "-".to_owned();
    };
    let mut parts = Vec::new();
    if let Some(t) = d.lease_until_ms {
        parts.push(format!("lease_until_ms={t}"));
    }
    if let Some(n) = d.attempt {
        parts.push(format!("attempt={n}"));
    }
    if let Some(t) = d.due_ms {
        parts.push(format!("due_ms={t}"));
    }
    // Debug quotes the text and escapes control characters: one line, inert.
    if let Some(text) = &d.error {
        parts.push(format!("error={text:?}"));
    }
    if let Some(text) = &d.reason {
        parts.push(format!("reason={text:?}"));
    }
    if parts.is_empty() {
        "-".to_owned()
    } else {
        parts.join(" ")
    }
}

/// Which columns a line has: `events` names the job, `job history` does not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Columns {
    WithJob,
    WithoutJob,
}

/// The header line of [`event_line`]'s table.
pub fn header(cols: Columns) -> String {
    line(
        cols,
        [
            "SEQ",
            "TIME",
            "JOB",
            "EVENT",
            "GENERATION",
            "OWNER",
            "DETAIL",
        ]
        .map(String::from),
    )
}

/// One event as a table line.
pub fn event_line(cols: Columns, e: &Event) -> String {
    line(
        cols,
        [
            e.seq.to_string(),
            utc(e.cluster_time_ms),
            crate::show::printable(&e.job_id),
            e.event.as_str().to_owned(),
            e.generation.to_string(),
            e.owner
                .as_deref()
                .map_or_else(|| "-".to_owned(), crate::show::printable),
            detail_text(e),
        ],
    )
}

fn line(cols: Columns, [seq, time, job, event, generation, owner, detail]: [String; 7]) -> String {
    let job = match cols {
        Columns::WithJob => format!("{job:<24} "),
        Columns::WithoutJob => String::new(),
    };
    format!("{seq:>8} {time:<24} {job}{event:<16} {generation:>10} {owner:<16} {detail}")
}

/// Writes one line to stdout. `Ok(false)`: the reader went away (a closed pipe), stop
/// quietly.
fn emit(text: &str) -> Result<bool, CliError> {
    match writeln!(std::io::stdout().lock(), "{text}") {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(CliError {
            code: EXIT_UNAVAILABLE,
            message: format!("writing the output: {e}"),
        }),
    }
}

/// An event as the output format says: a table line or its JSON object.
fn emit_event(e: &Event, json: bool) -> Result<bool, CliError> {
    if !json {
        return emit(&event_line(Columns::WithJob, e));
    }
    let text = serde_json::to_string(e).map_err(|err| CliError {
        code: EXIT_UNAVAILABLE,
        message: format!("encoding the output: {err}"),
    })?;
    emit(&text)
}

/// `job history ID`'s output.
pub fn show_history(events: Vec<Event>, json: bool) -> Result<(), CliError> {
    if json {
        return crate::show::print_json(&History { events });
    }
    if !emit(&header(Columns::WithoutJob))? {
        return Ok(());
    }
    for e in &events {
        if !emit(&event_line(Columns::WithoutJob, e))? {
            break;
        }
    }
    Ok(())
}

pub async fn run_events(args: EventsArgs, opts: &ClientOpts) -> Result<(), CliError> {
    let client = opts.client()?;
    let json = opts.output == Output::Json;
    let query = EventsQuery {
        after: args.after,
        queue: args.queue,
        job_id: args.job,
    };
    if !json && !emit(&header(Columns::WithJob))? {
        return Ok(());
    }
    if args.follow {
        follow(&client, &query, json).await
    } else {
        read_to_end(&client, query, json).await
    }
}

/// Every page of the feed after `query.after`, until a page looks at nothing new.
async fn read_to_end(client: &Client, mut query: EventsQuery, json: bool) -> Result<(), CliError> {
    loop {
        let page = client.events_page(&query, EVENTS_LIMIT_MAX, 0).await?;
        for e in &page.events {
            if !emit_event(e, json)? {
                return Ok(());
            }
        }
        let last = page.events.last().map_or(0, |e| e.seq);
        let next = page.next_after.max(last);
        if next <= query.after {
            return Ok(());
        }
        query.after = next;
    }
}

/// The feed followed until Ctrl-C, the stream's end, or a closed stdout. An outage is a
/// warning on stderr; the stream goes on from where it was.
async fn follow(client: &Client, query: &EventsQuery, json: bool) -> Result<(), CliError> {
    let mut stream = client.events(query)?;
    let interrupted = crate::process::shutdown_signal();
    tokio::pin!(interrupted);
    loop {
        let item = tokio::select! {
            item = stream.next() => item,
            () = &mut interrupted => return Ok(()),
        };
        match item {
            Some(Ok(e)) => {
                if !emit_event(&e, json)? {
                    return Ok(());
                }
            }
            Some(Err(e)) if e.is_unavailable() => {
                let line = crate::common::one_line(&e.to_string());
                eprintln!("warning: {line}; still trying, from seq {}", stream.after());
            }
            Some(Err(e)) => return Err(e.into()),
            None => return Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_client::{EventDetail, EventKind};

    #[test]
    fn cluster_time_prints_as_utc() {
        assert_eq!(utc(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(utc(1_764_450_002_345), "2025-11-29T21:00:02.345Z");
        assert_eq!(utc(951_782_400_001), "2000-02-29T00:00:00.001Z");
        assert_eq!(utc(4_102_444_799_999), "2099-12-31T23:59:59.999Z");
    }

    fn claimed() -> Event {
        Event {
            seq: 42,
            job_id: "invoice-42".into(),
            queue: "default".into(),
            event: EventKind::Claimed,
            generation: 3,
            owner: Some("worker-a".into()),
            cluster_time_ms: 1_764_450_002_345,
            log_index: 99,
            detail: Some(EventDetail {
                lease_until_ms: Some(1_764_450_012_345),
                attempt: Some(2),
                ..EventDetail::default()
            }),
        }
    }

    #[test]
    fn an_event_is_one_line_in_fixed_columns() {
        let e = claimed();
        let l = event_line(Columns::WithJob, &e);
        assert_eq!(
            l,
            "      42 2025-11-29T21:00:02.345Z invoice-42               claimed                   3 \
             worker-a         lease_until_ms=1764450012345 attempt=2"
        );
        let h = header(Columns::WithJob);
        assert_eq!(h.find("EVENT"), l.find("claimed"), "{h}\n{l}");
        assert_eq!(h.find("DETAIL"), l.find("lease_until_ms"), "{h}\n{l}");
        let short = event_line(Columns::WithoutJob, &e);
        assert!(!short.contains("invoice-42"), "{short}");
        assert_eq!(
            header(Columns::WithoutJob).find("EVENT"),
            short.find("claimed")
        );
    }

    #[test]
    fn detail_texts_are_quoted_and_escaped_and_an_empty_detail_is_a_dash() {
        let mut e = claimed();
        e.detail = Some(EventDetail {
            error: Some("disk \"full\"\n\x1b[31mred".into()),
            reason: Some("stop".into()),
            ..EventDetail::default()
        });
        assert_eq!(
            detail_text(&e),
            r#"error="disk \"full\"\n\u{1b}[31mred" reason="stop""#
        );
        e.detail = None;
        e.owner = None;
        assert_eq!(detail_text(&e), "-");
        assert!(event_line(Columns::WithJob, &e).ends_with(" -                -"));
    }
}
