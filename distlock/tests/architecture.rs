//! The shape of `distlock/src`, checked on every test run: no import cycles between files,
//! the folders stacked in layers that import only from layers below their own (or from
//! their own), at most 10 files at the root of `src`, no source file over 700 lines of code
//! (blank lines, comments and the unit-test module not counted).
//!
//! Imports are read as text: every `use` tree and every inline `crate::`/`super::`/`self::`
//! path outside comments, resolved through the modules' re-exports (`pub use`) to the file
//! that defines the item. A `mod child;` declaration is not an import; a parent that uses
//! its child's items and a child that uses its parent's are a cycle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const MAX_ROOT_FILES: usize = 10;
const MAX_LINES: usize = 700;

/// The layers of `distlock/src`, bottom first: a folder, or a file at the root, by its
/// module name. A file may import from its own layer and the layers below it, never from
/// one above. `lib.rs`, the facade, sits on top of them all and may import anything.
const LAYERS: &[&str] = &[
    "rt",           // the runtime, the clock, backoff, the hub that wakes waiters
    "terms",        // lock kinds and owner ids: plain data
    "errors",       // the public errors, the drivers' error, unreadable replies
    "obs",          // metrics, sites, holder texts
    "protocol",     // the scripts and the calls that run them
    "check",        // the servers' self-check: the probe, the version rules, the report
    "lease",        // a held lease's data, the local waiters
    "backend",      // the topologies, owning the leases
    "upkeep",       // renewals, revocation checks, graceful shutdown: they drive a backend
    "registry",     // the backends by name, started and shut down
    "ops",          // inspection, fencing, ids
    "primitives",   // locks, semaphores, multi-locks, leaders, their guards
    "integrations", // tower and axum
];

/// A module path from the crate root (`[]` is `lib.rs`).
type ModPath = Vec<String>;

struct Module {
    file: PathBuf,
    text: String,
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn modules() -> BTreeMap<ModPath, Module> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read src dir") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().and_then(|e| e.to_str()) != Some("rs") {
                continue;
            }
            let rel = path.strip_prefix(src()).expect("under src");
            let mut segs: ModPath = rel
                .iter()
                .map(|s| s.to_string_lossy().trim_end_matches(".rs").to_string())
                .collect();
            if segs.last().is_some_and(|s| s == "mod" || s == "lib") {
                segs.pop();
            }
            let text = without_test_modules(&std::fs::read_to_string(&path).expect("read source"));
            out.insert(segs, Module { file: path, text });
        }
    }
    out
}

/// The text without its `#[cfg(test)] mod … { … }` blocks: unit tests are not part of the
/// structure (their `use super::*` is the module itself).
fn without_test_modules(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("#[cfg(test)]") {
        let after = rest[at + "#[cfg(test)]".len()..].trim_start();
        let is_mod = after.starts_with("mod ") || after.starts_with("pub(crate) mod ");
        let open = after.find('{');
        let semi = after.find(';');
        match (is_mod, open) {
            (true, Some(open)) if semi.is_none_or(|s| s > open) => {
                out.push_str(&rest[..at]);
                let body = &after[open..];
                let mut depth = 0usize;
                let mut end = body.len();
                for (i, c) in body.char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = i + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                rest = &body[end..];
            }
            _ => {
                out.push_str(&rest[..at + "#[cfg(test)]".len()]);
                rest = &rest[at + "#[cfg(test)]".len()..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// The text without comments (line comments, doc comments, block comments) and string
/// literals' contents, so that intra-doc links and messages are not read as imports.
fn code_only(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
            i += 2;
            while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                i += 1;
            }
            i += 2;
        } else if b[i] == b'"' {
            out.push('"');
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    i += 1;
                }
                i += 1;
            }
            out.push('"');
            i += 1;
        } else if b[i] == b'\'' && b.get(i + 2) == Some(&b'\'') {
            // A char literal such as '{' (lifetimes have no closing quote two bytes on).
            out.push_str("' '");
            i += 3;
        } else {
            out.push(b[i] as char);
            i += 1;
        }
    }
    out
}

