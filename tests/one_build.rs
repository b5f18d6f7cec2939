//! One burn build per profile: whichever of the README's commands runs first (the main job,
//! the app, the tests) compiles burn, and the others reuse it. `workspace-hack/` asks for the
//! union of every selection's features; this fails when a dependency change makes one command
//! build a crate differently from another, and names the crates.
//!
//! It reads cargo's unit graph: each compilation cargo would run, with its profile, features
//! and dependencies, host builds (build scripts, proc-macros) apart from the program's. Two
//! commands share a compiled crate only when the crate and everything below it are built the
//! same way, so a unit is keyed by itself and its dependencies' keys, as cargo's own hash is.
//! `cargo tree` cannot show this: it prints a crate built for the host and for the program
//! under one name, which hid the host-side difference through which trainer-gui rebuilt burn.
//! The unit graph is unstable cargo output; `RUSTC_BOOTSTRAP=1` lets this stable cargo print
//! it, for this read-only query only.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// Where a compiled crate would live: the package, its target, what cargo does with it and the
/// profile. Two commands that each compile the same slot must produce the same unit there, or
/// the second one compiles it again.
type Slot = (String, String, String, String);

/// Every unit a cargo command would compile, by slot, each as a hash of itself and its
/// dependencies.
fn units(command: &[&str]) -> BTreeMap<Slot, BTreeSet<u64>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let output = Command::new(cargo)
        .current_dir(root)
        .env("RUSTC_BOOTSTRAP", "1")
        .args(command)
        .args(["--locked", "--unit-graph", "-Z", "unstable-options"])
        .output()
        .expect("cargo runs");
    assert!(
        output.status.success(),
        "cargo {command:?} --unit-graph: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let graph: Value = serde_json::from_slice(&output.stdout).expect("the unit graph is JSON");
    let units = graph["units"].as_array().expect("units");

    fn key(i: usize, units: &[Value], memo: &mut HashMap<usize, u64>) -> u64 {
        if let Some(&k) = memo.get(&i) {
            return k;
        }
        let unit = &units[i];
        let mut deps: Vec<u64> = unit["dependencies"]
            .as_array()
            .expect("dependencies")
            .iter()
            .map(|d| key(d["index"].as_u64().expect("index") as usize, units, memo))
            .collect();
        deps.sort_unstable();
        let mut hasher = DefaultHasher::new();
        for field in [
            "pkg_id", "target", "mode", "profile", "platform", "features",
        ] {
            unit[field].to_string().hash(&mut hasher);
        }
        deps.hash(&mut hasher);
        let k = hasher.finish();
        memo.insert(i, k);
        k
    }

    let mut memo = HashMap::new();
    let mut slots: BTreeMap<Slot, BTreeSet<u64>> = BTreeMap::new();
    for (i, unit) in units.iter().enumerate() {
        let package = unit["pkg_id"].as_str().expect("pkg_id");
        let package = package.rsplit('#').next().unwrap_or(package).to_string();
        let slot = (
            package,
            unit["target"]["name"].to_string(),
            unit["mode"].to_string(),
            unit["profile"].to_string(),
        );
        slots
            .entry(slot)
            .or_default()
            .insert(key(i, units, &mut memo));
    }
    slots
}

/// The crates that `second`, run after `first`, would compile again although `first` compiled
/// them already (same package, target and profile, built another way).
fn rebuilt(
    second: &BTreeMap<Slot, BTreeSet<u64>>,
    first: &BTreeMap<Slot, BTreeSet<u64>>,
) -> Vec<String> {
    second
        .iter()
        .filter(|(slot, built)| {
            first
                .get(*slot)
                .is_some_and(|before| !built.is_subset(before))
        })
        .map(|((package, _, mode, _), _)| format!("{package} ({mode})"))
        .collect()
}

fn assert_each_reuses_the_others(commands: &[&[&str]]) {
    let graphs: Vec<_> = commands.iter().map(|c| units(c)).collect();
    for (i, second) in graphs.iter().enumerate() {
        assert!(
            second
                .keys()
                .any(|(package, ..)| package.starts_with("burn@")),
            "`cargo {:?}` builds burn",
            commands[i]
        );
        for (j, first) in graphs.iter().enumerate() {
            if i == j {
                continue;
            }
            let again = rebuilt(second, first);
            assert!(
                again.is_empty(),
                "`cargo {:?}` after `cargo {:?}` would compile these again; give \
                 workspace-hack/Cargo.toml the features that differ (host-side ones under \
                 [build-dependencies]): {again:#?}",
                commands[i],
                commands[j]
            );
        }
    }
}

#[test]
fn the_readmes_release_commands_share_one_burn_build() {
    assert_each_reuses_the_others(&[
        &["build", "--release", "-p", "trainer-cli"],
        &["build", "--release", "-p", "trainer-gui"],
        &["build", "--release", "--workspace"],
    ]);
}

/// The README's two commands: the main job's build serves the tests.
#[test]
fn the_tests_reuse_the_main_jobs_build() {
    assert_each_reuses_the_others(&[
        &["build", "--release", "-p", "trainer-cli"],
        &["test", "--release", "--no-run", "--workspace"],
        &["test", "--release", "--no-run", "-p", "trainer-cli"],
    ]);
}

#[test]
fn tests_of_one_package_share_the_workspaces_test_build() {
    assert_each_reuses_the_others(&[
        &["test", "--no-run", "--workspace"],
        &["test", "--no-run", "-p", "trainer-cli"],
        &["test", "--no-run", "-p", "headroom-core"],
    ]);
}
