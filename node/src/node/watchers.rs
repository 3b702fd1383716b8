//! The open watchers of this node's event feed (`GET /v1/events` streams and waiting
//! long polls), bounded by `serve --max-watchers` ([`Watchers`]): each holds a permit
//! for as long as it is open, and `/metrics` reports how many are
//! (`leasehold_event_watchers`). Imports nothing of the crate.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Default of `serve --max-watchers`.
pub const MAX_WATCHERS_DEFAULT: usize = 1000;

/// The watcher budget of a node.
#[derive(Debug, Clone)]
pub struct Watchers {
    permits: Arc<Semaphore>,
    max: usize,
}

/// One open watcher: dropped when it ends.
#[derive(Debug)]
pub struct Watcher {
    _permit: OwnedSemaphorePermit,
}

impl Watchers {
    pub fn new(max: usize) -> Watchers {
        Watchers {
            permits: Arc::new(Semaphore::new(max)),
            max,
        }
    }

    /// A watcher, or `None` when `max` are open already.
    pub fn open(&self) -> Option<Watcher> {
        let permit = self.permits.clone().try_acquire_owned().ok()?;
        Some(Watcher { _permit: permit })
    }

    /// Watchers open now.
    pub fn count(&self) -> usize {
        self.max - self.permits.available_permits()
    }

    pub fn max(&self) -> usize {
        self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watchers_are_bounded_and_counted_until_dropped() {
        let w = Watchers::new(2);
        let a = w.open().unwrap();
        let _b = w.open().unwrap();
        assert!(w.open().is_none());
        assert_eq!(w.count(), 2);
        drop(a);
        assert_eq!(w.count(), 1);
        assert!(w.open().is_some());
    }
}
