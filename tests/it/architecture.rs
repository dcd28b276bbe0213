//! The shape of `proxy/src/`, `proxy/store/src/`, `policy/src/` and the crates under `policy/` (docs/
//! architecture.md), checked so that it holds as features land (which crate may use which is
//! the crate graph's, enforced by Cargo):
//! - no import cycle between files (modules), nor between top-level folders, in either crate;
//! - each top-level folder of `proxy` imports only folders of the layers below it;
//! - no source file passes 450 lines outside its tests.
//!
//! Imports are read from the token stream of each file (comments and strings are not
//! tokens, so a path in a doc comment is not a dependency): every `crate::…` and `super::…`
//! path, every `use` tree, and relative paths into a module's own children. A
//! `#[cfg(test)]` module (inline `mod tests { … }` or a `tests.rs` file) is left out: tests
//! may reach anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::str::FromStr as _;

use proc_macro2::{Delimiter, TokenStream, TokenTree};

mod imports;
use imports::*;

/// The layers, top first. A module may import modules of its own folder and of any layer
/// below its own, never one above. Keep in step with docs/architecture.md.
const LAYERS: &[&[&str]] = &[
    &["cli"],
    &["server"],
    &["control"],
    &["pipeline"],
    &["rcns"],
    &["authority", "aip"],
    &["mcp"],
    &["admission"],
    &["enforce"],
    &["context"],
    &["store"],
    &["telemetry"],
    &["net"],
    &["config", "clock", "fs"],
];

/// Most lines a source file may have before its test module, in every crate (issue 55: 450,
/// from 500 for `proxy` and 600 for `policy`; a file near the cap is split by job, not packed).
const MAX_LINES: usize = 450;
const MAX_POLICY_LINES: usize = 450;

/// The crates whose shape is checked.
#[derive(Clone, Copy)]
enum Crate {
    Proxy,
    Policy,
    /// `policy/core` (`palisade-core`), `policy/log` (`palisade-log`) and `policy/aip2`
    /// (`palisade-aip2`): that they import neither `palisade-policy` nor each other the wrong
    /// way round is the crate graph's to say (Cargo refuses a cycle); their files' shape is
    /// checked here like the others'.
    Core,
    Log,
    Aip2,
    /// `policy/rich` (`palisade-rich`): RICH, RCNS and admission, over `palisade-policy`.
    Rich,
    /// `proxy/store` (`palisade-store`): the state store and its backends.
    Store,
}

fn src_dir(krate: Crate) -> PathBuf {
    let proxy = Path::new(env!("CARGO_MANIFEST_DIR"));
    match krate {
        Crate::Proxy => proxy.join("src"),
        Crate::Policy => proxy.join("../policy/src"),
        Crate::Core => proxy.join("../policy/core/src"),
        Crate::Log => proxy.join("../policy/log/src"),
        Crate::Aip2 => proxy.join("../policy/aip2/src"),
        Crate::Rich => proxy.join("../policy/rich/src"),
        Crate::Store => proxy.join("store/src"),
    }
}

/// Every module of a crate's library: its path (`net::body`; the crate root is ``) and file.
fn modules(krate: Crate) -> BTreeMap<String, PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("read src dir") {
            let p = entry.expect("dir entry").path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|e| e == "rs") {
                out.push(p);
            }
        }
    }
    let root = src_dir(krate);
    let mut files = Vec::new();
    walk(&root, &mut files);
    let mut out = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(&root).expect("under src");
        let mut parts: Vec<String> = rel
            .iter()
            .map(|c| c.to_string_lossy().trim_end_matches(".rs").to_owned())
            .collect();
        // A #[cfg(test)] module's file (`tests.rs`) and its children (`tests/*.rs`).
        if parts.iter().any(|p| p == "tests") {
            continue;
        }
        match parts.last().map(String::as_str) {
            Some("main") if parts.len() == 1 => continue, // the binary, not the library
            Some("mod") | Some("lib") => {
                parts.pop();
            }
            _ => {}
        }
        out.insert(parts.join("::"), f);
    }
    out
}

