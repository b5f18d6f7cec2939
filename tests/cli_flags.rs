//! The engine names no flag of this program, and every flag the program names exists: core's
//! errors name settings and `trainer-cli` words them as its flags (app/cli/src/flags.rs), so
//! an error that tells a user to pass `--micro-batch` when the flag is `--batch-size` cannot
//! come from core, nor from the CLI.

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use common::trainer_cli;

/// cargo's own flags, named where a message says how to rebuild.
const CARGO_FLAGS: [&str; 3] = ["--release", "--features", "--workspace"];

fn flags_in(text: &str) -> BTreeSet<String> {
    let mut flags = BTreeSet::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(found) = text[i..].find("--") {
        let start = i + found;
        let mut end = start + 2;
        while end < bytes.len() && (bytes[end].is_ascii_lowercase() || bytes[end] == b'-') {
            end += 1;
        }
        let preceded_by_word = start > 0 && bytes[start - 1].is_ascii_alphanumeric();
        if end > start + 3 && !preceded_by_word {
            flags.insert(text[start..end].trim_end_matches('-').to_string());
        }
        i = end;
    }
    flags
}

/// The string literals of the sources under `dir`, comments left out.
fn source_strings(dir: &Path, out: &mut String) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            source_strings(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            for line in std::fs::read_to_string(&path).unwrap().lines() {
                let code = line.trim_start();
                if code.starts_with("//") {
                    continue;
                }
                // Only what is quoted reaches a user.
                for (n, part) in code.split('"').enumerate() {
                    if n % 2 == 1 {
                        out.push_str(part);
                        out.push('\n');
                    }
                }
            }
        }
    }
}

/// The flags named in the string literals of the sources under `dir`, relative to this
/// crate.
fn named_in(dir: &str) -> BTreeSet<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut strings = String::new();
    source_strings(&root, &mut strings);
    flags_in(&strings)
}

#[test]
fn the_engine_names_no_flag_and_the_cli_only_flags_that_exist() {
    let cargo: BTreeSet<String> = CARGO_FLAGS.iter().map(|f| f.to_string()).collect();
    for engine in ["../../core/src", "../../datasets/src"] {
        let named = named_in(engine);
        let flags: Vec<&String> = named.difference(&cargo).collect();
        assert!(
            flags.is_empty(),
            "{engine} names flags, which only a front-end knows: {flags:?}"
        );
    }

    let mut known = cargo;
    for command in [
        "train", "plan", "bench", "probe", "synth", "features", "eval", "generate",
    ] {
        let output = trainer_cli().args([command, "--help"]).output().unwrap();
        assert!(output.status.success(), "trainer-cli {command} --help");
        known.extend(flags_in(&String::from_utf8_lossy(&output.stdout)));
    }
    assert!(known.contains("--batch-size") && known.contains("--memory-budget"));
    let named = named_in("src");
    assert!(named.contains("--memory-budget"), "the scan finds flags");
    let unknown: Vec<&String> = named.difference(&known).collect();
    assert!(
        unknown.is_empty(),
        "trainer-cli's messages name flags no command has: {unknown:?}"
    );
}
