//! The client's error type: docs/api.md's error codes 1:1, plus the outcomes only a client
//! sees — no node could serve the call, or a write may or may not have been applied.
//!
//! The line that matters most is between [`Error::Unavailable`] and
//! [`Error::OutcomeUnknown`]. A write whose every attempt failed to connect or was
//! refused with 503 was never applied; a write that was sent and then lost its answer
//! (504, timeout, connection cut) may have been. Reporting the second as "failed" would
//! let a caller believe a claim did not happen when it did ("unknown is not absent",
//! style.md), so it gets its own variant.

use leasehold_statemachine::{ApiError, ErrorCode};

use crate::job::Job;

/// Everything a call can fail with.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// The store answered with one of docs/api.md's error codes — or the client refused the
    /// request before sending it, with the code and message the store would have used
    /// (the validation code is shared with the node, `leasehold_statemachine::limits`).
    ///
    /// `job` is the job the error is about, when the store sent it (e.g. the current
    /// state of a job whose lease is stale).
    #[error("{code}: {message}")]
    Api {
        code: ErrorCode,
        message: String,
        job: Option<Box<Job>>,
    },

    /// No node could serve the call within the retry budget: every attempt failed to
    /// connect or was answered 503 `unavailable`. For a write this means it was not
    /// applied by any attempt (no attempt was ever in an unknown state).
    #[error("unavailable after {attempts} attempt(s): {last}")]
    Unavailable { attempts: u32, last: String },

    /// A write was sent at least once and its answer never arrived (504 `timeout`, a
    /// request timeout, a connection cut mid-answer), and the retries with the same
    /// `Idempotency-Key` did not settle it. It may or may not have been applied: never
    /// treat this as "failed". Reads never end here (they end in `Unavailable`).
    #[error("outcome unknown after {attempts} attempt(s): {last}")]
    OutcomeUnknown { attempts: u32, last: String },

    /// A response that does not follow docs/api.md: an unparseable body, an unexpected status.
    #[error("unexpected response (HTTP {status}): {message}")]
    Protocol { status: u16, message: String },

    /// The client was configured wrongly (no endpoints, an `https://` endpoint without a
    /// CA, an unreadable certificate, a drift outside `[0, 1)`).
    #[error("client configuration: {0}")]
    Config(String),
}

impl From<ApiError> for Error {
    fn from(e: ApiError) -> Self {
        Error::Api {
            code: e.code,
            message: e.message,
            job: e.job.map(|j| Box::new(Job::from(*j))),
        }
    }
}

impl Error {
    /// The docs/api.md error code, for [`Error::Api`].
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Error::Api { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// The job an [`Error::Api`] is about, when the store sent it.
    pub fn job(&self) -> Option<&Job> {
        match self {
            Error::Api { job, .. } => job.as_deref(),
            _ => None,
        }
    }

    /// True for 409 `stale_lease`: another claim has superseded this generation (or the
    /// owner differs). Distinct from `lease_held` (someone else holds a live lease on a
    /// job you tried to claim) and from unavailability.
    pub fn is_stale_lease(&self) -> bool {
        self.code() == Some(ErrorCode::StaleLease)
    }

    /// True when the store says this lease can never be used again: `stale_lease`,
    /// `lease_expired`, `job_completed`, `job_failed`, `job_cancelled` or `not_found`. A
    /// holder that sees this must stop producing effects under the lease at once.
    pub fn is_lease_gone(&self) -> bool {
        matches!(
            self.code(),
            Some(
                ErrorCode::StaleLease
                    | ErrorCode::LeaseExpired
                    | ErrorCode::JobCompleted
                    | ErrorCode::JobFailed
                    | ErrorCode::JobCancelled
                    | ErrorCode::NotFound
            )
        )
    }

    /// True when a write may have been applied although no answer says so.
    pub fn is_outcome_unknown(&self) -> bool {
        matches!(self, Error::OutcomeUnknown { .. })
    }

    /// True when no node could serve the call; trying again later may succeed.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Error::Unavailable { .. })
    }

    /// A local validation failure, shaped like the store's answer.
    pub(crate) fn invalid(message: impl Into<String>) -> Error {
        ApiError::new(ErrorCode::InvalidArgument, message).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_lease_is_distinct_from_held_and_unavailable() {
        let stale: Error = ApiError::new(ErrorCode::StaleLease, "gen 7 < 8").into();
        let held: Error = ApiError::new(ErrorCode::LeaseHeld, "held").into();
        let unavailable = Error::Unavailable {
            attempts: 3,
            last: "503".into(),
        };
        assert!(stale.is_stale_lease() && stale.is_lease_gone());
        assert!(!held.is_stale_lease() && !held.is_lease_gone());
        assert!(!unavailable.is_stale_lease() && unavailable.is_unavailable());
        assert_eq!(held.code(), Some(ErrorCode::LeaseHeld));
        assert_eq!(unavailable.code(), None);
    }

    #[test]
    fn every_api_code_round_trips() {
        for code in ErrorCode::ALL {
            let e: Error = ApiError::new(code, "m").into();
            assert_eq!(e.code(), Some(code));
            assert!(e.to_string().starts_with(code.as_str()));
        }
    }
}
