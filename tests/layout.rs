//! The workspace's layout rules, checked on its sources:
//! - dependencies point one way: in no crate do modules refer to each other in a circle;
//! - no source file is over 600 lines;
//! - every relative link in the README and `docs/` leads to a file, and its `#anchor` to a
//!   heading there; the README's test command is the one `.ci/run` runs.
//!
//! Modules are compared where they meet: a file's reference to another module counts
//! between the two sibling modules under their lowest common parent (`crate::plan` from
//! `train/steps.rs` ties `train` to `plan`; `super::read_ahead` there ties `train::steps` to
//! `train::read_ahead`). A module's references to its own parent or children (a folder's
//! `mod.rs` re-exporting its parts, a part using the folder's types) are its inside, not a
//! circle. Every line counts: multi-line `use` groups, code after a unit-test module; only
//! comments, string literals and `#[cfg(test)]` items are left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The longest a source file may be.
const MAX_LINES: usize = 600;

fn root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize().unwrap_or(root)
}

/// The workspace's member crates: every folder the root manifest lists as a member.
fn crates() -> Vec<PathBuf> {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).expect("Cargo.toml");
    let members = manifest
        .lines()
        .find(|l| l.starts_with("members"))
        .expect("a members line");
    members
        .split('"')
        .skip(1)
        .step_by(2)
        .map(|m| root().join(m))
        .collect()
}

fn rust_files(dir: &Path, files: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

/// The module path of a file under `src/` (`train/mod.rs` and `train.rs` are `["train"]`;
/// `lib.rs` and `main.rs` are the crate's root, `[]`).
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src).expect("under src");
    let mut parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The text with comments and string and character literals blanked, so that only code
/// is read.
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let at = |k: usize| chars.get(k).copied().unwrap_or('\0');
        let rest = |k: usize| at(i + k);
        match chars[i] {
            '/' if rest(1) == '/' => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '/' if rest(1) == '*' => {
                i += 2;
                while i < chars.len() && !(chars[i] == '*' && at(i + 1) == '/') {
                    i += 1;
                }
                i += 2;
            }
            'r' if matches!(rest(1), '#' | '"') && (i == 0 || !is_ident(chars[i - 1])) => {
                // A raw string: r"..." or r#"..."#.
                let mut hashes = 0;
                let mut j = i + 1;
                while chars.get(j) == Some(&'#') {
                    hashes += 1;
                    j += 1;
                }
                if chars.get(j) != Some(&'"') {
                    out.push(chars[i]);
                    i += 1;
                    continue;
                }
                j += 1;
                let closing: String = std::iter::once('"')
                    .chain(std::iter::repeat_n('#', hashes))
                    .collect();
                let closing: Vec<char> = closing.chars().collect();
                while j < chars.len() && !chars[j..].starts_with(&closing) {
                    j += 1;
                }
                i = j + closing.len();
                out.push_str("\"\"");
            }
            '"' => {
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    i += if chars[i] == '\\' { 2 } else { 1 };
                }
                i += 1;
                out.push_str("\"\"");
            }
            // A character literal ('x', '\n', '"'), not a lifetime ('a).
            '\'' if rest(1) == '\\' || rest(2) == '\'' => {
                i += 1;
                while i < chars.len() && chars[i] != '\'' {
                    i += if chars[i] == '\\' { 2 } else { 1 };
                }
                i += 1;
                out.push_str("' '");
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The code with every `#[cfg(test)]` item taken out (a test module, a test-only import or
/// function), and the names of test-only module files (`#[cfg(test)] mod tests;`).
fn without_tests(code: &str) -> (String, Vec<String>) {
    let mut out = String::new();
    let mut test_files = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let item = &rest[at + "#[cfg(test)]".len()..];
        let bytes = item.as_bytes();
        let (mut depth, mut end) = (0usize, item.len());
        for (k, &b) in bytes.iter().enumerate() {
            match b {
                b'{' => depth += 1,
                b'}' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        end = k + 1;
                        break;
                    }
                }
                b';' if depth == 0 => {
                    end = k + 1;
                    break;
                }
                _ => {}
            }
        }
        let words: Vec<&str> = item[..end].split_whitespace().collect();
        if let Some(i) = words.iter().position(|w| *w == "mod")
            && let Some(name) = words.get(i + 1)
            && name.ends_with(';')
        {
            test_files.push(name.trim_end_matches(';').to_string());
        }
        rest = &item[end..];
    }
    out.push_str(rest);
    (out, test_files)
}

