//! Tenant scopes on the node (issue 17 item 7, issue 30). The scope itself — its
//! patterns, what it holds, how a command is checked against it — is the state
//! machine's (`leasehold_statemachine::tenant`), because a scoped command is decided
//! where it is applied; it is re-exported here for the auth file and the HTTP glue
//! (`http::client_auth`). What stays here is what only a node does: a scoped list's
//! pages and their sealed page tokens ([`PageKey`]), and the per-token namespace of
//! idempotency keys ([`key_scope`]).
//!
//! May import: the state machine crate (types, limits, tenant scopes), `sha2`, `aes`.
//! No IO, no clock.

use aes::cipher::{generic_array::GenericArray, BlockDecrypt, BlockEncrypt, KeyInit};
use aes::Aes128;
#[cfg(test)]
use leasehold_statemachine::commands::Submit;
use leasehold_statemachine::{ApiError, ErrorCode, JobPage, JobState, LeaseMachine};
use sha2::{Digest, Sha256};

pub use leasehold_statemachine::tenant::{
    BadQueuePattern, OutOfScope, QueuePattern, Scope, QUEUE_PATTERNS_MAX, QUEUE_WILDCARD,
};

/// Most jobs a scoped list looks at for one page (it skips the jobs the token does not
/// hold): past it, the page is returned short, with the token to continue from.
pub const LIST_SCAN_JOBS_MAX: usize = 10_000;
/// Hex characters of a token's idempotency scope (of SHA-256 over the token's digest).
pub const KEY_SCOPE_HEX_LEN: usize = 16;
/// Hex characters of a sealed page token: one AES block.
pub const SEALED_TOKEN_HEX_LEN: usize = 32;

/// The key a scoped token's page tokens are sealed with: AES-128, derived from the
/// token's digest, so it is the same on every node given the same auth file, and a page
/// token works only for the token it was given to. An unscoped list's page token is the
/// position in the whole list (a job's creation handle); sealed, a tenant cannot count
/// the jobs other tenants created between its own.
#[derive(Clone, PartialEq, Eq)]
pub struct PageKey([u8; 16]);

impl std::fmt::Debug for PageKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PageKey(..)")
    }
}

/// What a sealed block holds after the handle: a forged or foreign token decrypts to
/// anything else (a chance of 2^-64).
const SEAL_TAG: [u8; 8] = *b"lh-page1";

impl PageKey {
    pub fn of_token(token_digest: &[u8; 32]) -> PageKey {
        let mut h = Sha256::new();
        h.update(b"leasehold page tokens v1\0");
        h.update(token_digest);
        let key = h.finalize();
        PageKey(key[..16].try_into().expect("16 of 32 bytes"))
    }

    fn cipher(&self) -> Aes128 {
        Aes128::new(GenericArray::from_slice(&self.0))
    }

