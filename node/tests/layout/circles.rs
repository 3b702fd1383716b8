//! No import circle among the files of any crate (issue 29 item 3 for `node/src/http`,
//! issue 45 item 7 for every crate of the workspace): each file is a module, and a circle
//! fails with the lines that make it. It imports [`crate::files`] only.
//!
//! An import is any `crate::…`, `super::…` or `self::…` path a file names (use lines,
//! paths in code, doc links; `{a, b}` groups expanded), a path that starts with a child
//! module the file declares (`child::…`), and a `mod x;` declaration (a parent names its
//! children). A `super::item` that is no file names the parent file (`mod.rs`), so a
//! parent that declares its children cannot also hold what they import. Inline modules
//! (`mod tests { … }`, closed by a `}` in column 0) resolve as rustfmt writes them; a
//! `#[cfg(test)] mod tests;` file is not counted as imported by its parent.
//!
//! A crate root (`lib.rs`, a test target's file) is the crate's table of contents: its
//! `mod x;` lines and `pub use` re-exports are not imports, and `crate::Name` through a
//! re-export names the file the item lives in. What the root holds itself counts as any
//! file's does. Each crate is read as `src/` (its binaries, one file each, aside) and as
//! each test target in `tests/` with the helper folders it declares (`tests/common/`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::files::{rust_files, workspace_dir, workspace_members};

/// Crates whose files are not checked yet (none: every crate is, its old circles listed
/// below).
const CRATES_NOT_YET_CHECKED: [&str; 0] = [];

/// The circles that were there when this check came (issue 45 item 7) and are not broken
/// yet, each as its tree and its files: none left. Any circle fails, and so does a listed
/// one that is gone or has changed: the list only shrinks.
const CIRCLES_NOT_YET_BROKEN: &[&str] = &[];

/// One file of a crate: where it is (as shown in a failure), its module path from the
/// crate root (`[]` for the root), and its text.
struct Source {
    shown: String,
    module: Vec<String>,
    text: String,
}