/// Expands a use tree (`a::{b, c::{d, e as f}}`) into its paths.
fn expand_use(tree: &str) -> Vec<Vec<String>> {
    // `x as y` names the import `y`; the path is `x`.
    let mut cleaned = String::new();
    let mut words = tree.split_whitespace().peekable();
    while let Some(w) = words.next() {
        if w == "as" {
            // Skip the new name, keep any punctuation glued to it (`y}` or `y,`).
            if let Some(name) = words.next() {
                cleaned.extend(name.chars().filter(|c| matches!(c, '{' | '}' | ',')));
            }
        } else {
            cleaned.push_str(w);
        }
    }
    let tree = cleaned;
    fn go(prefix: &[String], t: &str, out: &mut Vec<Vec<String>>) {
        if let Some(open) = t.find('{') {
            let head = &t[..open];
            let inner = &t[open + 1..t.rfind('}').unwrap_or(t.len())];
            let mut p = prefix.to_vec();
            p.extend(head.split("::").filter(|s| !s.is_empty()).map(String::from));
            let mut depth = 0;
            let mut start = 0;
            let bytes = inner.as_bytes();
            for (i, c) in bytes.iter().enumerate() {
                match c {
                    b'{' => depth += 1,
                    b'}' => depth -= 1,
                    b',' if depth == 0 => {
                        go(&p, &inner[start..i], out);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            go(&p, &inner[start..], out);
        } else if !t.is_empty() {
            let mut p = prefix.to_vec();
            p.extend(t.split("::").filter(|s| !s.is_empty()).map(String::from));
            out.push(p);
        }
    }
    let mut out = Vec::new();
    go(&[], &tree, &mut out);
    out
}

/// Makes a path absolute (from the crate root), or `None` for an external crate's path.
fn absolute(module: &ModPath, is_mod_rs: bool, path: &[String]) -> Option<Vec<String>> {
    let first = path.first()?;
    let mut base: Vec<String> = match first.as_str() {
        "crate" => Vec::new(),
        "self" => module.clone(),
        "super" => {
            let mut m = module.clone();
            // In `a/b.rs` (module a::b) `super` is `a`; so it is in `a/b/mod.rs` too.
            let _ = is_mod_rs;
            m.pop();
            m
        }
        _ => return None,
    };
    let mut rest = &path[1..];
    while rest.first().is_some_and(|s| s == "super") {
        base.pop();
        rest = &rest[1..];
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

struct Crate {
    modules: BTreeMap<ModPath, Module>,
    /// (file's module, name) of the inline modules (`pub mod error { pub use ...; }` in
    /// `lib.rs`): transparent, their re-exports are read as the file's own.
    inline: BTreeSet<(ModPath, String)>,
    /// (module, name) -> the absolute path it re-exports.
    reexports: BTreeMap<(ModPath, String), Vec<String>>,
}

impl Crate {
    fn load() -> Crate {
        let modules = modules();
        let mut reexports = BTreeMap::new();
        let mut inline = BTreeSet::new();
        for (m, module) in &modules {
            let code = code_only(&module.text);
            let mut rest = code.as_str();
            while let Some(at) = find_word(rest, "mod") {
                let after = rest[at + 3..].trim_start();
                let name: String = after
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if after[name.len()..].trim_start().starts_with('{') {
                    inline.insert((m.clone(), name.clone()));
                }
                rest = &rest[at + 3..];
            }
            let is_mod_rs = module.file.ends_with("mod.rs") || module.file.ends_with("lib.rs");
            for stmt in use_statements(&code_only(&module.text)) {
                if !stmt.public {
                    continue;
                }
                for p in expand_use(&stmt.tree) {
                    if let Some(abs) = absolute(m, is_mod_rs, &p) {
                        if let Some(name) = abs.last() {
                            reexports.insert((m.clone(), name.clone()), abs);
                        }
                    } else if let Some(name) = p.last() {
                        // A path relative to this module (`pub use child::Item;`).
                        let mut abs = m.clone();
                        abs.extend(p.iter().cloned());
                        reexports.insert((m.clone(), name.clone()), abs);
                    }
                }
            }
        }
        Crate {
            modules,
            inline,
            reexports,
        }
    }

    /// The module whose file defines what `path` names.
    fn resolve(&self, path: &[String], depth: usize) -> ModPath {
        let mut cur: ModPath = Vec::new();
        for (i, seg) in path.iter().enumerate() {
            let mut next = cur.clone();
            next.push(seg.clone());
            if self.modules.contains_key(&next) {
                cur = next;
                continue;
            }
            if self.inline.contains(&(cur.clone(), seg.clone())) {
                continue;
            }
            if let Some(target) = self.reexports.get(&(cur.clone(), seg.clone())) {
                if depth < 8 && target.as_slice() != &path[..=i] {
                    let mut t = target.clone();
                    t.extend(path[i + 1..].iter().cloned());
                    return self.resolve(&t, depth + 1);
                }
            }
            break;
        }
        cur
    }

    /// file -> files it imports from, each with the names seen.
    fn graph(&self) -> BTreeMap<ModPath, BTreeMap<ModPath, BTreeSet<String>>> {
        let mut g: BTreeMap<ModPath, BTreeMap<ModPath, BTreeSet<String>>> = BTreeMap::new();
        for (m, module) in &self.modules {
            let is_mod_rs = module.file.ends_with("mod.rs") || module.file.ends_with("lib.rs");
            let code = code_only(&module.text);
            let mut paths = Vec::new();
            for stmt in use_statements(&code) {
                for p in expand_use(&stmt.tree) {
                    match absolute(m, is_mod_rs, &p) {
                        Some(abs) => paths.push(abs),
                        None => {
                            // Relative to this module: a child's item.
                            let mut abs = m.clone();
                            abs.extend(p.iter().cloned());
                            if p.len() > 1 {
                                paths.push(abs);
                            }
                        }
                    }
                }
            }
            for p in inline_paths(&code) {
                if let Some(abs) = absolute(m, is_mod_rs, &p) {
                    paths.push(abs);
                }
            }
            let entry = g.entry(m.clone()).or_default();
            for p in paths {
                let target = self.resolve(&p, 0);
                if &target != m && self.modules.contains_key(&target) {
                    entry
                        .entry(target)
                        .or_default()
                        .insert(p.last().cloned().unwrap_or_default());
                }
            }
        }
        g
    }
}

struct UseStmt {
    public: bool,
    tree: String,
}

/// Every `use` item of a file's code (also inside functions and inner modules).
fn use_statements(code: &str) -> Vec<UseStmt> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(at) = find_word(rest, "use") {
        let before = &rest[..at];
        let line_start = before.rfind(['\n', ';', '{', '}']).map_or(0, |i| i + 1);
        let lead = before[line_start..].trim();
        let public = lead.starts_with("pub");
        let after = &rest[at + 3..];
        let end = after.find(';').unwrap_or(after.len());
        if lead.is_empty() || lead.starts_with("pub") || lead.starts_with('#') {
            out.push(UseStmt {
                public,
                tree: after[..end].trim().to_string(),
            });
        }
        rest = &after[end.min(after.len())..];
    }
    out
}

fn find_word(text: &str, word: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = text[from..].find(word) {
        let at = from + i;
        let ok_before = at == 0
            || !text.as_bytes()[at - 1].is_ascii_alphanumeric() && text.as_bytes()[at - 1] != b'_';
        let end = at + word.len();
        let ok_after = end >= text.len()
            || !text.as_bytes()[end].is_ascii_alphanumeric() && text.as_bytes()[end] != b'_';
        if ok_before && ok_after {
            return Some(at);
        }
        from = end;
    }
    None
}

/// Inline paths such as `crate::obs::metrics::lost(..)` or `super::Node`.
fn inline_paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for start in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(i) = code[from..].find(start) {
            let at = from + i;
            let ok_before = at == 0 || {
                let c = code.as_bytes()[at - 1];
                !c.is_ascii_alphanumeric() && c != b'_' && c != b':'
            };
            let mut end = at;
            let bytes = code.as_bytes();
            while end < bytes.len()
                && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_' || bytes[end] == b':')
            {
                end += 1;
            }
            // `crate::a::{b, c}` and `crate::a::*` are use trees, read by `use_statements`.
            let tree = matches!(bytes.get(end), Some(b'{' | b'*'));
            if ok_before && !tree && end > at + start.len() {
                let segs: Vec<String> = code[at..end]
                    .split("::")
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect();
                out.push(segs);
            }
            from = end.max(at + start.len());
        }
    }
    out
}

fn show(m: &ModPath) -> String {
    if m.is_empty() {
        "lib.rs".into()
    } else {
        m.join("/")
    }
}

/// Strongly connected components of more than one file (Tarjan).
fn cycles(g: &BTreeMap<ModPath, BTreeMap<ModPath, BTreeSet<String>>>) -> Vec<Vec<ModPath>> {
    struct T<'a> {
        g: &'a BTreeMap<ModPath, BTreeMap<ModPath, BTreeSet<String>>>,
        index: BTreeMap<ModPath, usize>,
        low: BTreeMap<ModPath, usize>,
        on: BTreeSet<ModPath>,
        stack: Vec<ModPath>,
        next: usize,
        out: Vec<Vec<ModPath>>,
    }
    fn visit(t: &mut T<'_>, v: &ModPath) {
        t.index.insert(v.clone(), t.next);
        t.low.insert(v.clone(), t.next);
        t.next += 1;
        t.stack.push(v.clone());
        t.on.insert(v.clone());
        let succ: Vec<ModPath> =
            t.g.get(v)
                .map(|e| e.keys().cloned().collect())
                .unwrap_or_default();
        for w in succ {
            if !t.index.contains_key(&w) {
                visit(t, &w);
                let lw = t.low[&w];
                let lv = t.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if t.on.contains(&w) {
                let iw = t.index[&w];
                let lv = t.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(&w);
                let done = &w == v;
                comp.push(w);
                if done {
                    break;
                }
            }
            if comp.len() > 1 {
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        on: BTreeSet::new(),
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in g.keys() {
        if !t.index.contains_key(v) {
            visit(&mut t, v);
        }
    }
    t.out
}

#[test]
fn no_import_cycles_between_files() {
    let krate = Crate::load();
    let g = krate.graph();
    let found = cycles(&g);
    let mut report = String::new();
    for comp in &found {
        report.push_str("cycle:\n");
        for a in comp {
            for b in comp {
                if let Some(names) = g.get(a).and_then(|e| e.get(b)) {
                    let names: Vec<&str> = names.iter().map(String::as_str).collect();
                    report.push_str(&format!(
                        "  {} -> {}: {}\n",
                        show(a),
                        show(b),
                        names.join(", ")
                    ));
                }
            }
        }
    }
    assert!(found.is_empty(), "import cycles in distlock/src:\n{report}");
    // The graph is printed with --nocapture (`cargo test -p distlock --test architecture -- --nocapture`).
    for (a, edges) in &g {
        let to: Vec<String> = edges.keys().map(show).collect();
        println!("{} -> {}", show(a), to.join(", "));
    }
}

/// The layer of a file (its index in [`LAYERS`]), `None` for `lib.rs`, `Err` for a file in
/// no layer.
fn layer(m: &ModPath) -> Result<Option<usize>, String> {
    match m.first() {
        None => Ok(None),
        Some(top) => LAYERS
            .iter()
            .position(|l| l == top)
            .map(Some)
            .ok_or_else(|| top.clone()),
    }
}

#[test]
fn no_file_imports_from_a_layer_above_its_own() {
    let krate = Crate::load();
    let g = krate.graph();
    let mut unplaced = BTreeSet::new();
    let mut report = String::new();
    let mut count = 0;
    for (a, edges) in &g {
        let from = match layer(a) {
            Ok(Some(l)) => l,
            // The facade may import anything.
            Ok(None) => continue,
            Err(top) => {
                unplaced.insert(top);
                continue;
            }
        };
        for (b, names) in edges {
            match layer(b) {
                Ok(Some(to)) if to > from => {
                    count += 1;
                    let names: Vec<&str> = names.iter().map(String::as_str).collect();
                    report.push_str(&format!(
                        "  {} -> {}: {} ({} above {})\n",
                        show(a),
                        show(b),
                        names.join(", "),
                        LAYERS[to],
                        LAYERS[from]
                    ));
                }
                Ok(Some(_)) => {}
                Ok(None) => {
                    count += 1;
                    let names: Vec<&str> = names.iter().map(String::as_str).collect();
                    report.push_str(&format!(
                        "  {} -> lib.rs: {} (the facade, above every layer)\n",
                        show(a),
                        names.join(", ")
                    ));
                }
                Err(top) => {
                    unplaced.insert(top);
                }
            }
        }
    }
    assert!(
        unplaced.is_empty(),
        "folders or root files in no layer (add them to LAYERS): {unplaced:?}"
    );
    assert!(
        count == 0,
        "{count} import(s) from a layer above the file's own (layers, bottom first: {}):\n{report}",
        LAYERS.join(", ")
    );
    println!(
        "layers, bottom first: {} (lib.rs on top)",
        LAYERS.join(" < ")
    );
}

#[test]
fn the_graph_reader_sees_the_imports_it_must() {
    // A check of the checker: edges that exist must be found, resolved through re-exports.
    let krate = Crate::load();
    let g = krate.graph();
    let lock: ModPath = vec!["primitives".into(), "lock".into()];
    let edges = &g[&lock];
    assert!(
        edges.contains_key(&vec!["errors".to_string()]),
        "primitives/lock.rs uses crate::LockError (re-exported from errors/mod.rs): {:?}",
        edges.keys().collect::<Vec<_>>()
    );
    assert!(edges.contains_key(&vec!["backend".to_string()]));
    assert_eq!(
        expand_use("a::{b, c::{d, e as f}}"),
        vec![
            vec!["a".to_string(), "b".into()],
            vec!["a".into(), "c".into(), "d".into()],
            vec!["a".into(), "c".into(), "e".into()],
        ]
    );
}

/// The lines of code of a source file: not blank, not a comment (docs included), and not
/// in its unit-test module (`#[cfg(test)] mod tests`, at the end). What a reader of the
/// file's code has to take in; its documentation and tests never push a file over.
fn code_lines(source: &str) -> usize {
    let code = match source.find("#[cfg(test)]\nmod tests") {
        Some(i) => &source[..i],
        None => source,
    };
    code.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("//"))
        .count()
}

#[test]
fn code_lines_leave_out_comments_blanks_and_unit_tests() {
    let src =
        "//! doc\n\nfn a() {}\n/// doc\nfn b() {}\n#[cfg(test)]\nmod tests {\n    fn t() {}\n}\n";
    assert_eq!(code_lines(src), 2);
}

#[test]
fn at_most_ten_files_at_the_root_and_none_over_700_lines() {
    let root: Vec<String> = std::fs::read_dir(src())
        .expect("read src")
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        root.len() <= MAX_ROOT_FILES,
        "{} files at distlock/src's root (at most {MAX_ROOT_FILES}): {root:?}",
        root.len()
    );
    let mut long = Vec::new();
    for module in modules().values() {
        let n = code_lines(&std::fs::read_to_string(&module.file).expect("read source"));
        if n > MAX_LINES {
            long.push(format!("{} ({n} lines of code)", module.file.display()));
        }
    }
    assert!(
        long.is_empty(),
        "files over {MAX_LINES} lines of code: {long:?}"
    );
}
