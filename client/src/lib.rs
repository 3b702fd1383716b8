//! Leasehold client (built out in the client issue).