/// A file's module path from its crate's folder: `http/listener/conns.rs` →
/// `http::listener::conns`, `http/mod.rs` → `http`, `lib.rs` and `main.rs` → the root.
fn module_of(rel: &Path) -> Vec<String> {
    let mut segs: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let last = segs.pop().unwrap_or_default();
    match last.strip_suffix(".rs") {
        Some("mod") => {}
        Some("lib" | "main") if segs.is_empty() => {}
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

/// The child modules a file declares with `mod x;`, with their 1-based lines; a
/// `#[cfg(test)] mod tests;` imports its parent, as tests do, and is no part of what
/// the parent is built from, so it is left out.
fn declared_children(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut after_cfg_test = false;
    for (n, line) in text.lines().enumerate() {
        let is_test = std::mem::replace(&mut after_cfg_test, line.trim() == "#[cfg(test)]");
        let decl = line
            .trim_start()
            .trim_start_matches("pub(crate) ")
            .trim_start_matches("pub ");
        let child = decl.strip_prefix("mod ").and_then(|r| r.strip_suffix(';'));
        if let Some(child) = child.filter(|_| !is_test) {
            out.push((n + 1, child.to_owned()));
        }
    }
    out
}

/// Every absolute module path `text` names, with its 1-based line: the children of
/// `mod x;`, `crate::…`, `super::…` (each `super` one level up from the line's module),
/// `self::…`, and `x::…` for a declared child `x`.
fn named_modules(module: &[String], text: &str) -> Vec<(usize, Vec<String>)> {
    let lines = line_modules(module, text);
    let children = declared_children(text);
    let mut out: Vec<(usize, Vec<String>)> = children
        .iter()
        .map(|(n, child)| (*n, [lines[n - 1].clone(), vec![child.clone()]].concat()))
        .collect();
    let child_prefixes = children.iter().map(|(_, c)| format!("{c}::"));
    let prefixes = ["crate::", "super::", "self::"].map(String::from);
    for prefix in prefixes.into_iter().chain(child_prefixes) {
        for (at, _) in text.match_indices(&prefix) {
            let before = text[..at].chars().next_back();
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || "_$:.".contains(c)) {
                continue;
            }
            let n = text[..at].matches('\n').count();
            for segs in read_paths(&text[at + prefix.len()..]) {
                let abs = match prefix.as_str() {
                    "crate::" => segs,
                    "super::" => {
                        let ups = 1 + segs.iter().take_while(|s| *s == "super").count();
                        let base = &lines[n][..lines[n].len().saturating_sub(ups)];
                        [base.to_vec(), segs[ups - 1..].to_vec()].concat()
                    }
                    "self::" => [lines[n].clone(), segs].concat(),
                    child => {
                        let child = vec![child.trim_end_matches(':').to_owned()];
                        [lines[n].clone(), child, segs].concat()
                    }
                };
                out.push((n + 1, abs));
            }
        }
    }
    out
}

/// The crate root's table of contents: the 1-based lines of its `mod x;` declarations
/// and `pub use` statements (which rustfmt may wrap over several lines), and the names
/// its re-exports of its own modules give (`pub use a::{B, c::D}` → `B` → `a::B`).
fn table_of_contents(text: &str) -> (BTreeSet<usize>, BTreeMap<String, Vec<String>>) {
    let children: BTreeSet<String> = declared_children(text).into_iter().map(|c| c.1).collect();
    let mut lines: BTreeSet<usize> = declared_children(text).iter().map(|c| c.0).collect();
    let mut names = BTreeMap::new();
    for (at, _) in text.match_indices("pub use ") {
        if !text[..at].ends_with('\n') && at != 0 {
            continue;
        }
        let statement = text[at..].split(';').next().unwrap_or_default();
        let first = 1 + text[..at].matches('\n').count();
        lines.extend(first..=first + statement.matches('\n').count());
        let path = statement["pub use ".len()..].trim_start_matches("self::");
        for segs in read_paths(path.trim_start_matches("crate::")) {
            if segs.first().is_some_and(|s| children.contains(s)) {
                names.insert(segs.last().cloned().unwrap_or_default(), segs);
            }
        }
    }
    (lines, names)
}

/// `(from, to)` file modules (`crate` for the root) → the `file:line: text` of each import.
type FileImports = BTreeMap<(String, String), Vec<String>>;

/// The name a module is shown by in a failure.
fn shown_module(module: &[String]) -> String {
    if module.is_empty() {
        "crate".to_owned()
    } else {
        module.join("::")
    }
}

/// Who imports whom among one crate's files.
fn file_imports(sources: &[Source]) -> FileImports {
    let modules: BTreeSet<&[String]> = sources.iter().map(|s| s.module.as_slice()).collect();
    let root = sources.iter().find(|s| s.module.is_empty());
    let (contents, reexports) = root.map(|r| table_of_contents(&r.text)).unwrap_or_default();
    let resolve = |abs: &[String]| {
        (0..=abs.len())
            .rev()
            .map(|k| &abs[..k])
            .find(|p| modules.contains(p))
            .map(<[String]>::to_vec)
    };
    let mut imports = FileImports::new();
    for source in sources {
        let from = &source.module;
        let lines: Vec<&str> = source.text.lines().collect();
        for (n, abs) in named_modules(from, &source.text) {
            if from.is_empty() && contents.contains(&n) {
                continue;
            }
            let mut to = resolve(&abs);
            // `crate::Name` through the root's `pub use` names the file the item lives in.
            if to.as_ref().is_some_and(Vec::is_empty) {
                if let Some(item) = abs.first().and_then(|name| reexports.get(name)) {
                    to = resolve(&[item.clone(), abs[1..].to_vec()].concat());
                }
            }
            let Some(to) = to.filter(|t| t != from) else {
                continue;
            };
            let at = format!("{}:{n}: {}", source.shown, lines[n - 1].trim());
            let key = (shown_module(from), shown_module(&to));
            let seen = imports.entry(key).or_default();
            if !seen.contains(&at) {
                seen.push(at);
            }
        }
    }
    imports
}

/// The import circles: each set of files that reach each other (its modules, by spaces),
/// with the imports between them.
fn circles(imports: &FileImports) -> Vec<(String, String)> {
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
        let members = circle.iter().copied().collect::<Vec<_>>().join(" ");
        out.push((
            members,
            format!("{circle:?}:\n    {}", lines.join("\n    ")),
        ));
    }
    out
}

