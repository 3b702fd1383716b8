//! The retry decisions, as pure functions: what an attempt's result means (`judge`),
//! which node to try next (`Rotation`), and how long to wait first (`backoff`).
//! `transport` executes them; the tests here check them directly.
//!
//! Rotation is in passes over the endpoints. Within a pass the next untried endpoint is
//! tried at once — a dead node says nothing about the others — and the leader hint, when
//! it names a node this client knows, is tried first, but only once per pass: a stale hint
//! (every follower still naming a dead leader) must not pin the client to a dead node.
//! Only between passes does the client wait: jittered exponential backoff, and at least
//! the largest `Retry-After` of the pass (docs/api.md: 503 → "retry after Retry-After").

use std::time::Duration;

/// Bounds of a call's retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts per call, the first included.
    pub max_attempts: u32,
    /// Backoff before the second pass; doubles per pass up to `backoff_max`.
    pub backoff_base: Duration,
    pub backoff_max: Duration,
    /// `Retry-After` is honoured up to this long (a misconfigured node must not stall us).
    pub retry_after_max: Duration,
}

impl Default for RetryPolicy {
    /// Eight attempts: with three nodes, at least two full passes. Backoff starts at 50 ms
    /// and is capped at 2 s, so a call rides out a typical election (about a second with
    /// the node's default election timeout of 0.5–1 s) without giving up.
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 8,
            backoff_base: Duration::from_millis(50),
            backoff_max: Duration::from_secs(2),
            retry_after_max: Duration::from_secs(5),
        }
    }
}

/// What one attempt came to, as far as retrying is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// The node answered with this status (`Retry-After` parsed when present).
    Answered {
        status: u16,
        retry_after: Option<Duration>,
    },
    /// The connection could not be made: the request never left.
    NotSent,
    /// The request was (or may have been) sent and no full answer came back: a timeout,
    /// a reset, a body cut off.
    Lost,
}

/// The decision about an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The answer is final: hand it to the caller.
    Final,
    /// Try again, elsewhere. `maybe_applied`: this attempt may have taken effect (a
    /// write then ends as "outcome unknown", not "unavailable", if retries run out).
    Retry {
        maybe_applied: bool,
        retry_after: Option<Duration>,
    },
}

/// docs/api.md's availability errors: 503 (not applied; retry after `Retry-After`) and 504
/// (proposed, outcome unknown; retry with the same key). A 502 can only come from
/// something between us and the node, which may have passed the request on: unknown too.
pub(crate) fn judge(attempt: Attempt) -> Verdict {
    match attempt {
        Attempt::Answered {
            status: 503,
            retry_after,
        } => Verdict::Retry {
            maybe_applied: false,
            retry_after,
        },
        Attempt::Answered {
            status: 502 | 504, ..
        } => Verdict::Retry {
            maybe_applied: true,
            retry_after: None,
        },
        Attempt::Answered { .. } => Verdict::Final,
        Attempt::NotSent => Verdict::Retry {
            maybe_applied: false,
            retry_after: None,
        },
        Attempt::Lost => Verdict::Retry {
            maybe_applied: true,
            retry_after: None,
        },
    }
}

/// The wait before pass `pass` (1 = the second pass): `base × 2^(pass−1)` capped at
/// `backoff_max`, with "equal jitter" — half fixed, half random (`jitter` in `[0, 1)`) —
/// so clients that failed together do not retry together, yet none retries at once. At
/// least `retry_after` (capped at `retry_after_max`).
pub(crate) fn backoff(
    policy: &RetryPolicy,
    pass: u32,
    retry_after: Option<Duration>,
    jitter: f64,
) -> Duration {
    let doublings = pass.saturating_sub(1).min(20);
    let exp = policy
        .backoff_base
        .saturating_mul(1u32 << doublings)
        .min(policy.backoff_max);
    let jittered = exp / 2 + exp.mul_f64(jitter.clamp(0.0, 1.0) / 2.0);
    let floor = retry_after.map_or(Duration::ZERO, |r| r.min(policy.retry_after_max));
    jittered.max(floor)
}

/// Which endpoint to try next, pass by pass.
#[derive(Debug, Clone)]
pub(crate) struct Rotation {
    tried: Vec<bool>,
    current: usize,
    pass: u32,
}

/// Where the next attempt goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Next {
    pub endpoint: usize,
    /// The previous pass tried every endpoint: back off before this attempt.
    pub new_pass: bool,
}

impl Rotation {
    /// Starts at `first` (the endpoint that last answered, or the known leader).
    pub fn new(endpoints: usize, first: usize) -> Rotation {
        assert!(endpoints > 0, "a client has at least one endpoint");
        let mut tried = vec![false; endpoints];
        let current = first % endpoints;
        tried[current] = true;
        Rotation {
            tried,
            current,
            pass: 0,
        }
    }

