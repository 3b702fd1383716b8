//! Every limit of the API in one place, with the validation that enforces it.
//!
//! The node validates requests with these functions before proposing them, the client
//! validates before sending, and the state machine validates again on apply (a log entry
//! is never trusted to be well-formed). One implementation means the three can't drift.

use crate::wire::error::{ApiError, ErrorCode};

/// Job ids: 1–256 bytes of `A-Z a-z 0-9 . _ - : / @` (docs/api.md "Names and limits").
pub const JOB_ID_LEN_MAX: usize = 256;
/// Owners: 1–128 bytes, same alphabet as job ids.
pub const OWNER_LEN_MAX: usize = 128;
/// Queues: 1–64 bytes of `a-z 0-9 _ -`.
pub const QUEUE_LEN_MAX: usize = 64;
/// The queue a job lands in when none is given.
pub const QUEUE_DEFAULT: &str = "default";
/// Shortest lease the store grants.
pub const TTL_MS_MIN: u64 = 100;
/// Longest lease the store grants (one hour).
pub const TTL_MS_MAX: u64 = 3_600_000;
/// Largest encoded `payload` or `result`.
pub const PAYLOAD_BYTES_MAX: usize = 64 * 1024;
/// Deepest nesting of `[`/`{` in a `payload` or `result`, and in any value of a request
/// body. Deeper documents are refused before serde sees them: stored, they would make
/// every later page of `GET /v1/jobs` unreadable to common parsers (Python's raises
/// RecursionError past ~1,000; serde_json's own limit is 128).
pub const JSON_DEPTH_MAX: usize = 64;
/// Largest request body a node reads.
pub const BODY_BYTES_MAX: usize = 1024 * 1024;
/// Page size bounds of `GET /v1/jobs`.
pub const LIST_LIMIT_DEFAULT: usize = 100;
pub const LIST_LIMIT_MAX: usize = 1000;
/// Longest `wait_ms` of a queue claim.
pub const WAIT_MS_MAX: u64 = 30_000;
/// `Idempotency-Key` length bounds.
pub const IDEMPOTENCY_KEY_LEN_MAX: usize = 128;
/// How long (store time) an idempotency key is remembered: docs/api.md promises 10 minutes.
pub const IDEMPOTENCY_WINDOW_MS: u64 = 10 * 60 * 1000;
/// How many idempotency keys are remembered at most. Past this the oldest is forgotten
/// early; at 1,000 keyed writes/s the window still holds for over 16 minutes.
pub const IDEMPOTENCY_KEYS_MAX: usize = 1_000_000;
/// Most bytes the idempotency table accounts for, all scopes together. Past this the
/// oldest entries are forgotten early, as past [`IDEMPOTENCY_KEYS_MAX`]. What an entry
/// counts is fixed by `idempotency.rs` (its key, its reply's encoded size and a fixed
/// overhead), never by allocator figures, so every replica forgets the same keys. An error
/// reply can carry a whole job (two 64 KiB documents): without this bound 4,000 keyed 409s
/// held ~500 MiB on every replica (issue 17 item 5).
pub const IDEMPOTENCY_BYTES_MAX: u64 = 64 * 1024 * 1024;
/// [`IDEMPOTENCY_BYTES_MAX`] from entry version 7 (`version::VERSION_BOUNDED_REPLIES`), when
/// a full table refuses a new key (429 `idempotency_full`) instead of forgetting an old
/// one inside its window: a remembered reply shares its job's payload with the job's
/// record, so an entry costs its names and fixed parts (about 600 accounted bytes for a
/// claim with a 36-byte key), and one caller's eighth holds ~50,000 keyed replies.
pub const IDEMPOTENCY_BYTES_MAX_REFUSING: u64 = 256 * 1024 * 1024;
/// A scope (one caller, see [`scoped_idempotency_key`]) holds at most
/// 1/`IDEMPOTENCY_SCOPE_SHARE` of the table's keys and bytes; past its quota *its* oldest
/// key is forgotten, nobody else's. Eight callers filling their quotas fill the table.
pub const IDEMPOTENCY_SCOPE_SHARE: u64 = 8;
/// One scope's byte quota.
pub const IDEMPOTENCY_SCOPE_BYTES_MAX: u64 = IDEMPOTENCY_BYTES_MAX / IDEMPOTENCY_SCOPE_SHARE;
/// One scope's key quota with the default key bound (see [`idempotency_scope_keys_max`]).
pub const IDEMPOTENCY_SCOPE_KEYS_MAX: usize = idempotency_scope_keys_max(IDEMPOTENCY_KEYS_MAX);
/// Longest scope of a scoped idempotency key.
pub const IDEMPOTENCY_SCOPE_LEN_MAX: usize = 32;
/// Most client commands the node packs into one log entry.
pub const BATCH_ITEMS_MAX: usize = 512;
/// Most jobs one claim-next hands out (`max_jobs`, docs/api.md "Batches").
pub const CLAIM_MAX_JOBS_MAX: u32 = 256;
/// Most leases one `POST /v1/leases/renew` or `/v1/leases/complete` carries.
pub const BATCH_LEASES_MAX: usize = 1000;
/// Most ready jobs of a queue a scoped claim-next looks at for one its scope holds (a
/// scope with a job prefix skips the others): past it, nothing is claimable for it.
pub const SCOPED_CLAIM_SCAN_MAX: usize = 10_000;
/// Longest failover grace added to live leases when a new term starts (docs/design.md).
pub const GRACE_MS_MAX_DEFAULT: u64 = 3_000;