/// Module → the modules it imports. A name a module re-exports from a child (`pub use
/// app::AppState;`) counts as an import of that child, so a folder's facade is no node that
/// everything passes through. Inside a folder, import siblings directly: a child importing
/// its parent's facade while the parent re-exports it is a cycle.
fn graph(krate: Crate) -> BTreeMap<String, BTreeSet<String>> {
    let known = modules(krate);
    let mut named: BTreeMap<String, Vec<Named>> = BTreeMap::new();
    for (module, file) in &known {
        let src = std::fs::read_to_string(file).expect("read source");
        let stream = TokenStream::from_str(&src)
            .unwrap_or_else(|e| panic!("{} does not tokenize: {e:?}", file.display()));
        let mut paths = Vec::new();
        referenced_paths(stream, &mut paths);
        named.insert(module.clone(), paths);
    }
    // (module, name) → the module the name is defined in.
    let mut reexports: BTreeMap<(String, String), String> = BTreeMap::new();
    for (module, paths) in &named {
        for (p, reexport) in paths {
            let Some(name) = p.last().filter(|n| *reexport && *n != "self" && *n != "*") else {
                continue;
            };
            if let Some((target, _)) = resolve(module, p, &known) {
                reexports.insert((module.clone(), name.clone()), target);
            }
        }
    }
    let mut g = BTreeMap::new();
    for (module, paths) in &named {
        let deps: BTreeSet<String> = paths
            .iter()
            .filter_map(|(p, _)| {
                let (mut m, mut name) = resolve(module, p, &known)?;
                // Follow re-exports (bounded: a chain of them is short).
                for _ in 0..8 {
                    let Some(target) = name
                        .as_ref()
                        .and_then(|n| reexports.get(&(m.clone(), n.clone())))
                    else {
                        break;
                    };
                    if *target == m {
                        break;
                    }
                    m = target.clone();
                    name = p.last().cloned();
                }
                Some(m)
            })
            .filter(|m| m != module)
            .collect();
        g.insert(module.clone(), deps);
    }
    g
}

