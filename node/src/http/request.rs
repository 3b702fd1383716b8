//! Reading a request: its target in the one form every node reads alike
//! ([`check_target`]), its body within a limit (413 past it), a JSON object body in
//! docs/api.md's error shape, and the forwarding hop count.
//!
//! Imports `answer.rs` (the header names) and no other file of `http`.

use axum::body::{Body, Bytes};
use axum::http::HeaderMap;
use leasehold_statemachine::{limits, ApiError, ErrorCode};
use serde::de::DeserializeOwned;

use super::answer::HOPS_HEADER;

/// One id, one meaning (issue 30 item 5): a request target that the URL standard
/// would rewrite — a `.` or `..` segment (also percent-encoded), a backslash — is
/// refused with 400 by every node, before any token or route is looked at. Forwarding
/// sends the target through a URL parser that does rewrite it, so a follower and the
/// leader would otherwise read two different job ids (`/v1/jobs/b/../a/x` is `a/x` to
/// one, `b/../a/x` to the other). A job id with such a segment is still reachable with
/// its `/` percent-encoded as `%2F`.
pub fn check_target(path_and_query: &str) -> Result<(), ApiError> {
    match plain(path_and_query) || unchanged_by_url(path_and_query) {
        true => Ok(()),
        false => Err(ApiError::new(
            ErrorCode::InvalidArgument,
            format!(
                "request target {path_and_query:?} is not in normal form (a `.` or `..` \
                 segment, or a backslash): percent-encode a `/` of a job id as %2F"
            ),
        )),
    }
}

/// The common case, decided without parsing: no `.`, `%` or `\`, and only characters
/// the URL standard leaves as they are in a path and a query.
fn plain(target: &str) -> bool {
    target
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-_~/:@!$&()*+,;=?".contains(&b))
}

/// Whether the URL parser forwarding uses (reqwest's) keeps `target` as it is.
fn unchanged_by_url(target: &str) -> bool {
    let parsed = reqwest::Url::parse(&format!("http://node{target}")).ok();
    parsed.is_some_and(|u| {
        let mut as_sent = u.path().to_owned();
        if let Some(q) = u.query() {
            as_sent.push('?');
            as_sent.push_str(q);
        }
        as_sent == target
    })
}

/// Reads a body of at most `limit` bytes; past it, 413 `payload_too_large`.
pub async fn read_body(body: Body, limit: usize) -> Result<Bytes, ApiError> {
    axum::body::to_bytes(body, limit).await.map_err(|e| {
        if e.into_inner().is::<http_body_util::LengthLimitError>() {
            ApiError::new(
                ErrorCode::PayloadTooLarge,
                format!("request body exceeds {limit} bytes"),
            )
        } else {
            ApiError::new(
                ErrorCode::InvalidArgument,
                "could not read the request body",
            )
        }
    })
}

pub fn hops(headers: &HeaderMap) -> u32 {
    headers
        .get(HOPS_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn invalid(msg: impl Into<String>) -> ApiError {
    ApiError::new(ErrorCode::InvalidArgument, msg)
}

pub(crate) fn parse_json<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    // An empty body is an empty object: `curl -X POST` with no data is a fair request.
    let body = if body.iter().all(u8::is_ascii_whitespace) {
        b"{}" as &[u8]
    } else {
        body
    };
    // serde's derived structs also accept an array of the fields in order (`[]` was a
    // valid submit): docs/api.md's bodies are objects, anything else is 400.
    if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(invalid("the request body must be a JSON object"));
    }
    // Before serde: its recursion limit (128) answers a different error, and a value
    // within it may still be too deep to store (JSON_DEPTH_MAX).
    limits::validate_body_depth(body)?;
    serde_json::from_slice(body).map_err(|e| invalid(format!("bad JSON body: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fast path never accepts what the URL parser would rewrite, and the targets
    /// the issue names are refused whichever path decides them.
    #[test]
    fn targets_a_url_parser_rewrites_are_refused() {
        for ok in [
            "/v1/jobs/a/b/claim",
            "/v1/jobs/a.b",
            "/v1/jobs/a%2F..%2Fb",
            "/v1/jobs?queue=q&limit=5",
            "/v1/jobs/x..y/renew",
            "/",
        ] {
            assert!(check_target(ok).is_ok(), "{ok}");
        }
        for bad in [
            "/v1/jobs/b/../a/x",
            "/v1/jobs/b/./x",
            "/v1/jobs/b/%2e%2e/a/x",
            "/v1/jobs/b/.%2E/a/x",
            "/v1/jobs/b/%2e/x",
            "/v1/jobs/..",
            "/v1/jobs/b\\x",
            "/v1/jobs/a b",
        ] {
            let e = check_target(bad).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidArgument, "{bad}");
        }
        // Every target the fast path accepts, the parser keeps.
        let alphabet = b"aZ09-_~/:@!$&()*+,;=?";
        for a in alphabet {
            for b in alphabet {
                let t = format!("/v1/{}{}x", *a as char, *b as char);
                assert!(plain(&t));
                assert!(unchanged_by_url(&t), "{t}");
            }
        }
    }
}