/// Every path a `crate::` or `super::` reference names, expanded over `{...}` groups, with
/// its start (`crate` or `super`): `use crate::{a::b, c}` gives `[crate, a, b]` and
/// `[crate, c]`.
fn references(code: &str) -> Vec<Vec<String>> {
    let chars: Vec<char> = code.chars().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let starts_word = i == 0 || !is_ident(chars[i - 1]) && chars[i - 1] != ':';
        let word: String = chars[i..].iter().take_while(|c| is_ident(**c)).collect();
        if starts_word && (word == "crate" || word == "super") {
            let (paths, end) = path_tree(&chars, i);
            found.extend(paths.into_iter().filter(|p| p.len() > 1));
            i = end.max(i + 1);
        } else {
            i += word.len().max(1);
        }
    }
    found
}

/// The paths of the tree starting at `i` (`a::b::{c, d::e}`), and where it ends.
fn path_tree(chars: &[char], mut i: usize) -> (Vec<Vec<String>>, usize) {
    let skip_space = |i: &mut usize| {
        while chars.get(*i).is_some_and(|c| c.is_whitespace()) {
            *i += 1;
        }
    };
    let mut prefix = Vec::new();
    loop {
        skip_space(&mut i);
        if chars.get(i) == Some(&'{') {
            i += 1;
            let mut paths = Vec::new();
            loop {
                skip_space(&mut i);
                match chars.get(i) {
                    Some('}') => {
                        i += 1;
                        break;
                    }
                    Some(',') => i += 1,
                    Some(_) => {
                        let (inner, end) = path_tree(chars, i);
                        for p in inner {
                            let mut whole = prefix.clone();
                            whole.extend(p.into_iter().filter(|s| s != "self"));
                            paths.push(whole);
                        }
                        if end == i {
                            i += 1;
                        } else {
                            i = end;
                        }
                    }
                    None => break,
                }
            }
            return (paths, i);
        }
        let word: String = chars[i..].iter().take_while(|c| is_ident(**c)).collect();
        if word.is_empty() {
            return (vec![prefix], i);
        }
        i += word.len();
        prefix.push(word);
        skip_space(&mut i);
        if chars.get(i) == Some(&':') && chars.get(i + 1) == Some(&':') {
            i += 2;
        } else {
            return (vec![prefix], i);
        }
    }
}

/// One crate's modules (by path) and, for each, the sibling modules it refers to.
type Graph = BTreeMap<Vec<String>, BTreeSet<Vec<String>>>;

fn crate_graph(src: &Path) -> Graph {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| module_of(src, f)).collect();
    let mut read: Vec<(Vec<String>, String)> = Vec::new();
    let mut test_only: BTreeSet<Vec<String>> = BTreeSet::new();
    for file in &files {
        let module = module_of(src, file);
        let text = std::fs::read_to_string(file).expect("readable source");
        let (code, test_files) = without_tests(&code_only(&text));
        for name in test_files {
            let mut m = module.clone();
            // `mod tests;` in `a.rs` or `a/mod.rs` is `a::tests`.
            m.push(name);
            test_only.insert(m);
        }
        read.push((module, code));
    }
    let mut graph = Graph::new();
    for (module, code) in read {
        if test_only.iter().any(|t| module.starts_with(t)) {
            continue;
        }
        let uses = graph.entry(module.clone()).or_default();
        for path in references(&code) {
            let absolute: Vec<String> = if path[0] == "crate" {
                path[1..].to_vec()
            } else {
                // `super` is the parent of the file's module, once per `super`.
                let ups = path.iter().take_while(|p| *p == "super").count();
                let mut base = module.clone();
                base.truncate(module.len().saturating_sub(ups));
                base.extend(path[ups..].iter().cloned());
                base
            };
            // The module named: the longest prefix that is a module of the crate.
            let Some(target) = (1..=absolute.len())
                .rev()
                .map(|n| absolute[..n].to_vec())
                .find(|m| modules.contains(m))
            else {
                continue;
            };
            let common = module
                .iter()
                .zip(&target)
                .take_while(|(a, b)| a == b)
                .count();
            // An ancestor or a descendant: the module's own inside.
            if common == module.len() || common == target.len() {
                continue;
            }
            uses.insert(target[..=common].to_vec());
        }
    }
    // Edges run between siblings; a file deeper inside a sibling speaks for it.
    let mut siblings = Graph::new();
    for (module, targets) in graph {
        for target in targets {
            let depth = target.len();
            siblings
                .entry(module[..depth].to_vec())
                .or_default()
                .insert(target);
        }
    }
    siblings
}

