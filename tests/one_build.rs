//! One burn build per profile: each command of the README (the main job, the app, the tests)
//! resolves every dependency's features as the whole workspace does, so whichever runs first
//! compiles burn and the others reuse it. `workspace-hack/` asks for the union; this fails
//! when a dependency change makes a selection resolve differently, and names the crates.
//! Limit: `cargo tree` names a crate built for both the build scripts (host) and the program
//! once, and this merges the two; a difference on the host side only is not seen (trainer-gui
//! after trainer-cli still rebuilds burn through host-built serde, syn...; see
//! docs/BENCHMARKS.md, "A newcomer's first hour").

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

/// Each package in the build, as `name version`, with the features it is built with.
fn resolved(selection: &[&str], edges: &str) -> BTreeMap<String, BTreeSet<String>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let output = Command::new(cargo)
        .current_dir(root)
        .args(["tree", "--locked", "-e", edges, "--prefix", "none"])
        .args(["-f", "{p} {f}"])
        .args(selection)
        .output()
        .expect("cargo runs");
    assert!(
        output.status.success(),
        "cargo tree {selection:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut packages: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let mut parts = line.split_whitespace();
        let (Some(name), Some(version)) = (parts.next(), parts.next()) else {
            continue;
        };
        let features = parts
            .next()
            .filter(|f| !f.starts_with('('))
            .map(|f| f.split(',').map(str::to_string).collect())
            .unwrap_or_default();
        packages
            .entry(format!("{name} {version}"))
            .or_default()
            .extend::<BTreeSet<String>>(features);
    }
    packages
}

fn differences(selection: &[&str], edges: &str) -> Vec<String> {
    let whole = resolved(&["--workspace"], edges);
    let part = resolved(selection, edges);
    assert!(part.keys().any(|p| p.starts_with("burn ")), "burn is built");
    part.iter()
        .filter_map(|(package, features)| {
            let all = whole.get(package)?;
            (all != features).then(|| {
                let missing: Vec<&String> = all.difference(features).collect();
                format!("{package}: without {missing:?}")
            })
        })
        .collect()
}

#[test]
fn the_readmes_commands_resolve_as_the_workspace_does() {
    // The main job and the app (release builds: no dev-dependencies).
    for package in ["trainer-cli", "trainer-gui", "headroom-core"] {
        let diff = differences(&["-p", package], "normal,build");
        assert!(
            diff.is_empty(),
            "`cargo build -p {package}` would build these differently from the workspace, and \
             so compile burn again; add their features to workspace-hack/Cargo.toml: {diff:#?}"
        );
    }
    // Tests of one package against `cargo test --workspace`.
    for package in ["trainer-cli", "headroom-core"] {
        let diff = differences(&["-p", package], "normal,build,dev");
        assert!(
            diff.is_empty(),
            "`cargo test -p {package}` resolves differently from `cargo test --workspace`; \
             add these to workspace-hack/Cargo.toml: {diff:#?}"
        );
    }
}