/// `(file, module)` pairs read into sources shown from the workspace's root.
fn read_sources(files: impl IntoIterator<Item = (PathBuf, Vec<String>)>) -> Vec<Source> {
    let workspace = workspace_dir();
    files
        .into_iter()
        .map(|(file, module)| Source {
            shown: file.strip_prefix(&workspace).unwrap().display().to_string(),
            text: std::fs::read_to_string(&file).expect("read a source file"),
            module,
        })
        .collect()
}

/// The crates a crate's folder holds, each named and read: `src/` rooted at `lib.rs`
/// (`src/bin/*.rs` aside: each is a crate of one file), and each `tests/x.rs` with the
/// helper folders (no `main.rs` of their own) beside it, or `tests/x/main.rs` with its
/// folder.
fn crate_trees(krate: &str) -> Vec<(String, Vec<Source>)> {
    let dir = workspace_dir().join(krate);
    let mut trees = Vec::new();
    let src = dir.join("src");
    if src.join("lib.rs").exists() {
        let files = rust_files(&src).into_iter().filter(|f| {
            let rel = f.strip_prefix(&src).unwrap();
            !rel.starts_with("bin") && rel != Path::new("main.rs")
        });
        let files = files.map(|f| (f.clone(), module_of(f.strip_prefix(&src).unwrap())));
        trees.push((format!("{krate}/src"), read_sources(files)));
    }
    let tests = dir.join("tests");
    if tests.is_dir() {
        trees.extend(test_trees(krate, &tests));
    }
    trees
}

/// The test targets of `tests/` with the files each may declare.
fn test_trees(krate: &str, tests: &Path) -> Vec<(String, Vec<Source>)> {
    let all = rust_files(tests);
    let rel = |f: &PathBuf| f.strip_prefix(tests).unwrap().to_path_buf();
    let own_crate = |dir: &Path| tests.join(dir).join("main.rs").exists();
    let helpers: Vec<PathBuf> = all
        .iter()
        .filter(|f| {
            let r = rel(f);
            let top = r.iter().next().map(Path::new);
            r.components().count() > 1 && !top.is_some_and(own_crate)
        })
        .cloned()
        .collect();
    let mut trees = Vec::new();
    for file in &all {
        let r = rel(file);
        let (name, folder) = match r.components().count() {
            1 => (r.clone(), None),
            2 if r.ends_with("main.rs") => (r.clone(), r.parent().map(Path::to_path_buf)),
            _ => continue,
        };
        let members: Vec<(PathBuf, Vec<String>)> = match &folder {
            None => helpers
                .iter()
                .map(|h| (h.clone(), module_of(&rel(h))))
                .collect(),
            Some(folder) => all
                .iter()
                .filter(|f| rel(f).starts_with(folder) && *f != file)
                .map(|f| (f.clone(), module_of(rel(f).strip_prefix(folder).unwrap())))
                .collect(),
        };
        let root = std::iter::once((file.clone(), Vec::new()));
        let shown = format!("{krate}/tests/{}", name.display());
        trees.push((shown, read_sources(root.chain(members))));
    }
    trees
}

