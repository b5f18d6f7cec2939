//! Runs planned by length are reproducible: the same seed and flags on one machine end with
//! the same parameters, bit for bit, and so does a run stopped half-way, or killed, and
//! resumed.
//!
//! A plan by length packs each step's utterances into micro-batches by predicted time, and
//! timings measured anew differ from run to run: measured each time, two runs of the tiny
//! recogniser ended 1.7e-5 apart after 12 steps (5,885 and 29,092 of 220,758 parameters
//! differing in two tries of this test so). The first run keeps its timings in the cache
//! directory the later ones read; a resumed run packs by those its checkpoint saved, and here
//! runs with an empty cache to show it.

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{events, run_json_in, safetensors_floats, trainer_cli};

/// Two runs and a stopped-and-resumed one of `model` under `budget`, 12 steps each. Each
/// test keeps its timings in a directory of its own: the tests of this file run side by
/// side and two train the recogniser, and a run that read the other test's timings would
/// pack as that test's runs do.
fn three_runs_end_alike(model: &str, extra: &[&str]) {
    let dirs: Vec<tempfile::TempDir> = (0..5).map(|_| tempfile::tempdir().unwrap()).collect();
    let cache = dirs[4].path();
    let out = |i: usize| dirs[i].path().to_str().unwrap().to_string();
    let common = [
        "train",
        "--json",
        "--no-eval",
        "--model",
        model,
        "--backend",
        "flex",
        "--steps",
        "12",
        "--seed",
        "11",
        "--threads",
        "2",
    ];
    let run = |more: &[&str]| run_json_in(cache, &[common.as_slice(), extra, more].concat());
    let first = run(&["--out", &out(0)]);
    let plan = events(&first, "plan");
    assert!(
        plan[0]["lengths"]["buckets"]["seconds"].is_object(),
        "{model}: planned by length, packed by time: {}",
        plan[0]
    );
    run(&["--out", &out(1)]);
    run(&["--out", &out(2), "--stop-after", "6"]);
    run_json_in(dirs[3].path(), &["train", "--json", "--resume", &out(2)]);
    let last = |i: usize| {
        safetensors_floats(
            &dirs[i]
                .path()
                .join("checkpoints/step-00000012/model.safetensors"),
        )
    };
    let whole = last(0);
    assert!(!whole.is_empty());
    for (i, what) in [(1, "a second run"), (2, "the resumed run")] {
        let other = last(i);
        let differ = whole.iter().zip(&other).filter(|(a, b)| a != b).count();
        assert!(
            differ == 0 && other.len() == whole.len(),
            "{model}, {what}: {differ} of {} parameters differ",
            whole.len()
        );
    }
}

#[test]
fn the_tiny_recogniser_at_a_tight_budget() {
    three_runs_end_alike("asr-transformer", &["--memory-budget", "96MiB"]);
}

/// Its steps are cut for gradient caching, and its layer norms' parameter gradients were
/// summed in the order rayon's threads split the rows until 2026-12-07 (1e-6 apart after 8
/// steps with the same plan and packing).
#[test]
fn the_contrastive_model_at_a_tight_budget() {
    three_runs_end_alike(
        "speech-clap",
        &["--memory-budget", "128MiB", "--effective-batch", "64"],
    );
}

/// Killed with SIGKILL (`Child::kill` on Unix) once its first checkpoint is in place, then
/// resumed by a process with no timings kept: the recogniser ends as the uninterrupted run
/// does, bit for bit. Where the kill lands (between steps, inside a step, while a later
/// checkpoint is written) is the machine's; the resumed run starts from the newest complete
/// checkpoint whichever it is.
#[test]
fn a_killed_and_resumed_run_ends_as_the_uninterrupted_one() {
    let [whole, killed, cache, empty] = [(); 4].map(|_| tempfile::tempdir().unwrap());
    let common = [
        "train",
        "--json",
        "--no-eval",
        "--model",
        "asr-transformer",
        "--backend",
        "flex",
        "--memory-budget",
        "96MiB",
        "--steps",
        "24",
        "--checkpoint-every",
        "4",
        "--seed",
        "11",
        "--threads",
        "2",
    ];
    let out = |dir: &tempfile::TempDir| dir.path().to_str().unwrap().to_string();
    run_json_in(
        cache.path(),
        &[common.as_slice(), &["--out", &out(&whole)]].concat(),
    );
    let mut child = trainer_cli()
        .env("HEADROOM_CACHE_DIR", cache.path())
        .args(common)
        .args(["--out", &out(&killed)])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The step directory lands before checkpoint.json points at it; a kill between the two
    // leaves no pointer, and the resumed run starts from the step directory all the same.
    let first = killed.path().join("checkpoints/step-00000004");
    let started = Instant::now();
    while !first.exists() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the run ended ({status}) before its first checkpoint was seen");
        }
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "no checkpoint in 300 s"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert!(!status.success(), "killed, not finished: {status}");
    run_json_in(
        empty.path(),
        &["train", "--json", "--resume", &out(&killed)],
    );
    let last = |dir: &tempfile::TempDir| {
        safetensors_floats(
            &dir.path()
                .join("checkpoints/step-00000024/model.safetensors"),
        )
    };
    let (a, b) = (last(&whole), last(&killed));
    let differ = a.iter().zip(&b).filter(|(x, y)| x != y).count();
    assert!(
        differ == 0 && a.len() == b.len() && !a.is_empty(),
        "{differ} of {} parameters differ",
        a.len()
    );
}
