//! The node crate's layout (issue 18 item 1), checked from its source: `node/src` is
//! folders by concern whose imports point one way, down the layers that `lib.rs`
//! draws. A new import against the arrows, or a two-way one, fails here with the lines
//! that make it.
//!
//! Reads `node/src` with `std::fs` only (it does not link the server). An import is any
//! `crate::<folder>` in a file, comments included: a doc link is a dependency too.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The folders (and top-level files) from the top layer down. A module may import only
/// those after it; `security`, `telemetry`, `time`, `types` and `fsio` are the lower layers that
/// anyone may use, and they import only each other, downward.
const LAYERS: [&str; 11] = [
    "cli",
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

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read node/src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
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
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
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
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    for file in files {
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

// ---- No import circle among the files of `http` (issue 29 item 3) ----
//
// Inside a folder the layers above do not look: there, each file is a module, and an
// import is any `crate::http::…`, `super::…` or `self::…` path a file names (use lines,
// paths in code, doc links; `{a, b}` groups expanded), plus a `mod x;` declaration (a
// parent names its children). A `super::item` that is no file names the parent file
// (`mod.rs`), so a parent that declares its children cannot also hold what they import.
// Inline modules (`mod tests { … }`, closed by a `}` in column 0) resolve as rustfmt
// writes them; a `#[cfg(test)] mod tests;` file is not counted as imported by its parent.

/// A file's module path from `node/src`: `http/listener/conns.rs` → `http::listener::conns`,
/// `http/mod.rs` → `http`.
fn module_of(rel: &Path) -> Vec<String> {
    let mut segs: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let last = segs.pop().unwrap_or_default();
    match last.strip_suffix(".rs") {
        Some("mod") => {}
        Some(stem) => segs.push(stem.to_owned()),
        None => segs.push(last),
    }
    segs
}

/// The paths a path expression names, from just after its `crate::`/`super::`/`self::`:
/// `a::b`, `a::{b, c::d}` (one list per name; `self` in a group is the group's prefix).
fn read_paths(s: &str) -> Vec<Vec<String>> {
    let mut segs = Vec::new();
    let mut rest = s;
    loop {
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let end = group
                .char_indices()
                .find(|&(_, c)| {
                    depth += match c {
                        '{' => 1,
                        '}' => -1,
                        _ => 0,
                    };
                    depth == 0
                })
                .map_or(group.len(), |(i, _)| i);
            return split_top_level(&group[..end])
                .into_iter()
                .flat_map(|item| read_paths(item.trim()))
                .map(|tail| segs.iter().cloned().chain(tail).collect())
                .collect();
        }
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if end == 0 {
            break;
        }
        if &rest[..end] != "self" {
            segs.push(rest[..end].to_owned());
        }
        match rest[end..].strip_prefix("::") {
            Some(next) => rest = next,
            None => break,
        }
    }
    vec![segs]
}

/// `a, b::{c, d}, e` → its items, commas inside braces kept.
fn split_top_level(s: &str) -> Vec<&str> {
    let (mut items, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&s[start..]);
    items.into_iter().filter(|i| !i.trim().is_empty()).collect()
}

/// The module each line of a file is in: the file's, or an inline `mod x {`'s.
fn line_modules(module: &[String], text: &str) -> Vec<Vec<String>> {
    let mut inline: Option<String> = None;
    let mut out = Vec::new();
    for line in text.lines() {
        let opened = line
            .trim_start_matches("pub ")
            .strip_prefix("mod ")
            .and_then(|r| r.strip_suffix(" {"));
        if let Some(name) = opened.filter(|_| !line.starts_with(' ')) {
            inline = Some(name.to_owned());
        }
        let mut here = module.to_vec();
        here.extend(inline.clone());
        out.push(here);
        if line == "}" {
            inline = None;
        }
    }
    out
}

/// Every absolute module path `text` names, with its 1-based line: `crate::…`,
/// `super::…` (each `super` one level up from the line's module), `self::…`, and the
/// children of `mod x;`.
fn named_modules(module: &[String], text: &str) -> Vec<(usize, Vec<String>)> {
    let lines = line_modules(module, text);
    let mut out = Vec::new();
    let mut after_cfg_test = false;
    for (n, line) in text.lines().enumerate() {
        let here = &lines[n];
        // A `#[cfg(test)] mod tests;` imports its parent, as tests do; it is no part of
        // what the parent is built from.
        let is_test = std::mem::replace(&mut after_cfg_test, line.trim() == "#[cfg(test)]");
        if is_test {
            continue;
        }
        let decl = line
            .trim_start()
            .trim_start_matches("pub(crate) ")
            .trim_start_matches("pub ");
        if let Some(child) = decl.strip_prefix("mod ").and_then(|r| r.strip_suffix(';')) {
            out.push((n + 1, [here.clone(), vec![child.to_owned()]].concat()));
        }
    }
    for prefix in ["crate::", "super::", "self::"] {
        for (at, _) in text.match_indices(prefix) {
            let before = text[..at].chars().next_back();
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || "_$:".contains(c)) {
                continue;
            }
            let n = text[..at].matches('\n').count();
            for segs in read_paths(&text[at + prefix.len()..]) {
                let abs = match prefix {
                    "crate::" => segs,
                    "self::" => [lines[n].clone(), segs].concat(),
                    _ => {
                        let ups = 1 + segs.iter().take_while(|s| *s == "super").count();
                        let base = &lines[n][..lines[n].len().saturating_sub(ups)];
                        [base.to_vec(), segs[ups - 1..].to_vec()].concat()
                    }
                };
                out.push((n + 1, abs));
            }
        }
    }
    out
}

