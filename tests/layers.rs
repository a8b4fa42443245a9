//! Layers point down: lower modules never name higher ones. Reads the sources.

use std::path::{Path, PathBuf};

fn sources(under: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(under).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}

/// Every `file:line` under `src/<relative>` that names `forbidden`.
fn uses(relative: &str, forbidden: &str) -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(relative);
    let files = if path.is_dir() { sources(&path) } else { vec![path] };
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for (index, line) in text.lines().enumerate() {
            if line.contains(forbidden) {
                found.push(format!("{}:{}: {}", file.display(), index + 1, line.trim()));
            }
        }
    }
    found
}

#[test]
fn the_cache_does_not_depend_on_inputs() {
    assert_eq!(uses("cache", "use crate::inputs"), Vec::<String>::new());
    assert_eq!(uses("cache", "crate::inputs::"), Vec::<String>::new());
}

#[test]
fn status_does_not_depend_on_prepare() {
    assert_eq!(uses("status.rs", "use crate::prepare"), Vec::<String>::new());
    assert_eq!(uses("status.rs", "crate::prepare::"), Vec::<String>::new());
}

#[test]
fn gc_does_not_depend_on_stage() {
    assert_eq!(uses("gc.rs", "use crate::stage"), Vec::<String>::new());
    assert_eq!(uses("gc.rs", "crate::stage::"), Vec::<String>::new());
}

/// A module of the crate by its path below `src` (`["cache", "layout"]`), and its source.
fn modules() -> std::collections::BTreeMap<Vec<String>, String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut modules = std::collections::BTreeMap::new();
    for file in sources(&src) {
        let relative = file.strip_prefix(&src).unwrap().with_extension("");
        let mut path: Vec<String> = relative.iter().map(|part| part.to_string_lossy().into_owned()).collect();
        if path.last().is_some_and(|last| last == "mod") {
            path.pop();
        }
        if path == ["lib"] || path == ["main"] {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        // Unit tests may reach anywhere.
        let code = text.split("#[cfg(test)]").next().unwrap_or_default().to_string();
        modules.insert(path, code);
    }
    modules
}

/// The trees of the `use` items in `code` (`pub use` too), each up to its `;`.
fn use_statements(code: &str) -> Vec<String> {
    let mut trees = Vec::new();
    let mut current: Option<String> = None;
    for line in code.lines() {
        let line = line.trim();
        if current.is_none() {
            let item = ["use ", "pub use ", "pub(crate) use ", "pub(super) use "]
                .iter()
                .find_map(|start| line.strip_prefix(start));
            current = item.map(|_| String::new());
        }
        if let Some(tree) = current.as_mut() {
            tree.push_str(line);
            if line.ends_with(';') {
                let text = std::mem::take(tree);
                let text = text.split_once("use ").map_or(text.as_str(), |(_, rest)| rest).trim_end_matches(';');
                trees.push(text.to_string());
                current = None;
            }
        }
    }
    trees
}