/// Version 1.1 (docs/api.md "Scheduling, priorities, retries"): a job's priority range.
pub const PRIORITY_MIN: i32 = -1000;
pub const PRIORITY_MAX: i32 = 1000;
/// Largest `backoff_ms`, `backoff_ms_max` and release `delay_ms`: one day.
pub const DELAY_MS_MAX: u64 = 86_400_000;
/// `backoff_ms_max` when a submit gives none (or `backoff_ms`, if that is larger): one
/// hour. It lives beside the field it defaults (`wire/job.rs`), below this table.
pub use crate::wire::job::BACKOFF_MS_MAX_DEFAULT;
/// How far ahead of store time a `run_at_ms` may be: 366 days.
pub const RUN_AT_AHEAD_MS_MAX: u64 = 366 * 86_400_000;
/// Largest `progress` of a renew, encoded (413 `payload_too_large` past it).
pub const PROGRESS_BYTES_MAX: usize = 16 * 1024;
/// Largest `error` of a release or fail (400 past it).
pub const ERROR_BYTES_MAX: usize = 4 * 1024;
/// Largest `reason` of a cancel (400 past it).
pub const REASON_BYTES_MAX: usize = 1024;
/// Events a job's history keeps (docs/api.md "History of a job"): older ones drop.
pub const HISTORY_EVENTS_MAX: usize = 100;
/// Longest `error` or `reason` an event carries, in bytes (cut at a character boundary,
/// ending in `…`): a history holds 100 events, each would otherwise copy 4 KiB.
pub const EVENT_TEXT_BYTES_MAX: usize = 256;
/// Deleted jobs whose history is kept (the most recently deleted): a history answers
/// for a deleted id until it is created again (from entry version 7 a new job under
/// the id starts a new history; before, it continued this one).
pub const HISTORIES_DELETED_KEPT: usize = 100_000;
/// The event feed keeps at least this many of the newest events (docs/api.md: "at least
/// the last 100,000 events or 10 minutes")…
pub const FEED_EVENTS_KEPT_MIN: usize = 100_000;
/// …and older ones still within this much cluster time of the newest…
pub const FEED_KEPT_MS: u64 = 600_000;
/// …up to this many in all (a bound on memory and snapshot size under any load).
pub const FEED_EVENTS_KEPT_MAX: usize = 250_000;
/// `limit` of `GET /v1/events`: default and largest.
pub const EVENTS_LIMIT_DEFAULT: usize = 100;
pub const EVENTS_LIMIT_MAX: usize = 1000;
/// Longest `wait_ms` of `GET /v1/events`.
pub const EVENTS_WAIT_MS_MAX: u64 = 30_000;
/// Events one feed read looks at, matched or not: a filtered read of a busy feed ends
/// there (its `next_after` says where to go on), so the state is never held long.
pub const EVENTS_SCAN_MAX: usize = 20_000;
/// `limit` of a redrive: default and largest.
pub const REDRIVE_LIMIT_DEFAULT: u32 = 100;
pub const REDRIVE_LIMIT_MAX: u32 = 1000;

