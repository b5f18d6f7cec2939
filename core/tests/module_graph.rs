//! Dependencies inside core point one way: configuration, precision, plan and event types at
//! the bottom, the planner and the training loop above them. This reads which top-level
//! modules each module's code names (`crate::x`, outside comments and unit tests) and fails
//! on a circle, naming it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The top-level modules of `src/`, each with the modules its code refers to.
fn module_graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let modules: BTreeSet<String> = std::fs::read_dir(&src)
        .expect("core/src")
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            let name = name.strip_suffix(".rs").unwrap_or(&name).to_string();
            (name != "lib").then_some(name)
        })
        .collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for module in &modules {
        let mut files = Vec::new();
        let file = src.join(format!("{module}.rs"));
        if file.is_file() {
            files.push(file);
        }
        collect_rs(&src.join(module), &mut files);
        let uses = graph.entry(module.clone()).or_default();
        for file in files {
            let text = std::fs::read_to_string(&file).expect("readable source");
            // Unit tests may reach anywhere; what counts is the module's own code.
            let code = text.split("#[cfg(test)]").next().unwrap_or("");
            for line in code.lines() {
                let line = line.split("//").next().unwrap_or("");
                for name in referenced(line) {
                    if name != *module && modules.contains(&name) {
                        uses.insert(name);
                    }
                }
            }
        }
    }
    graph
}

fn collect_rs(dir: &Path, files: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect_rs(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

/// Module names a line refers to: `crate::name` and each name in `use crate::{a, b::c}`.
fn referenced(line: &str) -> Vec<String> {
    let mut names = Vec::new();
    for (i, _) in line.match_indices("crate::") {
        let rest = &line[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let group = group.split('}').next().unwrap_or("");
            names.extend(group.split(',').filter_map(|part| {
                let first = part.trim().split("::").next()?.trim();
                (!first.is_empty()).then(|| first.to_string())
            }));
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            names.push(name);
        }
    }
    names
}

/// A path of modules from `from` back to itself, if there is one.
fn circle_through(graph: &BTreeMap<String, BTreeSet<String>>, from: &str) -> Option<Vec<String>> {
    let mut stack = vec![vec![from.to_string()]];
    let mut seen = BTreeSet::new();
    while let Some(path) = stack.pop() {
        let last = path.last()?;
        for next in graph.get(last).into_iter().flatten() {
            if next == from {
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

#[test]
fn core_modules_form_no_circle() {
    let graph = module_graph();
    assert!(graph.contains_key("train") && graph["train"].contains("plan"));
    let circles: Vec<String> = graph
        .keys()
        .filter_map(|m| circle_through(&graph, m))
        .map(|c| c.join(" -> "))
        .collect();
    assert!(
        circles.is_empty(),
        "modules of core refer to each other in a circle; move what both need below them: \
         {circles:#?}"
    );
}

#[test]
fn the_reader_sees_a_circle_when_there_is_one() {
    let mut graph = BTreeMap::new();
    graph.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    graph.insert("b".to_string(), BTreeSet::from(["a".to_string()]));
    graph.insert("c".to_string(), BTreeSet::from(["a".to_string()]));
    assert_eq!(
        circle_through(&graph, "a"),
        Some(vec!["a".into(), "b".into(), "a".into()])
    );
    assert_eq!(circle_through(&graph, "c"), None);
    assert_eq!(
        referenced("use crate::{events::Event, plan::Plan}; x = crate::memory::human(1);"),
        ["events", "plan", "memory"]
    );
}