/// A path of modules from `from` back to itself, if there is one.
fn circle_through(graph: &Graph, from: &[String]) -> Option<Vec<Vec<String>>> {
    let mut stack = vec![vec![from.to_vec()]];
    let mut seen = BTreeSet::new();
    while let Some(path) = stack.pop() {
        let last = path.last()?;
        for next in graph.get(last).into_iter().flatten() {
            if next.as_slice() == from {
                let mut circle = path.clone();
                circle.push(next.clone());
                return Some(circle);
            }
            if seen.insert(next.clone()) {
                let mut longer = path.clone();
                longer.push(next.clone());
                stack.push(longer);
            }
        }
    }
    None
}

fn circles(graph: &Graph) -> Vec<String> {
    graph
        .keys()
        .filter_map(|m| circle_through(graph, m))
        .map(|c| {
            c.iter()
                .map(|m| m.join("::"))
                .collect::<Vec<_>>()
                .join(" -> ")
        })
        .collect()
}

#[test]
fn no_crate_has_a_module_circle() {
    let mut found = Vec::new();
    let mut read = 0;
    for krate in crates() {
        let src = krate.join("src");
        let graph = crate_graph(&src);
        read += graph.len();
        for circle in circles(&graph) {
            found.push(format!("{}: {circle}", krate.display()));
        }
    }
    // The reader found the engine's modules and their ties.
    let core = crate_graph(&root().join("core/src"));
    let train = vec!["train".to_string()];
    assert!(
        core[&train].contains(&vec!["plan".to_string()]),
        "{core:#?}"
    );
    assert!(read > 50, "only {read} modules read");
    assert!(
        found.is_empty(),
        "modules refer to each other in a circle; move what both need below them:\n{}",
        found.join("\n")
    );
}

#[test]
fn no_source_file_is_over_the_limit() {
    let mut files = Vec::new();
    for dir in [
        "core", "datasets", "shaders", "app", "tests", "bench", "fuzz",
    ] {
        rust_files(&root().join(dir), &mut files);
    }
    assert!(files.len() > 100, "only {} files found", files.len());
    let long: Vec<String> = files
        .iter()
        .filter(|f| !f.components().any(|c| c.as_os_str() == "target"))
        .filter_map(|f| {
            let lines = std::fs::read_to_string(f).ok()?.lines().count();
            (lines > MAX_LINES).then(|| format!("{} ({lines} lines)", f.display()))
        })
        .collect();
    assert!(
        long.is_empty(),
        "split these into modules that each do one job (at most {MAX_LINES} lines): {long:#?}"
    );
}