fn invalid(msg: String) -> ApiError {
    ApiError::new(ErrorCode::InvalidArgument, msg)
}

/// The JSON Schema `pattern` of a job id and an owner (docs/openapi.json): the bytes
/// [`is_name_byte`] allows (a test checks the two agree).
pub const NAME_PATTERN: &str = "^[A-Za-z0-9._:/@-]+$";
/// The JSON Schema `pattern` of a queue name: the bytes [`is_queue_byte`] allows.
pub const QUEUE_PATTERN: &str = "^[a-z0-9_-]+$";

/// The JSON Schema `pattern` of an `Idempotency-Key`: printable ASCII, no space.
pub const IDEMPOTENCY_KEY_PATTERN: &str = "^[!-~]+$";

fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b':' | b'/' | b'@')
}

fn check_name(what: &str, value: &str, len_max: usize, ok: fn(u8) -> bool) -> Result<(), ApiError> {
    if value.is_empty() || value.len() > len_max {
        return Err(invalid(format!(
            "{what} must be 1-{len_max} bytes (got {})",
            value.len()
        )));
    }
    if let Some(bad) = value.bytes().find(|b| !ok(*b)) {
        return Err(invalid(format!(
            "{what} contains a forbidden character {:?}",
            bad as char
        )));
    }
    Ok(())
}

pub fn validate_job_id(id: &str) -> Result<(), ApiError> {
    check_name("job id", id, JOB_ID_LEN_MAX, is_name_byte)
}

pub fn validate_owner(owner: &str) -> Result<(), ApiError> {
    check_name("owner", owner, OWNER_LEN_MAX, is_name_byte)
}

pub fn validate_queue(queue: &str) -> Result<(), ApiError> {
    check_name("queue", queue, QUEUE_LEN_MAX, is_queue_byte)
}

fn is_queue_byte(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-'
}

pub fn validate_ttl_ms(ttl_ms: u64) -> Result<(), ApiError> {
    if !(TTL_MS_MIN..=TTL_MS_MAX).contains(&ttl_ms) {
        return Err(invalid(format!(
            "ttl_ms must be {TTL_MS_MIN}-{TTL_MS_MAX} (got {ttl_ms})"
        )));
    }
    Ok(())
}

/// `what` is `payload` or `result`; `json` is its encoded form.
pub fn validate_json_size(what: &str, json: &str) -> Result<(), ApiError> {
    if json.len() > PAYLOAD_BYTES_MAX {
        return Err(ApiError::new(
            ErrorCode::PayloadTooLarge,
            format!(
                "{what} is {} bytes encoded, at most {PAYLOAD_BYTES_MAX} allowed",
                json.len()
            ),
        ));
    }
    Ok(())
}

