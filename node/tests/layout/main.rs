//! The node crate's layout (issue 18 item 1), checked from its source: `node/src` is
//! folders by concern whose imports point one way, down the layers that `lib.rs`
//! draws. A new import against the arrows, or a two-way one, fails here with the lines
//! that make it.
//!
//! Reads `node/src` with `std::fs` only (it does not link the server). An import is any
//! `crate::<folder>` in a file, comments included: a doc link is a dependency too.
//!
//! Here: the folders' layers. [`circles`]: no import circle among the files of any crate
//! (issue 45 item 7). [`reads`]: client reads go through the viewer (issue 45 item 3).
//! [`files`]: reading the sources, for all of them.

mod circles;
mod files;
mod reads;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use files::rust_files;

/// The folders (and top-level files) from the top layer down. A module may import only
/// those after it; `security`, `telemetry`, `time`, `types` and `fsio` are the lower layers that
/// anyone may use, and they import only each other, downward.
const LAYERS: [&str; 10] = [
    "server",
    "http",
    "node",
    "raft",
    "store",
    "security",
    "telemetry",
    "time",
    "types",
    "fsio",
];
/// Top-level modules outside the layering: fuzz entry points may import anything they
/// fuzz, and nothing imports them.
const FREE: [&str; 1] = ["fuzzing"];

/// `(from, to)` → the `file:line: text` of every line where `from` names `crate::to`.
type Imports = BTreeMap<(String, String), Vec<String>>;

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The top-level module a file belongs to (`http/listener/conns.rs` → `http`); `None`
/// for the crate root and the binary.
fn top_module(rel: &Path) -> Option<String> {
    let first = rel.components().next()?.as_os_str().to_str()?.to_owned();
    match first.strip_suffix(".rs") {
        Some("lib") | Some("main") => None,
        Some(file) => Some(file.to_owned()),
        None => Some(first),
    }
}

/// Every `crate::NAME` on `line`, NAME being a lowercase identifier.
fn crate_paths(line: &str) -> Vec<&str> {
    line.match_indices("crate::")
        // Not the tail of another name (`my_crate::`) or a macro's `$crate::`.
        .filter(|(i, _)| {
            *i == 0 || {
                let before = line.as_bytes()[i - 1];
                !(before.is_ascii_alphanumeric() || before == b'_' || before == b'$')
            }
        })
        .map(|(i, m)| {
            let rest = &line[i + m.len()..];
            let end = rest
                .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .filter(|name| !name.is_empty())
        .collect()
}

/// The crate's top-level modules and who imports whom.
fn scan() -> (BTreeSet<String>, Imports) {
    let src = src_dir();
    let files = rust_files(&src);
    let tops: BTreeSet<String> = files
        .iter()
        .filter_map(|f| top_module(f.strip_prefix(&src).unwrap()))
        .collect();
    let mut imports = Imports::new();
    for file in &files {
        let rel = file.strip_prefix(&src).unwrap();
        let Some(from) = top_module(rel) else {
            continue;
        };
        let text = std::fs::read_to_string(file).expect("read a source file");
        for (n, line) in text.lines().enumerate() {
            for to in crate_paths(line) {
                if to != from && tops.contains(to) {
                    imports
                        .entry((from.clone(), to.to_owned()))
                        .or_default()
                        .push(format!("{}:{}: {}", rel.display(), n + 1, line.trim()));
                }
            }
        }
    }
    (tops, imports)
}

fn rank(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| *l == module)
}

#[test]
fn the_scan_sees_the_crate() {
    let (tops, imports) = scan();
    for layer in LAYERS.iter().chain(FREE.iter()) {
        assert!(tops.contains(*layer), "node/src has no module {layer}");
    }
    // A scan that finds nothing would pass every test below.
    assert!(imports.contains_key(&("http".to_owned(), "node".to_owned())));
    assert!(imports.contains_key(&("server".to_owned(), "raft".to_owned())));
}

#[test]
fn every_top_level_module_has_a_layer() {
    let (tops, _) = scan();
    for top in &tops {
        assert!(
            rank(top).is_some() || FREE.contains(&top.as_str()),
            "node/src/{top}: a new top-level module; put it in a folder, or give it a \
             place in LAYERS here and in lib.rs's layout"
        );
    }
}

#[test]
fn no_two_way_imports_between_folders() {
    let (_, imports) = scan();
    let mut cycles = Vec::new();
    for ((a, b), lines) in &imports {
        if a < b {
            if let Some(back) = imports.get(&(b.clone(), a.clone())) {
                cycles.push(format!(
                    "{a} <-> {b}:\n    {}\n    {}",
                    lines.join("\n    "),
                    back.join("\n    ")
                ));
            }
        }
    }
    assert!(
        cycles.is_empty(),
        "two-way imports between folders: move the item to the layer that owns it, or \
         pass a handle down\n{}",
        cycles.join("\n")
    );
}

#[test]
fn imports_point_down_the_layers() {
    let (_, imports) = scan();
    let mut upward = Vec::new();
    for ((from, to), lines) in &imports {
        if FREE.contains(&from.as_str()) {
            continue;
        }
        let ok = match (rank(from), rank(to)) {
            (Some(f), Some(t)) => f < t,
            _ => false,
        };
        if !ok {
            upward.push(format!("{from} -> {to}:\n    {}", lines.join("\n    ")));
        }
    }
    assert!(
        upward.is_empty(),
        "imports against the arrows (layers, top first: {LAYERS:?}):\n{}",
        upward.join("\n")
    );
}

#[test]
fn every_module_opens_with_a_doc_paragraph() {
    let src = src_dir();
    for file in rust_files(&src) {
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(
            text.starts_with("//!"),
            "{}: say in a `//!` paragraph what lives here and what it may import",
            file.strip_prefix(&src).unwrap().display()
        );
    }
}

#[test]
fn crate_paths_are_read_as_written() {
    assert_eq!(
        crate_paths("use crate::node::{Limits, Node}; crate::types::NodeId"),
        ["node", "types"]
    );
    assert_eq!(crate_paths("my_crate::x $crate::y"), Vec::<&str>::new());
    assert_eq!(crate_paths("[`crate::raft::join`]"), ["raft"]);
}