#[test]
fn no_import_circle_among_the_files_of_any_crate() {
    let mut seen = BTreeSet::new();
    let mut found = BTreeMap::new();
    for krate in workspace_members() {
        if CRATES_NOT_YET_CHECKED.contains(&krate.as_str()) {
            continue;
        }
        for (tree, sources) in crate_trees(&krate) {
            let imports = file_imports(&sources);
            seen.extend(imports.keys().map(|(f, t)| format!("{tree}: {f} -> {t}")));
            for (members, text) in circles(&imports) {
                found.insert(format!("{tree}: {members}"), format!("{tree}: {text}"));
            }
        }
    }
    // A scan that finds nothing would pass.
    for edge in [
        "node/src: http::router -> http::jobs",
        "node/src: http::jobs -> http::routes",
        "cli/src: worker -> common",
        "client/src: client -> transport",
        "proc-cluster/src: cluster -> opts",
        "cluster-tests/src: fixture -> nodes",
        "cluster-tests/tests/client.rs: crate -> common",
    ] {
        assert!(seen.contains(edge), "{edge} not seen: {seen:#?}");
    }
    let new: Vec<&String> = found
        .iter()
        .filter(|(key, _)| !CIRCLES_NOT_YET_BROKEN.contains(&key.as_str()))
        .map(|(_, text)| text)
        .collect();
    assert!(
        new.is_empty(),
        "import circles among the files of a crate: move the item down to a file both can \
         import, or pass it in\n{}",
        new.iter()
            .map(|t| t.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
    let gone: Vec<&str> = CIRCLES_NOT_YET_BROKEN
        .iter()
        .copied()
        .filter(|key| !found.contains_key(*key))
        .collect();
    assert!(
        gone.is_empty(),
        "circles broken (or changed): take them out of CIRCLES_NOT_YET_BROKEN\n{}",
        gone.join("\n")
    );
}

#[test]
fn the_crates_not_yet_checked_are_crates() {
    let members = workspace_members();
    for krate in CRATES_NOT_YET_CHECKED {
        assert!(members.iter().any(|m| m == krate), "{krate} is no member");
    }
}

fn source(shown: &str, text: &str) -> Source {
    Source {
        shown: shown.to_owned(),
        module: module_of(Path::new(shown)),
        text: text.to_owned(),
    }
}

#[test]
fn an_import_circle_is_found_with_its_lines() {
    let files = [
        source("http/mod.rs", "//! x\nmod a;\nmod b;\npub fn helper() {}\n"),
        source("http/a.rs", "use super::b::{self, B};\n"),
        source(
            "http/b.rs",
            "use super::helper;\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n",
        ),
        source("http/c.rs", "use crate::http::{a, b::B};\n"),
    ];
    let imports = file_imports(&files);
    let found = circles(&imports);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0].0, "http http::a http::b");
    assert!(found[0]
        .1
        .contains("http::b -> http: http/b.rs:1: use super::helper;"));
    assert!(found[0]
        .1
        .contains("http -> http::a: http/mod.rs:2: mod a;"));
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

#[test]
fn a_circle_through_the_crate_root_is_found_and_its_table_of_contents_is_not_one() {
    let lib = "//! x\npub mod a;\nmod b;\n\npub use a::{\n    A,\n    Other,\n};\n\
               pub use b::B;\n\npub fn helper() {\n    b::run();\n}\n";
    let files = [
        source("lib.rs", lib),
        // Through the re-export: names a.rs, not the root.
        source("b.rs", "use crate::A;\npub struct B;\n"),
        source("a.rs", "//! [`crate::A`] is here.\npub struct A;\n"),
    ];
    let imports = file_imports(&files);
    assert!(imports.contains_key(&("b".to_owned(), "a".to_owned())));
    assert!(imports.contains_key(&("crate".to_owned(), "b".to_owned())));
    assert!(!imports.contains_key(&("crate".to_owned(), "a".to_owned())));
    assert!(circles(&imports).is_empty(), "{:#?}", circles(&imports));
    // The root's own item, used below it, closes a circle with its code's `b::run()`.
    let files = [
        source("lib.rs", lib),
        source("b.rs", "pub fn run() {\n    crate::helper();\n}\n"),
    ];
    let found = circles(&file_imports(&files));
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(found[0].1.contains("crate -> b: lib.rs:12: b::run();"));
    assert!(found[0].1.contains("b -> crate: b.rs:2: crate::helper();"));
}

#[test]
fn a_circle_between_a_test_target_and_its_helper_folder_is_found() {
    let test = "mod common;\nfn start() {}\n#[test]\nfn t() {\n    common::run();\n}\n";
    let mut target = source("tests/chaos.rs", test);
    target.module = Vec::new();
    let files = [
        target,
        source("common/mod.rs", "pub fn run() {\n    super::start();\n}\n"),
    ];
    let found = circles(&file_imports(&files));
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(found[0]
        .1
        .contains("crate -> common: tests/chaos.rs:5: common::run();"));
    assert!(found[0]
        .1
        .contains("common -> crate: common/mod.rs:2: super::start();"));
}