/// How deep `[`/`{` nest in `json`, counted by a byte scan without recursion, so any
/// input, even malformed, costs one pass and no stack. Brackets inside strings (escapes
/// honoured) do not count; stray closers never take the count below zero.
pub fn json_depth(json: &[u8]) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for &b in json {
        if in_string {
            // Multi-byte UTF-8 never contains `"` or `\`, so bytes are enough.
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// `what` is `payload` or `result`; `json` is its encoded form.
pub fn validate_json_depth(what: &str, json: &str) -> Result<(), ApiError> {
    let depth = json_depth(json.as_bytes());
    if depth > JSON_DEPTH_MAX {
        return Err(invalid(format!(
            "{what} is nested {depth} levels deep, at most {JSON_DEPTH_MAX} \
             (JSON_DEPTH_MAX) allowed"
        )));
    }
    Ok(())
}

/// A request body is one object holding the values: each may nest [`JSON_DEPTH_MAX`]
/// deep inside it.
pub fn validate_body_depth(body: &[u8]) -> Result<(), ApiError> {
    let depth = json_depth(body);
    if depth > JSON_DEPTH_MAX + 1 {
        return Err(invalid(format!(
            "the request body holds a value nested {} levels deep, at most \
             {JSON_DEPTH_MAX} (JSON_DEPTH_MAX) allowed",
            depth - 1
        )));
    }
    Ok(())
}

pub fn validate_wait_ms(wait_ms: u64) -> Result<(), ApiError> {
    if wait_ms > WAIT_MS_MAX {
        return Err(invalid(format!(
            "wait_ms must be at most {WAIT_MS_MAX} (got {wait_ms})"
        )));
    }
    Ok(())
}

pub fn validate_priority(priority: i32) -> Result<(), ApiError> {
    if !(PRIORITY_MIN..=PRIORITY_MAX).contains(&priority) {
        return Err(invalid(format!(
            "priority must be {PRIORITY_MIN}-{PRIORITY_MAX} (got {priority})"
        )));
    }
    Ok(())
}

/// `what` is `backoff_ms`, `backoff_ms_max` or `delay_ms`: 0 … [`DELAY_MS_MAX`].
pub fn validate_delay_ms(what: &str, ms: u64) -> Result<(), ApiError> {
    if ms > DELAY_MS_MAX {
        return Err(invalid(format!(
            "{what} must be at most {DELAY_MS_MAX} (got {ms})"
        )));
    }
    Ok(())
}

/// A backoff and its cap: each within [`DELAY_MS_MAX`], the cap not below the backoff.
pub fn validate_backoff(backoff_ms: u64, backoff_ms_max: u64) -> Result<(), ApiError> {
    validate_delay_ms("backoff_ms", backoff_ms)?;
    validate_delay_ms("backoff_ms_max", backoff_ms_max)?;
    if backoff_ms_max < backoff_ms {
        return Err(invalid(format!(
            "backoff_ms_max ({backoff_ms_max}) must not be below backoff_ms ({backoff_ms})"
        )));
    }
    Ok(())
}

/// A `run_at_ms` judged at store time `now`: at most [`RUN_AT_AHEAD_MS_MAX`] ahead (a
/// time in the past is allowed: the job is due at once).
pub fn validate_run_at_ms(run_at_ms: u64, now: u64) -> Result<(), ApiError> {
    let last = now.saturating_add(RUN_AT_AHEAD_MS_MAX);
    if run_at_ms > last {
        return Err(invalid(format!(
            "run_at_ms {run_at_ms} is more than 366 days after the cluster time {now}"
        )));
    }
    Ok(())
}

/// A `progress` value, encoded: at most [`PROGRESS_BYTES_MAX`].
pub fn validate_progress(json: &str) -> Result<(), ApiError> {
    if json.len() > PROGRESS_BYTES_MAX {
        let msg = format!(
            "progress is {} bytes encoded, at most {PROGRESS_BYTES_MAX} allowed",
            json.len()
        );
        return Err(ApiError::new(ErrorCode::PayloadTooLarge, msg));
    }
    Ok(())
}

/// A free-text field (`error`, `reason`): at most `max` bytes.
pub fn validate_text(what: &str, text: &str, max: usize) -> Result<(), ApiError> {
    if text.len() > max {
        return Err(invalid(format!(
            "{what} must be at most {max} bytes (got {})",
            text.len()
        )));
    }
    Ok(())
}

/// Claim-next's `max_jobs`: 1 to [`CLAIM_MAX_JOBS_MAX`].
pub fn validate_max_jobs(max_jobs: u32) -> Result<(), ApiError> {
    if max_jobs == 0 || max_jobs > CLAIM_MAX_JOBS_MAX {
        return Err(invalid(format!(
            "max_jobs must be 1-{CLAIM_MAX_JOBS_MAX} (got {max_jobs})"
        )));
    }
    Ok(())
}

/// How many leases a batch renew or complete carries: 1 to [`BATCH_LEASES_MAX`].
pub fn validate_batch_leases(n: usize) -> Result<(), ApiError> {
    if n == 0 || n > BATCH_LEASES_MAX {
        return Err(invalid(format!(
            "leases must hold 1-{BATCH_LEASES_MAX} items (got {n})"
        )));
    }
    Ok(())
}

pub fn validate_redrive_limit(limit: u32) -> Result<(), ApiError> {
    if limit == 0 || limit > REDRIVE_LIMIT_MAX {
        return Err(invalid(format!(
            "limit must be 1-{REDRIVE_LIMIT_MAX} (got {limit})"
        )));
    }
    Ok(())
}

pub fn validate_max_attempts(max_attempts: u64) -> Result<(), ApiError> {
    if max_attempts == 0 {
        return Err(invalid("max_attempts must be at least 1".into()));
    }
    Ok(())
}

pub fn validate_list_limit(limit: usize) -> Result<(), ApiError> {
    if limit == 0 || limit > LIST_LIMIT_MAX {
        return Err(invalid(format!(
            "limit must be 1-{LIST_LIMIT_MAX} (got {limit})"
        )));
    }
    Ok(())
}

/// Keys travel in an HTTP header, so only visible ASCII is accepted.
pub fn validate_idempotency_key(key: &str) -> Result<(), ApiError> {
    check_name("Idempotency-Key", key, IDEMPOTENCY_KEY_LEN_MAX, |b| {
        b.is_ascii_graphic()
    })
}

/// One scope's key quota for a table of `keys_max` keys: its share, at least one.
pub const fn idempotency_scope_keys_max(keys_max: usize) -> usize {
    let share = keys_max / IDEMPOTENCY_SCOPE_SHARE as usize;
    if share == 0 {
        1
    } else {
        share
    }
}

fn validate_idempotency_scope(scope: &str) -> Result<(), ApiError> {
    check_name("idempotency scope", scope, IDEMPOTENCY_SCOPE_LEN_MAX, |b| {
        b.is_ascii_graphic()
    })
}

/// The key the node proposes for a client's `key` sent by the caller `scope`:
/// `"<scope> <key>"`, one space between. Scoped keys of two callers never collide, and
/// each caller's keys count against its own quota ([`IDEMPOTENCY_SCOPE_SHARE`]). Both
/// parts are checked: a scope of 1–[`IDEMPOTENCY_SCOPE_LEN_MAX`] visible ASCII bytes, a
/// key as [`validate_idempotency_key`].
pub fn scoped_idempotency_key(scope: &str, key: &str) -> Result<String, ApiError> {
    validate_idempotency_scope(scope)?;
    validate_idempotency_key(key)?;
    Ok(format!("{scope} {key}"))
}

/// A stored key's scope and client key: `("", key)` for an unscoped key (no space).
pub fn split_idempotency_key(stored: &str) -> (&str, &str) {
    stored.split_once(' ').unwrap_or(("", stored))
}

/// What the state machine accepts in a log entry: a client key
/// ([`validate_idempotency_key`]) or a scoped one ([`scoped_idempotency_key`]).
pub fn validate_stored_idempotency_key(stored: &str) -> Result<(), ApiError> {
    match stored.split_once(' ') {
        None => validate_idempotency_key(stored),
        Some((scope, key)) => {
            validate_idempotency_scope(scope)?;
            validate_idempotency_key(key)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_id_bounds_and_alphabet() {
        assert!(validate_job_id(&"a".repeat(JOB_ID_LEN_MAX)).is_ok());
        assert!(validate_job_id(&"a".repeat(JOB_ID_LEN_MAX + 1)).is_err());
        assert!(validate_job_id("").is_err());
        assert!(validate_job_id("A-z.0_9:/@").is_ok());
        for bad in ["a b", "a?b", "é", "a#", "a%20"] {
            let e = validate_job_id(bad).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidArgument, "{bad}");
        }
    }

    /// The bytes a `^[…]+$` pattern's class admits (literals and `a-z` ranges; a `-`
    /// last is a literal).
    fn class_of(pattern: &str) -> Vec<u8> {
        let class = pattern
            .strip_prefix("^[")
            .and_then(|p| p.strip_suffix("]+$"))
            .expect("a ^[…]+$ pattern")
            .as_bytes();
        let mut bytes = Vec::new();
        let mut i = 0;
        while i < class.len() {
            if i + 2 < class.len() && class[i + 1] == b'-' {
                bytes.extend(class[i]..=class[i + 2]);
                i += 3;
            } else {
                bytes.push(class[i]);
                i += 1;
            }
        }
        bytes
    }

    #[test]
    fn schema_patterns_admit_exactly_the_validated_bytes() {
        let (names, queues) = (class_of(NAME_PATTERN), class_of(QUEUE_PATTERN));
        for b in 0..=u8::MAX {
            assert_eq!(names.contains(&b), is_name_byte(b), "name byte {b}");
            assert_eq!(queues.contains(&b), is_queue_byte(b), "queue byte {b}");
            let key = class_of(IDEMPOTENCY_KEY_PATTERN).contains(&b);
            assert_eq!(key, b.is_ascii_graphic(), "idempotency key byte {b}");
        }
    }

    #[test]
    fn owner_bounds() {
        assert!(validate_owner(&"w".repeat(OWNER_LEN_MAX)).is_ok());
        assert!(validate_owner(&"w".repeat(OWNER_LEN_MAX + 1)).is_err());
        assert!(validate_owner("").is_err());
    }

    #[test]
    fn queue_bounds_and_alphabet() {
        assert!(validate_queue(&"q".repeat(QUEUE_LEN_MAX)).is_ok());
        assert!(validate_queue(&"q".repeat(QUEUE_LEN_MAX + 1)).is_err());
        assert!(validate_queue("emails_2-x").is_ok());
        assert!(validate_queue("Emails").is_err());
        assert!(validate_queue("a.b").is_err());
        assert!(validate_queue("").is_err());
    }

    #[test]
    fn ttl_bounds() {
        assert!(validate_ttl_ms(TTL_MS_MIN).is_ok());
        assert!(validate_ttl_ms(TTL_MS_MIN - 1).is_err());
        assert!(validate_ttl_ms(TTL_MS_MAX).is_ok());
        assert!(validate_ttl_ms(TTL_MS_MAX + 1).is_err());
    }

    #[test]
    fn payload_bounds() {
        assert!(validate_json_size("payload", &"1".repeat(PAYLOAD_BYTES_MAX)).is_ok());
        let e = validate_json_size("payload", &"1".repeat(PAYLOAD_BYTES_MAX + 1)).unwrap_err();
        assert_eq!(e.code, ErrorCode::PayloadTooLarge);
    }

    fn nested(depth: usize) -> String {
        // Alternating arrays and objects: `[{"k":[{"k":…}]}]`.
        let mut open = String::new();
        let mut close = String::new();
        for level in 0..depth {
            if level % 2 == 0 {
                open.push('[');
                close.insert(0, ']');
            } else {
                open.push_str("{\"k\":");
                close.insert(0, '}');
            }
        }
        format!("{open}1{close}")
    }

    #[test]
    fn json_depth_counts_arrays_and_objects_mixed() {
        assert_eq!(json_depth(b"1"), 0);
        assert_eq!(json_depth(b"[]"), 1);
        assert_eq!(json_depth(b"{\"a\":[1,{\"b\":[]}],\"c\":{}}"), 4);
        assert_eq!(json_depth(b"[[],[[]],[]]"), 3);
        assert_eq!(json_depth(nested(7).as_bytes()), 7);
    }

    #[test]
    fn json_depth_ignores_brackets_in_strings_and_escaped_quotes() {
        assert_eq!(json_depth(br#"["[[[{{{"]"#), 1);
        // `\"` does not end the string, so the brackets after it are still inside it.
        assert_eq!(json_depth(br#"["a\"[[[", "]]"]"#), 1);
        // `\\` is an escaped backslash: the quote after it does end the string.
        assert_eq!(json_depth(br#"["a\\", [[1]]]"#), 3);
        assert_eq!(json_depth(br#"{"k\"{":"}\\"}"#), 1);
        // Malformed input is scanned, never trusted: stray closers floor at zero.
        assert_eq!(json_depth(b"]]]}[["), 2);
    }

    #[test]
    fn json_depth_at_the_limit_and_one_past_it() {
        assert!(validate_json_depth("payload", &nested(JSON_DEPTH_MAX)).is_ok());
        let e = validate_json_depth("payload", &nested(JSON_DEPTH_MAX + 1)).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidArgument);
        assert!(e.message.contains("payload is nested 65"), "{}", e.message);
        assert!(e.message.contains("JSON_DEPTH_MAX"), "{}", e.message);
        let deep = format!("{}{}", "[".repeat(32_000), "]".repeat(32_000));
        assert!(validate_json_depth("result", &deep).is_err());
    }

    #[test]
    fn body_depth_allows_the_enclosing_object() {
        let body = |depth| format!("{{\"payload\":{}}}", nested(depth));
        assert!(validate_body_depth(body(JSON_DEPTH_MAX).as_bytes()).is_ok());
        let e = validate_body_depth(body(JSON_DEPTH_MAX + 1).as_bytes()).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidArgument);
        assert!(e.message.contains("nested 65 levels"), "{}", e.message);
    }

    #[test]
    fn other_bounds() {
        assert!(validate_wait_ms(WAIT_MS_MAX).is_ok());
        assert!(validate_wait_ms(WAIT_MS_MAX + 1).is_err());
        assert!(validate_list_limit(LIST_LIMIT_MAX).is_ok());
        assert!(validate_list_limit(LIST_LIMIT_MAX + 1).is_err());
        assert!(validate_list_limit(0).is_err());
        assert!(validate_max_attempts(1).is_ok());
        assert!(validate_max_attempts(0).is_err());
        assert!(validate_idempotency_key(&"k".repeat(IDEMPOTENCY_KEY_LEN_MAX)).is_ok());
        assert!(validate_idempotency_key(&"k".repeat(IDEMPOTENCY_KEY_LEN_MAX + 1)).is_err());
        assert!(validate_idempotency_key("has space").is_err());
        assert!(validate_idempotency_key("").is_err());
    }

    #[test]
    fn scoped_keys_at_their_limits() {
        let scope = "s".repeat(IDEMPOTENCY_SCOPE_LEN_MAX);
        let key = "k".repeat(IDEMPOTENCY_KEY_LEN_MAX);
        let both = scoped_idempotency_key(&scope, &key).unwrap();
        assert_eq!(both, format!("{scope} {key}"));
        assert_eq!(split_idempotency_key(&both), (scope.as_str(), key.as_str()));
        assert!(validate_stored_idempotency_key(&both).is_ok());
        let long_scope = "s".repeat(IDEMPOTENCY_SCOPE_LEN_MAX + 1);
        assert!(scoped_idempotency_key(&long_scope, "k").is_err());
        assert!(scoped_idempotency_key("s", &"k".repeat(IDEMPOTENCY_KEY_LEN_MAX + 1)).is_err());
        for (scope, key) in [("", "k"), ("s", ""), ("a b", "k"), ("s", "a b"), ("é", "k")] {
            assert!(
                scoped_idempotency_key(scope, key).is_err(),
                "{scope:?} {key:?}"
            );
        }
        assert_eq!(split_idempotency_key("plain"), ("", "plain"));
        for bad in [" k", "s ", "s  k", "a b c", "", &format!("{long_scope} k")] {
            let e = validate_stored_idempotency_key(bad).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidArgument, "{bad:?}");
        }
        assert!(validate_stored_idempotency_key("plain").is_ok());
    }

    #[test]
    fn scope_quotas_are_a_share_of_the_table() {
        assert_eq!(IDEMPOTENCY_SCOPE_KEYS_MAX, IDEMPOTENCY_KEYS_MAX / 8);
        assert_eq!(IDEMPOTENCY_SCOPE_BYTES_MAX, 8 * 1024 * 1024);
        assert_eq!(idempotency_scope_keys_max(4), 1);
        assert_eq!(idempotency_scope_keys_max(16), 2);
    }
}
