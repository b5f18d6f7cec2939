//! Run files end to end: a run writes its settings as OUT/run.toml, `train --config` of that
//! file trains the same run (its losses bit for bit), flags given beside it win and the run
//! says which, and a file with an unknown key or a value of the wrong type is refused naming
//! the file, the line and the key.

mod common;

use std::path::Path;

use common::{assert_success, events, run_failing, run_json, trainer_cli};
use serde_json::Value;

/// Each step's loss, as the run printed it.
fn losses(run: &[Value]) -> Vec<f64> {
    events(run, "step")
        .iter()
        .map(|s| s["loss"].as_f64().expect("a step has a loss"))
        .collect()
}

/// The settings of a run file: its lines but the header's comments.
fn settings(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .filter(|l| !l.starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n")
}

fn utf8(path: &Path) -> &str {
    path.to_str().expect("temporary paths are UTF-8")
}

#[test]
fn a_runs_file_given_back_trains_the_same_run() {
    let dir = tempfile::tempdir().unwrap();
    let (first, again, changed) = (
        dir.path().join("first"),
        dir.path().join("again"),
        dir.path().join("changed"),
    );
    let run = run_json(&[
        "train",
        "--json",
        "--no-eval",
        "--backend",
        "flex",
        "--threads",
        "2",
        "--steps",
        "4",
        "--machine-ids",
        "1",
        "--train-clips-per-id",
        "4",
        "--out",
        utf8(&first),
    ]);
    let file = first.join("run.toml");
    let written = events(&run, "run_file");
    assert_eq!(written.len(), 1);
    assert_eq!(written[0]["path"], utf8(&file));
    assert!(written[0].get("config").is_none(), "{}", written[0]);
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.starts_with("# A Headroom run: "), "{text}");
    // The run's settings, resolved: the default model and the engine's seed named.
    for line in [
        "model = \"vq-patch-ae\"",
        "backend = \"flex\"",
        "length = { steps = 4 }",
        "seed = 42",
        "machine_ids = 1",
        "budget = { kind = \"free_memory\" }",
    ] {
        assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
    }

    // Only the file, and what is no setting (where to write, the threads): the same run.
    let rerun = run_json(&[
        "train",
        "--json",
        "--no-eval",
        "--threads",
        "2",
        "--config",
        utf8(&file),
        "--out",
        utf8(&again),
    ]);
    let first_losses = losses(&run);
    assert_eq!(first_losses.len(), 4);
    let bits = |losses: &[f64]| losses.iter().map(|l| l.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&losses(&rerun)), bits(&first_losses));
    let read = events(&rerun, "run_file");
    assert_eq!(read[0]["config"], utf8(&file));
    assert!(read[0].get("overridden").is_none(), "{}", read[0]);
    assert_eq!(settings(&again.join("run.toml")), settings(&file));

    // Flags beside the file win, and the run says which.
    let args = [
        "train",
        "--no-eval",
        "--threads",
        "2",
        "--config",
        utf8(&file),
        "--steps",
        "2",
        "--lr",
        "0.002",
        "--out",
        utf8(&changed),
    ];
    let output = trainer_cli().args(args).output().unwrap();
    assert_success(&output, &args);
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(
        said.contains(&format!(
            "config {}; flags override: --steps, --lr",
            file.display()
        )),
        "{said}"
    );
    let changed = settings(&changed.join("run.toml"));
    assert!(changed.contains("length = { steps = 2 }"), "{changed}");
    assert!(changed.contains("lr = 0.002"), "{changed}");
    assert!(changed.contains("backend = \"flex\""), "{changed}");
}

#[test]
fn a_bad_run_file_is_refused_naming_its_key_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("run.toml");
    let refused = |text: &str| {
        std::fs::write(&file, text).unwrap();
        run_failing(&["train", "--json", "--config", utf8(&file)])
    };
    let said = refused("model = \"dcase-ae\"\nseed = 3\nstepz = 4\n");
    for words in [
        utf8(&file),
        "line 3",
        "key `stepz`",
        "unknown field `stepz`",
    ] {
        assert!(said.contains(words), "{words:?} not in: {said}");
    }
    let said = refused("[memory]\nfraction = 0.5\nprecision = 16\n");
    assert!(said.contains("line 3"), "{said}");
    assert!(said.contains("key `memory.precision`"), "{said}");
    let said = refused("lr = \"fast\"\n");
    assert!(
        said.contains("line 1") && said.contains("key `lr`") && said.contains("f64"),
        "{said}"
    );
    let missing = dir.path().join("none.toml");
    let said = run_failing(&["train", "--config", utf8(&missing)]);
    assert!(said.contains("cannot read the run file"), "{said}");
    // A run file starts a run; --resume continues one with its own settings.
    let said = run_failing(&["train", "--config", utf8(&file), "--resume", "runs/x"]);
    assert!(said.contains("cannot be used with"), "{said}");
}