/// A cycle in `g`, as the list of nodes around it, if there is one.
fn find_cycle(g: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Active,
        Done,
    }
    fn visit(
        n: &str,
        g: &BTreeMap<String, BTreeSet<String>>,
        marks: &mut BTreeMap<String, Mark>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        marks.insert(n.to_owned(), Mark::Active);
        stack.push(n.to_owned());
        for d in g.get(n).into_iter().flatten() {
            match marks.get(d).copied().unwrap_or(Mark::New) {
                Mark::Active => {
                    let at = stack.iter().position(|s| s == d).expect("on stack");
                    let mut cycle = stack[at..].to_vec();
                    cycle.push(d.clone());
                    return Some(cycle);
                }
                Mark::New => {
                    if let Some(c) = visit(d, g, marks, stack) {
                        return Some(c);
                    }
                }
                Mark::Done => {}
            }
        }
        stack.pop();
        marks.insert(n.to_owned(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for n in g.keys() {
        if marks.get(n).copied().unwrap_or(Mark::New) == Mark::New {
            if let Some(c) = visit(n, g, &mut marks, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

/// The top-level folder (or file) a module belongs to; `` for the crate root.
fn folder(module: &str) -> &str {
    module.split("::").next().unwrap_or("")
}

fn show(root: &str) -> &str {
    if root.is_empty() {
        "(crate root)"
    } else {
        root
    }
}

fn assert_no_module_cycle(krate: Crate) {
    let g = graph(krate);
    if let Some(cycle) = find_cycle(&g) {
        panic!("import cycle between modules: {}", cycle.join(" → "));
    }
}

fn assert_no_folder_cycle(krate: Crate) {
    let mut folders: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (m, deps) in graph(krate) {
        let entry = folders.entry(folder(&m).to_owned()).or_default();
        for d in deps {
            if folder(&d) != folder(&m) {
                entry.insert(folder(&d).to_owned());
            }
        }
    }
    if let Some(cycle) = find_cycle(&folders) {
        let names: Vec<&str> = cycle.iter().map(|c| show(c)).collect();
        panic!("import cycle between folders: {}", names.join(" → "));
    }
}

fn assert_line_limit(krate: Crate, max: usize) {
    let mut long = Vec::new();
    for file in modules(krate).values() {
        let src = std::fs::read_to_string(file).expect("read source");
        let code = src.split("#[cfg(test)]\nmod tests").next().unwrap_or("");
        let n = code.lines().count();
        if n > max {
            long.push(format!("{}: {n} lines", file.display()));
        }
    }
    assert!(
        long.is_empty(),
        "files over {max} lines (split them by job):\n{}",
        long.join("\n")
    );
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    assert_no_module_cycle(Crate::Proxy);
    assert_no_module_cycle(Crate::Store);
}

#[test]
fn no_folder_imports_one_that_imports_it_back() {
    assert_no_folder_cycle(Crate::Proxy);
    assert_no_folder_cycle(Crate::Store);
}

#[test]
fn no_policy_module_imports_one_that_imports_it_back() {
    assert_no_module_cycle(Crate::Policy);
    assert_no_module_cycle(Crate::Rich);
}

#[test]
fn no_policy_folder_imports_one_that_imports_it_back() {
    assert_no_folder_cycle(Crate::Policy);
    assert_no_folder_cycle(Crate::Rich);
}

#[test]
fn no_policy_source_file_passes_the_line_limit() {
    for krate in [
        Crate::Policy,
        Crate::Rich,
        Crate::Core,
        Crate::Log,
        Crate::Aip2,
    ] {
        assert_line_limit(krate, MAX_POLICY_LINES);
    }
}

#[test]
fn no_module_of_the_core_log_or_aip2_crates_imports_one_that_imports_it_back() {
    for krate in [Crate::Core, Crate::Log, Crate::Aip2] {
        assert_no_module_cycle(krate);
    }
}

#[test]
fn each_folder_imports_only_the_layers_below_it() {
    let layer_of = |f: &str| LAYERS.iter().position(|l| l.contains(&f));
    let mut wrong = Vec::new();
    for (m, deps) in graph(Crate::Proxy) {
        let from = folder(&m);
        if from.is_empty() {
            continue; // lib.rs only declares the folders
        }
        let Some(lf) = layer_of(from) else {
            wrong.push(format!(
                "{from} is in no layer of LAYERS (add it, and to docs/architecture.md)"
            ));
            continue;
        };
        for d in deps {
            let to = folder(&d);
            if to == from {
                continue;
            }
            match layer_of(to) {
                Some(lt) if lt > lf => {}
                _ => wrong.push(format!("{m} imports {d}: {from} may not use {}", show(to))),
            }
        }
    }
    wrong.sort();
    wrong.dedup();
    assert!(
        wrong.is_empty(),
        "imports against the layering:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn no_source_file_passes_the_line_limit() {
    assert_line_limit(Crate::Proxy, MAX_LINES);
    assert_line_limit(Crate::Store, MAX_LINES);
}

/// The checker itself: a cycle, a relative child path and a `super` path are seen.
#[test]
fn the_checker_sees_cycles_and_paths() {
    let mut g = BTreeMap::new();
    g.insert("a".to_owned(), BTreeSet::from(["b".to_owned()]));
    g.insert("b".to_owned(), BTreeSet::from(["c".to_owned()]));
    g.insert("c".to_owned(), BTreeSet::from(["a".to_owned()]));
    assert_eq!(
        find_cycle(&g),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
    g.insert("c".to_owned(), BTreeSet::new());
    assert_eq!(find_cycle(&g), None);

    let mut known = BTreeMap::new();
    for m in ["", "net", "net::body", "enforce", "enforce::checks"] {
        known.insert(m.to_owned(), PathBuf::new());
    }
    let mut paths = Vec::new();
    let src = "use crate::net::{body::{self, ProxyBody}, Other}; use super::checks::check; \
               fn f() { crate::net::body::full(x); json!(crate::enforce::X); } \
               mod tests { use crate::enforce::checks; }";
    referenced_paths(TokenStream::from_str(src).expect("tokens"), &mut paths);
    let resolved: BTreeSet<String> = paths
        .iter()
        .filter_map(|(p, _)| resolve("enforce::receipts", p, &known).map(|(m, _)| m))
        .collect();
    let want: BTreeSet<String> = ["net::body", "net", "enforce::checks", "enforce"]
        .into_iter()
        .map(str::to_owned)
        .collect();
    assert_eq!(resolved, want);
    // A path in a comment or string is no dependency.
    let mut none = Vec::new();
    referenced_paths(
        TokenStream::from_str("// crate::cli::x\nconst S: &str = \"crate::cli::y\";")
            .expect("tokens"),
        &mut none,
    );
    assert!(none
        .iter()
        .all(|(p, _)| p.first().map(String::as_str) != Some("crate")));
    // A re-export is told apart from a use.
    let mut uses = Vec::new();
    referenced_paths(
        TokenStream::from_str("pub use app::AppState; pub(crate) use a::B; use c::D;")
            .expect("tokens"),
        &mut uses,
    );
    let flags: Vec<bool> = uses.iter().map(|(_, r)| *r).collect();
    assert_eq!(flags, [true, true, false]);
}