    pub fn current(&self) -> usize {
        self.current
    }

    /// How many full passes have been completed before the current attempt.
    pub fn pass(&self) -> u32 {
        self.pass
    }

    /// After a failed attempt: the hinted endpoint if untried in this pass, else the next
    /// untried one after the current; when all were tried, a new pass starts (at the hint
    /// if any, else after the current one).
    pub fn advance(&mut self, hint: Option<usize>) -> Next {
        let n = self.tried.len();
        let hint = hint.filter(|h| *h < n);
        let untried = |t: &Vec<bool>, i: usize| !t[i];
        let pick = hint.filter(|h| untried(&self.tried, *h)).or_else(|| {
            (1..n)
                .map(|k| (self.current + k) % n)
                .find(|i| untried(&self.tried, *i))
        });
        let (endpoint, new_pass) = match pick {
            Some(i) => (i, false),
            None => {
                self.tried.iter_mut().for_each(|t| *t = false);
                self.pass += 1;
                (hint.unwrap_or((self.current + 1) % n), true)
            }
        };
        self.tried[endpoint] = true;
        self.current = endpoint;
        Next { endpoint, new_pass }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn availability_errors_retry_and_others_are_final() {
        let answered = |status| Attempt::Answered {
            status,
            retry_after: None,
        };
        assert_eq!(
            judge(Attempt::Answered {
                status: 503,
                retry_after: Some(ms(1000))
            }),
            Verdict::Retry {
                maybe_applied: false,
                retry_after: Some(ms(1000))
            }
        );
        assert!(matches!(
            judge(answered(504)),
            Verdict::Retry {
                maybe_applied: true,
                ..
            }
        ));
        for status in [200, 201, 204, 400, 404, 409, 413, 422, 500] {
            assert_eq!(judge(answered(status)), Verdict::Final, "{status}");
        }
        assert!(matches!(
            judge(Attempt::NotSent),
            Verdict::Retry {
                maybe_applied: false,
                ..
            }
        ));
        assert!(matches!(
            judge(Attempt::Lost),
            Verdict::Retry {
                maybe_applied: true,
                ..
            }
        ));
    }

    #[test]
    fn backoff_doubles_up_to_the_cap_with_bounded_jitter() {
        let p = RetryPolicy::default();
        for (pass, exp) in [(1, 50), (2, 100), (3, 200), (4, 400), (7, 2000), (60, 2000)] {
            let lo = backoff(&p, pass, None, 0.0);
            let hi = backoff(&p, pass, None, 0.999_999);
            assert_eq!(lo, ms(exp) / 2, "pass {pass}");
            assert!(
                hi <= ms(exp) && hi > ms(exp) * 9 / 10,
                "pass {pass}: {hi:?}"
            );
        }
    }

    #[test]
    fn retry_after_is_a_floor_and_is_capped() {
        let p = RetryPolicy::default();
        assert_eq!(backoff(&p, 1, Some(ms(1000)), 0.5), ms(1000));
        assert_eq!(backoff(&p, 1, Some(ms(60_000)), 0.5), p.retry_after_max);
        // A short Retry-After does not shorten the backoff.
        assert_eq!(backoff(&p, 7, Some(ms(1)), 0.0), ms(1000));
    }

    #[test]
    fn rotation_visits_every_endpoint_once_per_pass() {
        let mut r = Rotation::new(3, 1);
        assert_eq!(r.current(), 1);
        let a = r.advance(None);
        let b = r.advance(None);
        assert_eq!((a.endpoint, a.new_pass), (2, false));
        assert_eq!((b.endpoint, b.new_pass), (0, false));
        let c = r.advance(None);
        assert_eq!((c.endpoint, c.new_pass), (1, true));
        assert_eq!(r.pass(), 1);
    }

    #[test]
    fn a_hint_is_followed_once_per_pass() {
        let mut r = Rotation::new(3, 0);
        // Node 0 says the leader is endpoint 2: go there next.
        assert_eq!(r.advance(Some(2)).endpoint, 2);
        // 2 is dead and 0 said 2 again: the hint was used, try 1.
        assert_eq!(r.advance(Some(2)).endpoint, 1);
        // All tried: a new pass starts at the hint.
        assert_eq!(
            r.advance(Some(2)),
            Next {
                endpoint: 2,
                new_pass: true
            }
        );
    }

    #[test]
    fn a_single_endpoint_is_retried_in_new_passes() {
        let mut r = Rotation::new(1, 5);
        assert_eq!(r.current(), 0);
        assert_eq!(
            r.advance(None),
            Next {
                endpoint: 0,
                new_pass: true
            }
        );
        assert_eq!(r.advance(Some(9)).endpoint, 0, "an unknown hint is ignored");
    }
}
