//! Bytes as lower-case hex text and back: peer secrets, body digests and MACs in headers,
//! cluster ids.
//!
//! Imports nothing of the crate.

use std::fmt;

pub fn hex_encode(bytes: &[u8]) -> String {
    use fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(2 * bytes.len()), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

pub fn hex_decode(s: &str) -> Option<Vec<u8>> {
    let pairs = s.as_bytes().chunks_exact(2);
    if !pairs.remainder().is_empty() {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    pairs
        .map(|p| Some(digit(p[0])? << 4 | digit(p[1])?))
        .collect()
}
