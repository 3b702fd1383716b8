//! The path parameters a route row names, parsed from the request alone: a job id, which
//! may contain `/` (so job routes are mounted on `/v1/jobs/{*rest}` and the action's
//! tail is cut off the raw path, then the id percent-decoded, so an encoded `%2F` always
//! stays part of the id). Read by the handlers and by the token check, which enforces a
//! row's scope rule before any handler runs (`client_auth.rs`).
//!
//! Imports `routes` of `http` (the rows and their tails); no other `http` file.

use leasehold_statemachine::limits;
use leasehold_statemachine::{ApiError, ErrorCode};

use super::routes::{Resolved, RouteId};

/// The decoded job id of a POST under `/v1/jobs/` (`rest`: the raw path after it) and
/// the action's route, if the request resolved to one whose tail ends `rest` (handler
/// and fuzz target). None: a POST on no action (the handler answers 404).
pub(crate) fn split_action(
    route: Resolved,
    rest: &str,
) -> Result<(String, Option<RouteId>), ApiError> {
    let action = route
        .spec()
        .filter(|r| !r.tail().is_empty())
        .and_then(|r| rest.strip_suffix(r.tail()).map(|raw| (raw, r.id)));
    let (raw_id, action) = match action {
        Some((raw, id)) => (raw, Some(id)),
        None => (rest, None),
    };
    Ok((decode_job_path(raw_id)?, action))
}

/// A job id from the raw rest of a GET/DELETE path (handler and fuzz target).
pub(crate) fn decode_job_path(raw_rest: &str) -> Result<String, ApiError> {
    let id = percent_decode(raw_rest)
        .ok_or_else(|| invalid("job id is not valid percent-encoded UTF-8"))?;
    limits::validate_job_id(&id)?;
    Ok(id)
}

fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The job id of a job route's path (`{id}` of its row), `None` for another route or an
/// id that does not parse (its handler answers that 400).
pub(crate) fn job_id_of(route: Resolved, path: &str) -> Option<String> {
    let prefix = route.spec()?.path.split('{').next()?;
    let rest = path.strip_prefix(prefix)?;
    split_action(route, rest).ok().map(|(id, _)| id)
}

fn invalid(msg: impl Into<String>) -> ApiError {
    ApiError::new(ErrorCode::InvalidArgument, msg)
}
