//! docs/api.md's names and limits ("Names and limits", "Job lifecycle (version 1.1)"),
//! checked field by field in the order of the request body. What is judged against
//! store time (`run_at_ms`) is the rules' (`rules.rs`).

use leasehold_statemachine::commands::{
    ActivateVersion, Cancel, Claim, ClaimNext, Complete, Delete, Fail, Redrive, Release,
    ReleaseWith, Renew, RenewWith, Retry, Submit, SubmitWith, Tick,
};
use leasehold_statemachine::{Command, ErrorCode};

use ErrorCode::{InvalidArgument as Bad, PayloadTooLarge as Big};

/// One day: the most a `delay_ms`, `backoff_ms` or `backoff_ms_max` may be.
pub const DAY_MS: u64 = 86_400_000;

fn name_ok(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".-_:/@".contains(&b))
}

fn check(ok: bool, code: ErrorCode) -> Result<(), ErrorCode> {
    if ok {
        Ok(())
    } else {
        Err(code)
    }
}

fn id(s: &str) -> Result<(), ErrorCode> {
    check(name_ok(s, 256), Bad)
}

fn owner(s: &str) -> Result<(), ErrorCode> {
    check(name_ok(s, 128), Bad)
}

fn queue(s: &str) -> Result<(), ErrorCode> {
    let chars = s
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
    check(!s.is_empty() && s.len() <= 64 && chars, Bad)
}

fn ttl(t: u64) -> Result<(), ErrorCode> {
    check((100..=3_600_000).contains(&t), Bad)
}

fn json(p: &Option<String>, max: usize) -> Result<(), ErrorCode> {
    check(p.as_ref().is_none_or(|p| p.len() <= max), Big)
}

fn text(t: &Option<String>, max: usize) -> Result<(), ErrorCode> {
    check(t.as_ref().is_none_or(|t| t.len() <= max), Bad)
}

fn holder(job_id: &str, o: &str) -> Result<(), ErrorCode> {
    id(job_id)?;
    owner(o)
}

fn new_job(
    i: &Option<String>,
    q: &str,
    payload: &Option<String>,
    max_attempts: Option<u64>,
) -> Result<(), ErrorCode> {
    i.as_deref().map_or(Ok(()), id)?;
    queue(q)?;
    json(payload, 64 * 1024)?;
    check(max_attempts != Some(0), Bad)
}

/// The request's fields, in body order.
pub fn validate(cmd: &Command) -> Result<(), ErrorCode> {
    match cmd {
        Command::Submit(Submit {
            id: i,
            queue: q,
            payload,
            max_attempts,
        }) => new_job(i, q, payload, *max_attempts),
        Command::Claim(Claim {
            job_id,
            owner: o,
            ttl_ms,
        }) => holder(job_id, o).and(ttl(*ttl_ms)),
        Command::ClaimNext(ClaimNext {
            queue: q,
            owner: o,
            ttl_ms,
        }) => queue(q).and(owner(o)).and(ttl(*ttl_ms)),
        Command::Renew(Renew {
            job_id,
            owner: o,
            ttl_ms,
            ..
        }) => holder(job_id, o).and(ttl_ms.map_or(Ok(()), ttl)),
        Command::Complete(Complete {
            job_id,
            owner: o,
            result,
            ..
        }) => holder(job_id, o).and(json(result, 64 * 1024)),
        Command::Release(Release {
            job_id, owner: o, ..
        }) => holder(job_id, o),
        Command::Delete(Delete { job_id }) => id(job_id),
        Command::Tick(Tick) => Ok(()),
        Command::ActivateVersion(ActivateVersion { version }) => check(*version > 1, Bad),
        Command::Batch(_) => unreachable!("the model generates no batches (tests/rules.rs)"),
        Command::Scoped(_) => {
            unreachable!("the model generates no scoped commands (tests/tenant_scope.rs)")
        }
        lifecycle => validate_lifecycle(lifecycle),
    }
}

/// Version 1.1's commands.
fn validate_lifecycle(cmd: &Command) -> Result<(), ErrorCode> {
    match cmd {
        Command::SubmitWith(SubmitWith {
            id: i,
            queue: q,
            payload,
            max_attempts,
            priority,
            backoff_ms,
            backoff_ms_max,
            ..
        }) => {
            new_job(i, q, payload, *max_attempts)?;
            check((-1000..=1000).contains(priority), Bad)?;
            let backoff_ok = *backoff_ms <= DAY_MS && *backoff_ms_max <= DAY_MS;
            check(backoff_ok && backoff_ms_max >= backoff_ms, Bad)
        }
        Command::RenewWith(RenewWith {
            job_id,
            owner: o,
            ttl_ms,
            progress,
            ..
        }) => holder(job_id, o)
            .and(ttl_ms.map_or(Ok(()), ttl))
            .and(json(progress, 16 * 1024)),
        Command::ReleaseWith(ReleaseWith {
            job_id,
            owner: o,
            delay_ms,
            error,
            ..
        }) => holder(job_id, o)
            .and(check(delay_ms.is_none_or(|d| d <= DAY_MS), Bad))
            .and(text(error, 4 * 1024)),
        Command::Fail(Fail {
            job_id,
            owner: o,
            error,
            ..
        }) => holder(job_id, o).and(text(error, 4 * 1024)),
        Command::Cancel(Cancel { job_id, reason }) => id(job_id).and(text(reason, 1024)),
        Command::Retry(Retry { job_id, .. }) => id(job_id),
        Command::Redrive(Redrive { queue: q, limit }) => {
            queue(q).and(check((1..=1000).contains(limit), Bad))
        }
        other => unreachable!("not a version 1.1 command: {other:?}"),
    }
}
