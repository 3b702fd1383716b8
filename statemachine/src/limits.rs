//! Every limit of the API in one place, with the validation that enforces it.
//!
//! The node validates requests with these functions before proposing them, the client
//! validates before sending, and the state machine validates again on apply (a log entry
//! is never trusted to be well-formed). One implementation means the three can't drift.

use crate::wire::{ApiError, ErrorCode};

/// Job ids: 1–256 bytes of `A-Z a-z 0-9 . _ - : / @` (api.md "Names and limits").
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
/// Largest request body a node reads.
pub const BODY_BYTES_MAX: usize = 1024 * 1024;
/// Page size bounds of `GET /v1/jobs`.
pub const LIST_LIMIT_DEFAULT: usize = 100;
pub const LIST_LIMIT_MAX: usize = 1000;
/// Longest `wait_ms` of a queue claim.
pub const WAIT_MS_MAX: u64 = 30_000;
/// `Idempotency-Key` length bounds.
pub const IDEMPOTENCY_KEY_LEN_MAX: usize = 128;
/// How long (store time) an idempotency key is remembered: api.md promises 10 minutes.
pub const IDEMPOTENCY_WINDOW_MS: u64 = 10 * 60 * 1000;
/// How many idempotency keys are remembered at most. Past this the oldest is forgotten
/// early; at 1,000 keyed writes/s the window still holds for over 16 minutes.
pub const IDEMPOTENCY_KEYS_MAX: usize = 1_000_000;
/// Most client commands the node packs into one log entry.
pub const BATCH_ITEMS_MAX: usize = 512;
/// Longest failover grace added to live leases when a new term starts (design.md).
pub const GRACE_MS_MAX_DEFAULT: u64 = 3_000;

fn invalid(msg: String) -> ApiError {
    ApiError::new(ErrorCode::InvalidArgument, msg)
}

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
    check_name("queue", queue, QUEUE_LEN_MAX, |b| {
        b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-'
    })
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

pub fn validate_wait_ms(wait_ms: u64) -> Result<(), ApiError> {
    if wait_ms > WAIT_MS_MAX {
        return Err(invalid(format!(
            "wait_ms must be at most {WAIT_MS_MAX} (got {wait_ms})"
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
}