    /// The machine's page token (a hex handle) as the caller sees it.
    pub fn seal(&self, handle: u64) -> String {
        let mut block = [0u8; 16];
        block[..8].copy_from_slice(&handle.to_be_bytes());
        block[8..].copy_from_slice(&SEAL_TAG);
        let mut b = GenericArray::from(block);
        self.cipher().encrypt_block(&mut b);
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    /// A page token this key sealed, as the handle it stands for; 400 for any other.
    pub fn unseal(&self, token: &str) -> Result<u64, ApiError> {
        let bad = || {
            let msg = format!("bad page_token {token:?}: not one this token was given");
            ApiError::new(ErrorCode::InvalidArgument, msg)
        };
        if token.len() != SEALED_TOKEN_HEX_LEN || !token.is_ascii() {
            return Err(bad());
        }
        let mut block = [0u8; 16];
        for (i, b) in block.iter_mut().enumerate() {
            *b = u8::from_str_radix(&token[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        let mut b = GenericArray::from(block);
        self.cipher().decrypt_block(&mut b);
        if b[8..] != SEAL_TAG {
            return Err(bad());
        }
        Ok(u64::from_be_bytes(b[..8].try_into().expect("8 bytes")))
    }
}

/// A scoped list: the scope its jobs are filtered by and the key of its page tokens.
#[derive(Debug, Clone)]
pub struct ScopedList {
    pub scope: Scope,
    pub page_key: PageKey,
}

/// One page of `GET /v1/jobs` holding only the jobs `scope` holds. Pages of the whole
/// list are read and filtered until `limit` jobs are found, the list ends, or
/// [`LIST_SCAN_JOBS_MAX`] jobs were looked at; the returned `next_page_token` continues
/// right after the last job looked at, so paging visits every held job once. A page may
/// so be short (even empty) and still have a next page. Page tokens are sealed with the
/// caller's [`PageKey`].
pub fn list_in_scope(
    machine: &LeaseMachine,
    list: &ScopedList,
    queue: Option<&str>,
    state: Option<JobState>,
    limit: usize,
    page_token: Option<&str>,
    now_ms: u64,
) -> Result<JobPage, ApiError> {
    let mut token = match page_token {
        Some(t) => Some(format!("{:x}", list.page_key.unseal(t)?)),
        None => None,
    };
    let mut jobs = Vec::new();
    let mut scanned = 0;
    loop {
        let page = machine.list(queue, state, limit - jobs.len(), token.as_deref(), now_ms)?;
        scanned += page.jobs.len();
        jobs.extend(
            page.jobs
                .into_iter()
                .filter(|j| list.scope.holds(&j.id, &j.queue)),
        );
        token = page.next_page_token;
        // A page with a next token is full (at least one job), so `scanned` grows.
        if jobs.len() == limit || token.is_none() || scanned >= LIST_SCAN_JOBS_MAX {
            let next_page_token = token.map(|t| seal_hex(&list.page_key, &t)).transpose()?;
            return Ok(JobPage {
                jobs,
                next_page_token,
            });
        }
    }
}

/// The machine's hex page token, sealed.
fn seal_hex(key: &PageKey, token: &str) -> Result<String, ApiError> {
    let handle = u64::from_str_radix(token, 16).map_err(|_| {
        ApiError::new(
            ErrorCode::Internal,
            format!("unexpected page token {token:?}"),
        )
    })?;
    Ok(key.seal(handle))
}

/// A token's idempotency scope: the first [`KEY_SCOPE_HEX_LEN`] hex characters of
/// SHA-256 over the token's own SHA-256 digest. The same on every node given the same
/// auth file; it tells nothing about the token (a hash of a hash).
pub fn key_scope(token_digest: &[u8; 32]) -> String {
    let h = Sha256::digest(token_digest);
    let hex: String = h.iter().map(|b| format!("{b:02x}")).collect();
    hex[..KEY_SCOPE_HEX_LEN].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_statemachine::{limits, Command, Entry};

    fn scope(queues: Option<&[&str]>, prefix: Option<&str>) -> Scope {
        Scope {
            queues: queues.map(|qs| qs.iter().map(|q| QueuePattern::parse(q).unwrap()).collect()),
            job_prefix: prefix.map(Into::into),
        }
    }

    fn machine_with(jobs: &[(&str, &str)]) -> LeaseMachine {
        let mut m = LeaseMachine::default();
        for (i, (id, queue)) in jobs.iter().enumerate() {
            let cmd = Command::Submit(Submit {
                id: Some((*id).into()),
                queue: (*queue).into(),
                payload: None,
                max_attempts: None,
            });
            let entry = Entry {
                stamp_ms: 1,
                term: 1,
                idempotency_key: None,
                command: cmd,
            };
            m.apply(i as u64 + 1, &entry).unwrap();
        }
        m
    }

    /// Pages through a scoped list, returning the ids seen and the page count.
    fn scoped(scope: Scope) -> ScopedList {
        ScopedList {
            scope,
            page_key: PageKey::of_token(&[1; 32]),
        }
    }

    fn page_all(m: &LeaseMachine, s: &Scope, limit: usize) -> (Vec<String>, usize) {
        let (mut ids, mut pages, mut token) = (Vec::new(), 0, None::<String>);
        let list = scoped(s.clone());
        loop {
            let page = list_in_scope(m, &list, None, None, limit, token.as_deref(), 1).unwrap();
            assert!(page.jobs.len() <= limit);
            ids.extend(page.jobs.into_iter().map(|j| j.id));
            pages += 1;
            match page.next_page_token {
                None => return (ids, pages),
                t => token = t,
            }
        }
    }

    #[test]
    fn a_scoped_list_pages_through_held_jobs_only() {
        let mut jobs = Vec::new();
        for i in 0..25 {
            jobs.push((format!("a/{i}"), "team-a"));
            jobs.push((format!("b/{i}"), "team-b"));
            jobs.push((format!("b/{i}x"), "team-b"));
        }
        let refs: Vec<(&str, &str)> = jobs.iter().map(|(i, q)| (i.as_str(), *q)).collect();
        let m = machine_with(&refs);
        let a = scope(Some(&["team-a"]), None);
        let (ids, pages) = page_all(&m, &a, 10);
        let want: Vec<String> = (0..25).map(|i| format!("a/{i}")).collect();
        assert_eq!(ids, want);
        assert_eq!(pages, 3, "full pages of held jobs: 10, 10, 5");
        let none = scope(Some(&["team-c"]), None);
        assert_eq!(page_all(&m, &none, 10).0, Vec::<String>::new());
        let b = scope(None, Some("b/"));
        assert_eq!(page_all(&m, &b, 7).0.len(), 50);
    }

    /// A sealed page token stands for its handle under its own key only; it does not
    /// show the handle, and a changed or foreign token is refused.
    #[test]
    fn page_tokens_are_sealed_per_token() {
        let (a, b) = (PageKey::of_token(&[1; 32]), PageKey::of_token(&[2; 32]));
        for handle in [0, 1, 2, 41, u64::MAX] {
            let t = a.seal(handle);
            assert_eq!(t.len(), SEALED_TOKEN_HEX_LEN);
            assert_eq!(a.unseal(&t).unwrap(), handle);
            assert!(!t.contains(&format!("{handle:x}")) || handle < 16);
            assert_eq!(b.unseal(&t).unwrap_err().code, ErrorCode::InvalidArgument);
            let mut changed = t.clone().into_bytes();
            changed[5] = if changed[5] == b'0' { b'1' } else { b'0' };
            let changed = String::from_utf8(changed).unwrap();
            assert!(a.unseal(&changed).is_err(), "{changed}");
        }
        assert_ne!(a.seal(1), b.seal(1));
        for bad in ["", "1f", "zz", &"0".repeat(32), &"é".repeat(16)] {
            assert!(a.unseal(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn idempotency_keys_are_scoped_with_one_space() {
        let s = key_scope(&[7; 32]);
        assert_eq!(s.len(), KEY_SCOPE_HEX_LEN);
        assert!(s.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(s, key_scope(&[7; 32]), "stable");
        assert_ne!(s, key_scope(&[8; 32]));
        // The format itself is the state machine's (`limits::scoped_idempotency_key`).
        let scoped = limits::scoped_idempotency_key(&s, "K-1").unwrap();
        assert_eq!(scoped, format!("{s} K-1"));
    }
}