#[test]
fn the_reader_sees_references_and_circles() {
    let code = code_only(
        "use crate::{events::Event, plan::{Plan, search::{self, Fixed}}};\n\
         // crate::commented::Out\n\
         let s = \"crate::in_a_string\"; x = crate::size::human(1); use super::sibling::X;\n\
         #[cfg(test)]\nmod tests { use crate::only_tests::T; }\nuse crate::after::Tests;",
    );
    let (code, _) = without_tests(&code);
    let paths: Vec<String> = references(&code).iter().map(|p| p.join("::")).collect();
    assert_eq!(
        paths,
        [
            "crate::events::Event",
            "crate::plan::Plan",
            "crate::plan::search",
            "crate::plan::search::Fixed",
            "crate::size::human",
            "super::sibling::X",
            "crate::after::Tests",
        ]
    );
    let (_, files) = without_tests("#[cfg(test)]\nmod tests;\nfn a() {}");
    assert_eq!(files, ["tests"]);
    let m = |s: &str| s.split("::").map(String::from).collect::<Vec<_>>();
    let mut graph = Graph::new();
    graph.insert(m("a"), BTreeSet::from([m("b")]));
    graph.insert(m("b"), BTreeSet::from([m("a")]));
    graph.insert(m("c"), BTreeSet::from([m("a")]));
    assert_eq!(
        circle_through(&graph, &m("a")),
        Some(vec![m("a"), m("b"), m("a")])
    );
    assert_eq!(circle_through(&graph, &m("c")), None);
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The Markdown a reader follows links through: the README and `docs/*.md`.
fn markdown_files() -> Vec<PathBuf> {
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/")
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    docs.insert(0, root().join("README.md"));
    docs
}

/// A Markdown text's lines outside fenced code blocks.
fn outside_fences(text: &str) -> Vec<&str> {
    let mut fenced = false;
    text.lines()
        .filter(|line| {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .collect()
}

/// Every link target in a Markdown text (`[text](target)`, `![alt](target)`), code left out.
fn link_targets(text: &str) -> Vec<String> {
    let prose: String = outside_fences(text)
        .iter()
        .flat_map(|line| line.split('`').step_by(2).chain(["\n"]))
        .collect();
    prose
        .match_indices("](")
        .filter_map(|(i, _)| {
            let rest = &prose[i + 2..];
            Some(rest[..rest.find(')')?].trim().to_string())
        })
        .collect()
}

/// The anchors of a Markdown text's headings, as GitHub makes them: lower case, punctuation
/// dropped, spaces as hyphens, a repeated heading's anchor numbered (`-1`, `-2`).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut anchors = BTreeSet::new();
    for line in outside_fences(text) {
        let title = line.trim_start_matches('#');
        if title.len() == line.len() || title.len() + 6 < line.len() || !title.starts_with(' ') {
            continue;
        }
        let slug: String = title
            .trim()
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect();
        let count = seen.entry(slug.clone()).or_default();
        anchors.insert(match *count {
            0 => slug,
            n => format!("{slug}-{n}"),
        });
        *count += 1;
    }
    anchors
}

#[test]
fn every_relative_link_in_the_docs_leads_somewhere() {
    let heading =
        anchors("# Title\n```sh\n# a comment\n```\n### `speech-clap`: a step's plan\n## A\n## A");
    assert_eq!(
        heading,
        BTreeSet::from(["title", "speech-clap-a-steps-plan", "a", "a-1"].map(String::from))
    );
    assert_eq!(
        link_targets("[a](x.md#b) `[c](d)` ![e](f.png)\n```\n[g](h)\n```"),
        ["x.md#b", "f.png"]
    );
    let mut broken = Vec::new();
    let files = markdown_files();
    assert!(files.len() > 5, "only {} Markdown files found", files.len());
    for file in &files {
        for target in link_targets(&read(file)) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let dest = match path {
                "" => file.clone(),
                path => file.parent().expect("a folder").join(path),
            };
            let name = file.strip_prefix(root()).unwrap_or(file).display();
            if !dest.exists() {
                broken.push(format!("{name}: {target} (no such file)"));
            } else if !anchor.is_empty()
                && dest.extension().is_some_and(|e| e == "md")
                && !anchors(&read(&dest)).contains(anchor)
            {
                broken.push(format!("{name}: {target} (no such heading)"));
            }
        }
    }
    assert!(broken.is_empty(), "links that lead nowhere: {broken:#?}");
}

/// CI runs the README's test command verbatim, so what the README promises is what is tested.
#[test]
fn ci_runs_the_readmes_test_command() {
    let readme = read(&root().join("README.md"));
    let commands: Vec<&str> = readme.lines().map(str::trim).collect();
    let main_job = "cargo run --release -p trainer-cli -- train --backend auto";
    assert!(
        commands.contains(&main_job),
        "the README's first command: {main_job}"
    );
    let test = commands
        .iter()
        .find(|line| line.starts_with("cargo test"))
        .expect("the README's test command");
    assert_eq!(*test, "cargo test --workspace --release");
    let ci = read(&root().join(".ci/run"));
    assert!(
        ci.lines().any(|line| line.trim() == *test),
        ".ci/run does not run the README's test command `{test}`"
    );
}