/// `(from, to)` file modules → the `file:line: text` of each import.
type FileImports = BTreeMap<(String, String), Vec<String>>;

/// Who imports whom among the files under `node/src/<folder>`, as `(rel path, text)`.
fn folder_imports(folder: &str, files: &[(PathBuf, String)]) -> FileImports {
    let modules: BTreeSet<Vec<String>> = files.iter().map(|(p, _)| module_of(p)).collect();
    let mut imports = FileImports::new();
    for (rel, text) in files {
        let from = module_of(rel);
        let lines: Vec<&str> = text.lines().collect();
        for (n, abs) in named_modules(&from, text) {
            if abs.first().map(String::as_str) != Some(folder) {
                continue;
            }
            let to = (1..=abs.len())
                .rev()
                .map(|k| abs[..k].to_vec())
                .find(|p| modules.contains(p));
            let Some(to) = to.filter(|t| *t != from) else {
                continue;
            };
            let at = format!("{}:{n}: {}", rel.display(), lines[n - 1].trim());
            let seen = imports.entry((from.join("::"), to.join("::"))).or_default();
            if !seen.contains(&at) {
                seen.push(at);
            }
        }
    }
    imports
}

/// The import circles: each set of files that reach each other, with the imports
/// between them.
fn circles(imports: &FileImports) -> Vec<String> {
    let mut next: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (from, to) in imports.keys() {
        next.entry(from).or_default().insert(to);
    }
    let reach = |start: &str| {
        let (mut seen, mut todo) = (BTreeSet::new(), vec![start]);
        while let Some(m) = todo.pop() {
            for n in next.get(m).into_iter().flatten() {
                if seen.insert(*n) {
                    todo.push(n);
                }
            }
        }
        seen
    };
    let mut reported = BTreeSet::new();
    let mut out = Vec::new();
    for m in next.keys() {
        let from_m = reach(m);
        let circle: BTreeSet<&str> = from_m
            .iter()
            .copied()
            .filter(|n| reach(n).contains(m))
            .collect();
        if circle.is_empty() || !reported.insert(circle.clone()) {
            continue;
        }
        let lines: Vec<String> = imports
            .iter()
            .filter(|((f, t), _)| circle.contains(f.as_str()) && circle.contains(t.as_str()))
            .flat_map(|((f, t), ls)| ls.iter().map(move |l| format!("{f} -> {t}: {l}")))
            .collect();
        out.push(format!("{circle:?}:\n    {}", lines.join("\n    ")));
    }
    out
}

fn http_files() -> Vec<(PathBuf, String)> {
    let src = src_dir();
    let mut files = Vec::new();
    rust_files(&src.join("http"), &mut files);
    files.sort();
    files
        .into_iter()
        .map(|f| {
            let text = std::fs::read_to_string(&f).expect("read a source file");
            (f.strip_prefix(&src).unwrap().to_path_buf(), text)
        })
        .collect()
}

#[test]
fn no_import_circle_among_the_files_of_http() {
    let imports = folder_imports("http", &http_files());
    // A scan that finds nothing would pass.
    for (from, to) in [
        ("http::router", "http::jobs"),
        ("http::jobs", "http::routes"),
    ] {
        assert!(
            imports.contains_key(&(from.to_owned(), to.to_owned())),
            "{from} -> {to} not seen: {:#?}",
            imports.keys()
        );
    }
    let found = circles(&imports);
    assert!(
        found.is_empty(),
        "import circles among the files of node/src/http: move the item down to the file \
         both can import, or pass it in\n{}",
        found.join("\n")
    );
}

#[test]
fn an_import_circle_is_found_with_its_lines() {
    let file = |p: &str, t: &str| (PathBuf::from(p), t.to_owned());
    let files = [
        file("http/mod.rs", "//! x\nmod a;\nmod b;\npub fn helper() {}\n"),
        file("http/a.rs", "use super::b::{self, B};\n"),
        file(
            "http/b.rs",
            "use super::helper;\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n",
        ),
        file("http/c.rs", "use crate::http::{a, b::B};\n"),
    ];
    let imports = folder_imports("http", &files);
    let found = circles(&imports);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(found[0].contains("http::b -> http: http/b.rs:1: use super::helper;"));
    assert!(found[0].contains("http -> http::a: http/mod.rs:2: mod a;"));
    assert!(!found[0].contains("http::c"), "c is imported by no one");
    assert!(imports.contains_key(&("http::c".to_owned(), "http::b".to_owned())));
    assert_eq!(
        read_paths("super::{x, y::{z, self}}"),
        [
            vec!["super", "x"],
            vec!["super", "y", "z"],
            vec!["super", "y"]
        ]
    );
}