/// `a::{b, c::{d, e}}` as `a::b`, `a::c::d`, `a::c::e`.
fn expand_use(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else { return vec![tree.to_string()] };
    let close = tree.rfind('}').unwrap();
    let (prefix, inner) = (&tree[..open], &tree[open + 1..close]);
    let (mut parts, mut depth, mut current) = (Vec::new(), 0, String::new());
    for ch in inner.chars() {
        match ch {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(ch);
    }
    parts.push(current);
    parts.iter().filter(|p| !p.trim().is_empty()).flat_map(|p| expand_use(p)).map(|p| format!("{prefix}{p}")).collect()
}

/// The module a `crate::`/`super::`/`self::` path in `from` names: the longest
/// prefix of it that is a module.
fn resolve(
    modules: &std::collections::BTreeMap<Vec<String>, String>,
    from: &[String],
    path: &str,
) -> Option<Vec<String>> {
    let segments: Vec<&str> = path.split("::").map(|s| s.split(" as ").next().unwrap().trim()).collect();
    let (mut base, rest): (Vec<String>, &[&str]) = match *segments.first()? {
        "crate" => (Vec::new(), &segments[1..]),
        "super" => (from[..from.len().saturating_sub(1)].to_vec(), &segments[1..]),
        "self" => (from.to_vec(), &segments[1..]),
        _ => return None,
    };
    let mut rest = rest;
    while rest.first() == Some(&"super") {
        base.pop();
        rest = &rest[1..];
    }
    base.extend(rest.iter().map(|s| s.to_string()));
    (1..=base.len()).rev().map(|n| base[..n].to_vec()).find(|candidate| modules.contains_key(candidate))
}

/// Which modules each module names. A module and its ancestors are one unit
/// (children use their parent's error type; parents declare their children).
fn module_graph() -> std::collections::BTreeMap<Vec<String>, std::collections::BTreeSet<Vec<String>>> {
    let modules = modules();
    let mut graph = std::collections::BTreeMap::new();
    for (module, code) in &modules {
        let mut names = std::collections::BTreeSet::new();
        let uses = use_statements(code).into_iter().flat_map(|tree| expand_use(&tree));
        let inline = code
            .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
            .filter(|word| word.starts_with("crate::") || word.starts_with("super::"))
            .map(str::to_string);
        for path in uses.chain(inline) {
            if let Some(target) = resolve(&modules, module, &path) {
                let related = target.starts_with(module) || module.starts_with(&target);
                if !related {
                    names.insert(target);
                }
            }
        }
        graph.insert(module.clone(), names);
    }
    graph
}

type Graph = std::collections::BTreeMap<Vec<String>, std::collections::BTreeSet<Vec<String>>>;

/// Every module from which a path of names leads back to itself, with that path.
fn find_cycles(graph: &Graph) -> Vec<String> {
    fn reaches(
        graph: &Graph,
        from: &Vec<String>,
        goal: &Vec<String>,
        seen: &mut std::collections::BTreeSet<Vec<String>>,
        path: &mut Vec<Vec<String>>,
    ) -> bool {
        for next in &graph[from] {
            path.push(next.clone());
            if next == goal || (seen.insert(next.clone()) && reaches(graph, next, goal, seen, path)) {
                return true;
            }
            path.pop();
        }
        false
    }
    let mut cycles = Vec::new();
    for module in graph.keys() {
        let mut path = vec![module.clone()];
        if reaches(graph, module, module, &mut Default::default(), &mut path) {
            cycles.push(path.iter().map(|m| m.join("::")).collect::<Vec<_>>().join(" -> "));
        }
    }
    cycles
}

#[test]
fn no_module_cycle() {
    assert_eq!(find_cycles(&module_graph()), Vec::<String>::new(), "module cycles");
}

#[test]
fn the_cycle_check_sees_a_cycle() {
    // The parser the check rests on: grouped and nested `use` trees, and `super::`.
    assert_eq!(
        expand_use("crate::cache::{layout::{A, B}, lease}"),
        ["crate::cache::layout::A", "crate::cache::layout::B", "crate::cache::lease"]
    );
    let mut graph = module_graph();
    let (plan, layout) =
        (vec!["stage".to_string(), "plan".to_string()], vec!["cache".to_string(), "layout".to_string()]);
    assert!(graph[&plan].contains(&layout));
    // And a cycle, once there is one.
    graph.get_mut(&layout).unwrap().insert(plan);
    let cycles = find_cycles(&graph);
    assert!(cycles.iter().any(|cycle| cycle.starts_with("stage::plan -> ")), "{cycles:?}");
    assert!(cycles.iter().any(|cycle| cycle.starts_with("cache::layout -> stage::plan")), "{cycles:?}");
}

#[test]
fn each_type_has_one_path() {
    for alias in [
        "pub use crate::cache::staging as state",
        "pub use crate::cache::encoder::EncoderKind",
        "pub use crate::cache::input_file::InputFile",
    ] {
        assert_eq!(uses("", alias), Vec::<String>::new(), "{alias}");
    }
}

/// Every function in `src/` longer than `limit` lines, as `file:line name (N lines)`.
/// Relies on rustfmt's layout: a body ends at the first `}` on the `fn`'s indent.
fn functions_longer_than(limit: usize) -> Vec<String> {
    let mut long = Vec::new();
    for file in sources(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src")) {
        let text = std::fs::read_to_string(&file).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (start, line) in lines.iter().enumerate() {
            let code = line.trim_start();
            let indent = &line[..line.len() - code.len()];
            let Some(name) = function_name(code) else { continue };
            // The signature ends at the first line ending in `{` (a body) or `;` (none).
            let Some(open) = (start..lines.len()).find(|&i| lines[i].ends_with('{') || lines[i].ends_with(';')) else {
                continue;
            };
            if lines[open].ends_with(';') {
                continue;
            }
            let close = format!("{indent}}}");
            let end = (open + 1..lines.len()).find(|&i| lines[i] == close).unwrap_or(lines.len() - 1);
            let length = end - start + 1;
            if length > limit {
                long.push(format!("{}:{} {name} ({length} lines)", file.display(), start + 1));
            }
        }
    }
    long
}

/// The name declared by a line starting with `fn` after its qualifiers.
fn function_name(code: &str) -> Option<&str> {
    let mut rest = code;
    for qualifier in ["pub(crate) ", "pub(super) ", "pub ", "const ", "async ", "unsafe ", "extern \"C\" "] {
        rest = rest.strip_prefix(qualifier).unwrap_or(rest);
    }
    let rest = rest.strip_prefix("fn ")?;
    let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_'))?;
    Some(&rest[..end])
}

#[test]
fn no_function_is_over_80_lines() {
    assert_eq!(functions_longer_than(80), Vec::<String>::new());
}

#[test]
fn the_length_check_sees_a_long_function() {
    // The longest function in the tree is found once the limit is below it.
    let longest = functions_longer_than(60);
    assert!(!longest.is_empty(), "no function over 60 lines: lower the probe");
    assert!(longest.iter().all(|f| f.contains(".rs:") && f.ends_with(" lines)")), "{longest:?}");
}
