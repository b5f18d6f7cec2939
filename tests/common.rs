//! Helpers shared by the end-to-end tests: run trainer-cli, read its JSON events.

#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

/// trainer-cli, keeping what it caches (the what-if's calibrations) in this test process's
/// own directory rather than the user's: a test measures what it asks, and writes nothing
/// outside the temporary directory.
pub fn trainer_cli() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_trainer-cli"));
    command.env("HEADROOM_CACHE_DIR", test_cache_dir());
    command
}

/// A directory of this test process (removed by the system's temporary-file cleaning).
pub fn test_cache_dir() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("headroom-test-cache-{}", std::process::id()))
}

/// Runs trainer-cli and returns its stdout parsed as one JSON value per line.
pub fn run_json(args: &[&str]) -> Vec<Value> {
    run_json_in(&test_cache_dir(), args)
}

/// As [`run_json`], with what trainer-cli keeps between runs in `cache` (a test that must
/// not read what another test kept).
pub fn run_json_in(cache: &Path, args: &[&str]) -> Vec<Value> {
    let output = trainer_cli()
        .env("HEADROOM_CACHE_DIR", cache)
        .args(args)
        .output()
        .expect("trainer-cli starts");
    assert_success(&output, args);
    String::from_utf8(output.stdout)
        .expect("stdout is UTF-8")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

pub fn assert_success(output: &Output, args: &[&str]) {
    assert!(
        output.status.success(),
        "trainer-cli {args:?} failed: {}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

pub fn events<'a>(all: &'a [Value], kind: &str) -> Vec<&'a Value> {
    all.iter().filter(|e| e["event"] == kind).collect()
}

/// The float tensors of a safetensors file, in file order (the header is JSON after an
/// 8-byte length; the model is f32 throughout).
pub fn safetensors_floats(path: &Path) -> Vec<f32> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    bytes[8 + header_len..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Runs trainer-cli and parses its whole stdout as one JSON document.
pub fn run_json_document(args: &[&str]) -> Value {
    let output = trainer_cli()
        .args(args)
        .output()
        .expect("trainer-cli starts");
    assert_success(&output, args);
    serde_json::from_slice(&output.stdout).expect("stdout is one JSON document")
}

/// `train --json --no-eval` on the smallest dataset (one machine ID, two train clips) with
/// one patch per step, into `out`, plus `extra` flags (which must not repeat these).
pub fn tiny_train(out: &Path, extra: &[&str]) -> Vec<Value> {
    let out = out.to_str().expect("temporary paths are UTF-8");
    let mut args = vec![
        "train",
        "--json",
        "--no-eval",
        "--machine-ids",
        "1",
        "--train-clips-per-id",
        "2",
        "--batch-size",
        "1",
        "--n-patches",
        "1",
        "--out",
        out,
    ];
    args.extend_from_slice(extra);
    run_json(&args)
}

/// Runs trainer-cli expecting it to fail, and returns what it said on stderr.
pub fn run_failing(args: &[&str]) -> String {
    let output = trainer_cli()
        .args(args)
        .output()
        .expect("trainer-cli starts");
    assert!(
        !output.status.success(),
        "trainer-cli {args:?} should have failed"
    );
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// `train --json --no-eval --backend flex` on one machine ID with `clips_per_id` train clips,
/// into `out`, plus `extra` flags.
pub fn flex_train(out: &Path, clips_per_id: usize, extra: &[&str]) -> Vec<Value> {
    let clips = clips_per_id.to_string();
    let out = out.to_str().expect("temporary paths are UTF-8");
    let mut args = vec![
        "train",
        "--json",
        "--no-eval",
        "--backend",
        "flex",
        "--machine-ids",
        "1",
        "--train-clips-per-id",
        &clips,
        "--out",
        out,
    ];
    args.extend_from_slice(extra);
    run_json(&args)
}

/// A step event's memory figures are measured: something allocated, and a peak at least that.
/// Returns the allocated bytes.
pub fn assert_step_memory(step: &Value) -> u64 {
    let (allocated, peak) = (
        step["mem_allocated_bytes"].as_u64().unwrap(),
        step["mem_peak_bytes"].as_u64().unwrap(),
    );
    assert!(
        allocated > 0 && peak >= allocated,
        "allocated {allocated}, peak {peak}"
    );
    allocated
}

/// Checks the challenge's score files that `eval --out scores` wrote for `machine_type`: one
/// `anomaly_score_<type>_id_<id>.csv` per ID of `report["per_machine"]`, naming each test
/// clip of that ID once (`per_label` normal and as many anomalous), whose AUC recomputed
/// from the file is the one reported.
pub fn assert_score_files(scores: &Path, machine_type: &str, report: &Value, per_label: usize) {
    let machines = report["per_machine"].as_array().expect("per_machine");
    assert!(!machines.is_empty(), "{report}");
    for machine in machines {
        let id = format!("{:02}", machine["machine_id"].as_u64().expect("an ID"));
        let file = scores.join(format!("anomaly_score_{machine_type}_id_{id}.csv"));
        let text =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let (mut normal, mut anomalous) = (Vec::new(), Vec::new());
        for line in text.lines() {
            let (name, score) = line.split_once(',').expect("name,score");
            assert!(
                name.ends_with(".wav") && name.contains(&format!("_id_{id}_")),
                "{line}"
            );
            let score: f64 = score.parse().expect("a number");
            assert!(score.is_finite(), "{line}");
            if name.starts_with("anomaly") {
                anomalous.push(score);
            } else {
                normal.push(score);
            }
        }
        assert_eq!((normal.len(), anomalous.len()), (per_label, per_label));
        let recomputed = headroom_core::metrics::roc_auc(&normal, &anomalous).unwrap();
        assert_eq!(
            recomputed,
            machine["auc"].as_f64().unwrap(),
            "{machine_type} id {id}"
        );
    }
}
