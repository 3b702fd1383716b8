//! The one hash every replica computes the same way: FNV-1a, fixed by its specification
//! (command fingerprints, snapshot digests). Imports nothing.

/// 64-bit FNV-1a: small, fixed by its specification, the same on every replica.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}
