//! Reading Rust sources for the layout checks, with `std::fs` only (the checks link
//! nothing of the workspace): the `.rs` files under a folder, and the workspace's crates.
//! It imports nothing of the other files here; both checks import it.

use std::path::{Path, PathBuf};

/// The workspace's root folder (`node/..`).
pub fn workspace_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("node/ has a parent")
        .to_path_buf()
}

/// Every `.rs` file under `dir`, in folders too, sorted.
pub fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    collect_rust_files(dir, &mut out);
    out.sort();
    out
}

fn collect_rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read {dir:?}: {e}"));
    for entry in entries {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            collect_rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The crates of the workspace, as the root `Cargo.toml`'s `members = [...]` names them.
pub fn workspace_members() -> Vec<String> {
    let manifest = std::fs::read_to_string(workspace_dir().join("Cargo.toml"))
        .expect("read the workspace's Cargo.toml");
    let line = manifest
        .lines()
        .find(|l| l.trim_start().starts_with("members"))
        .expect("the workspace's Cargo.toml lists its members on one line");
    let list = line.split_once('[').and_then(|(_, r)| r.split_once(']'));
    list.expect("members = [...]")
        .0
        .split(',')
        .map(|m| m.trim().trim_matches('"').to_owned())
        .filter(|m| !m.is_empty())
        .collect()
}
