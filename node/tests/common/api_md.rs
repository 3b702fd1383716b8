//! The served part of `docs/api.md`, as the reference checks read it: node/tests/docs_api.rs
//! (routes, codes, operations) and cli/tests/cli/docs_api.rs (`serve` and `dev` flags).
//!
//! May import: std.

use std::path::Path;

/// The served part of `docs/api.md`.
pub fn reference() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/api.md");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let end = text
        .find("\n## Version 1.1")
        .expect("docs/api.md has its \"Version 1.1 (planned)\" heading");
    text[..end].to_owned()
}
