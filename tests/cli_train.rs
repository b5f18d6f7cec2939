//! `trainer-cli train` end to end on the built-in synthetic dataset (and its recordings, for a
//! resumed run), on flex.

mod common;

use common::{
    assert_step_memory, assert_success, events, run_failing, run_json, safetensors_floats,
    tiny_train, trainer_cli,
};

/// A short run learns: the loss falls and the anomaly AUC on the test split is well above
/// chance. The README's default job reaches a higher AUC with more steps.
#[test]
fn a_short_run_learns_to_tell_anomalies_apart() {
    let out = tempfile::tempdir().unwrap();
    let all = run_json(&[
        "train",
        "--json",
        "--backend",
        "flex",
        "--steps",
        "40",
        "--batch-size",
        "8",
        "--n-patches",
        "4",
        "--machine-ids",
        "2",
        "--train-clips-per-id",
        "20",
        "--out",
        out.path().to_str().unwrap(),
    ]);
    let config = events(&all, "config");
    assert_eq!(config.len(), 1);
    for key in [
        "backend",
        "micro_batch",
        "accumulation",
        "n_patches",
        "stride",
        "effective_batch",
    ] {
        assert!(
            config[0].get(key).is_some(),
            "config event lacks {key}: {}",
            config[0]
        );
    }
    assert_eq!(config[0]["backend"], "flex");
    assert_eq!(config[0]["effective_batch"], 32);

    let steps = events(&all, "step");
    assert_eq!(steps.len(), 40);
    for s in &steps {
        for key in [
            "step",
            "loss",
            "patches_per_s",
            "mem_allocated_bytes",
            "mem_peak_bytes",
        ] {
            assert!(s.get(key).is_some(), "step event lacks {key}: {s}");
        }
        assert_step_memory(s);
    }
    let loss = |range: std::ops::Range<usize>| {
        steps[range.clone()]
            .iter()
            .map(|s| s["loss"].as_f64().unwrap())
            .sum::<f64>()
            / range.len() as f64
    };
    let (early, late) = (loss(0..5), loss(35..40));
    assert!(
        late < 0.7 * early,
        "loss should fall: first steps {early:.4}, last steps {late:.4}"
    );

    let evaluation = events(&all, "evaluation");
    assert_eq!(evaluation.len(), 1);
    let auc = evaluation[0]["auc"].as_f64().unwrap();
    assert!(auc >= 0.7, "AUC {auc} after a short run");
    // McClish-standardised pAUC at max FPR 0.1 spans [0.474, 1] (values against
    // scikit-learn: core's metrics tests); here it is reported overall and per machine ID.
    let pauc = evaluation[0]["pauc"].as_f64().unwrap();
    assert!((0.47..=1.0).contains(&pauc), "pAUC {pauc}");
    for machine in evaluation[0]["per_machine"].as_array().unwrap() {
        assert!(machine["pauc"].as_f64().is_some(), "{machine}");
    }
    assert!(out.path().join("checkpoint.json").is_file());
}

fn with<'a>(common: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
    [common, extra].concat()
}

/// Two runs of the same seed: one uninterrupted, one stopped half-way and resumed, end with
/// the same parameters.
#[test]
fn a_resumed_run_ends_where_the_uninterrupted_one_does() {
    let whole = tempfile::tempdir().unwrap();
    let halves = tempfile::tempdir().unwrap();
    let common = [
        "train",
        "--json",
        "--no-eval",
        "--steps",
        "6",
        "--batch-size",
        "2",
        "--n-patches",
        "2",
        "--gradient-accumulation-steps",
        "2",
        "--machine-ids",
        "2",
        "--train-clips-per-id",
        "5",
        "--seed",
        "9",
        // Fixed so that both runs compute the same way whatever the planner measures.
        "--precision",
        "f32",
        "--no-gradient-checkpointing",
    ];

    run_json(&with(&common, &["--out", whole.path().to_str().unwrap()]));
    let first = run_json(&with(
        &common,
        &[
            "--out",
            halves.path().to_str().unwrap(),
            "--stop-after",
            "3",
        ],
    ));
    let finished = events(&first, "finished");
    assert_eq!(finished[0]["step"], 3);
    assert_eq!(finished[0]["stopped_early"], true);
    let second = run_json(&[
        "train",
        "--json",
        "--no-eval",
        "--resume",
        halves.path().to_str().unwrap(),
    ]);
    let resumed = events(&second, "resumed");
    assert_eq!(resumed.len(), 1);
    assert_eq!(resumed[0]["step"], 3);
    assert_eq!(resumed[0]["changes"], serde_json::json!([]));
    let resumed_steps: Vec<u64> = events(&second, "step")
        .iter()
        .map(|s| s["step"].as_u64().unwrap())
        .collect();
    assert_eq!(resumed_steps, vec![4, 5, 6]);

    let a = safetensors_floats(
        &whole
            .path()
            .join("checkpoints/step-00000006/model.safetensors"),
    );
    let b = safetensors_floats(
        &halves
            .path()
            .join("checkpoints/step-00000006/model.safetensors"),
    );
    assert_eq!(a.len(), b.len());
    assert!(a.len() >= 392_193);
    let worst = a
        .iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0f32, f32::max);
    assert!(worst < 1e-5, "largest parameter difference {worst}");
    // The run did train: parameters moved away from the step-3 checkpoint.
    let before = safetensors_floats(
        &halves
            .path()
            .join("checkpoints/step-00000003/model.safetensors"),
    );
    assert!(before.iter().zip(&a).any(|(x, y)| (x - y).abs() > 1e-4));
}

#[test]
fn bad_flags_and_missing_checkpoints_get_clear_errors() {
    let stderr = run_failing(&["train", "--batch-size", "0"]);
    assert!(
        stderr.contains("--batch-size must be at least 1"),
        "{stderr}"
    );

    let empty = tempfile::tempdir().unwrap();
    let stderr = run_failing(&["train", "--resume", empty.path().to_str().unwrap()]);
    assert!(
        stderr.contains("no checkpoint in") && stderr.contains(empty.path().to_str().unwrap()),
        "{stderr}"
    );

    // A fresh run refuses a directory that holds another run.
    let used = tempfile::tempdir().unwrap();
    let used_path = used.path().to_str().unwrap();
    tiny_train(used.path(), &["--steps", "1"]);
    let stderr = run_failing(&["train", "--steps", "1", "--out", used_path]);
    assert!(
        stderr.contains("already holds a run") && stderr.contains("--resume"),
        "{stderr}"
    );

    let stderr = run_failing(&["train", "--n-patches", "20", "--stride", "64"]);
    assert!(stderr.contains("lower --n-patches or --stride"), "{stderr}");

    // The classifier's settings name their flags, and a generator that is no GAN run
    // names the folder.
    let stderr = run_failing(&["train", "--model", "spec-gan", "--classifier", "cnn"]);
    assert!(
        stderr.contains("--classifier is for --model spec-classifier"),
        "{stderr}"
    );
    let classifier = ["train", "--model", "spec-classifier", "--steps", "1"];
    let stderr = run_failing(&with(&classifier, &["--generated-share", "0.3"]));
    assert!(
        stderr.contains("--generated-share needs --generator"),
        "{stderr}"
    );
    let stderr = run_failing(&with(
        &classifier,
        &["--generator", empty.path().to_str().unwrap()],
    ));
    assert!(
        stderr.contains("no checkpoint in") && stderr.contains(empty.path().to_str().unwrap()),
        "{stderr}"
    );
}

#[test]
fn seed_spellings_are_accepted() {
    let out = tempfile::tempdir().unwrap();
    let all = run_json(&[
        "train",
        "--json",
        "--no-eval",
        "--steps",
        "1",
        "--batch_size",
        "1",
        "--n_patches",
        "2",
        "--gradient_accumulation_steps",
        "2",
        "--machine-ids",
        "1",
        "--train-clips-per-id",
        "3",
        "--out",
        out.path().to_str().unwrap(),
    ]);
    let config = events(&all, "config");
    assert_eq!(config[0]["micro_batch"], 1);
    assert_eq!(config[0]["n_patches"], 2);
    assert_eq!(config[0]["accumulation"], 2);
    assert_eq!(config[0]["effective_batch"], 4);
}

/// The wgpu path trains too, planned on the adapter. CI runs it on Mesa's software Vulkan
/// driver (lavapipe), which `.ci/run` installs; it is slow, so two steps of one patch of the
/// small dcase-ae: the planner's calibration of the default model there (seven steps of up
/// to 16 patches) took 3.5 of this test's 3.6 minutes (docs/BENCHMARKS.md, "CI"). The
/// default model trains on wgpu in `core/tests/recovery.rs` and `wgpu_nearest_code.rs`.
#[test]
fn wgpu_trains_a_few_steps_and_reports_pool_memory() {
    let out = tempfile::tempdir().unwrap();
    // The first adapter as the probe numbers it (lavapipe on CI), addressed through burn.
    let all = tiny_train(
        out.path(),
        &["--device", "wgpu:0", "--steps", "2", "--model", "dcase-ae"],
    );
    let config = events(&all, "config");
    assert_eq!(config[0]["backend"], "wgpu");
    assert_eq!(config[0]["model"], "dcase-ae");
    assert_eq!(config[0]["memory_source"], "device_pool");
    // The planner calibrated and dry-ran on the adapter itself.
    let dry_runs = events(&all, "dry_run");
    assert!(
        dry_runs.last().is_some_and(|d| d["fits"] == true),
        "{dry_runs:?}"
    );
    assert!(dry_runs[0]["measured_peak_bytes"].as_u64().unwrap() > 0);
    assert_eq!(events(&all, "plan").len(), 1);
    let steps = events(&all, "step");
    assert_eq!(steps.len(), 2);
    for s in steps {
        assert!(s["loss"].as_f64().unwrap().is_finite());
        let allocated = assert_step_memory(s);
        assert!(s["mem_reserved_bytes"].as_u64().unwrap() >= allocated);
    }
}

/// The seeds' `--device cpu` trains on flex; a contradiction with --backend is an error.
#[test]
fn device_flag_as_the_seeds_spell_it() {
    let out = tempfile::tempdir().unwrap();
    let all = tiny_train(out.path(), &["--device", "cpu", "--steps", "1"]);
    assert_eq!(events(&all, "config")[0]["backend"], "flex");
    assert!(
        events(&all, "backend_choice").is_empty(),
        "a named device is not an auto choice"
    );

    // One device by the probe's name; one that is not there lists those that are.
    let stderr = run_failing(&["train", "--device", "cuda:7", "--steps", "1"]);
    assert!(
        stderr.contains("no device cuda:7") && stderr.contains("cpu"),
        "{stderr}"
    );
    let stderr = run_failing(&["train", "--device", "tpu"]);
    assert!(stderr.contains("wgpu:0"), "{stderr}");
    let stderr = run_failing(&["train", "--device", "cpu", "--backend", "wgpu"]);
    assert!(
        stderr.contains("--backend wgpu and --device cpu disagree"),
        "{stderr}"
    );
}

/// `--resume` with flags: what may change between sessions is applied and said; what would
/// make it another run is refused by name, and the saved run is left as it was.
#[test]
fn a_resumed_run_applies_safe_flags_and_refuses_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().to_str().unwrap();
    let common = [
        "train",
        "--json",
        "--no-eval",
        "--batch-size",
        "2",
        "--n-patches",
        "2",
        "--gradient-accumulation-steps",
        "1",
        "--machine-ids",
        "1",
        "--train-clips-per-id",
        "4",
        "--no-plan",
    ];
    run_json(&with(&common, &["--steps", "2", "--out", run]));
    let stderr = run_failing(&[
        "train", "--resume", run, "--lr", "0.5", "--seed", "77", "--steps", "4",
    ]);
    assert!(stderr.contains("--lr 0.5"), "{stderr}");
    assert!(stderr.contains("--seed 77"), "{stderr}");
    assert!(
        !stderr.contains("--steps 4"),
        "--steps is not refused: {stderr}"
    );
    assert_eq!(
        stderr.lines().filter(|l| !l.is_empty()).count(),
        1,
        "{stderr}"
    );

    let second = run_json(&[
        "train",
        "--json",
        "--no-eval",
        "--resume",
        run,
        "--steps",
        "4",
        "--checkpoint-every",
        "1",
    ]);
    let resumed = events(&second, "resumed");
    let said = resumed[0]["changes"].to_string();
    assert!(said.contains("--steps 4 (was --steps 2)"), "{said}");
    assert!(said.contains("--checkpoint-every 1"), "{said}");
    let checkpoints: Vec<u64> = events(&second, "checkpoint")
        .iter()
        .map(|c| c["step"].as_u64().unwrap())
        .collect();
    assert_eq!(checkpoints, vec![3, 4], "the new interval is applied");
}

/// A run on recordings continues from the same folder at another path (the folder moved, or
/// a page's run, which saves only the folder's name), said as a change; another folder is
/// refused by name.
#[test]
fn a_run_on_a_moved_folder_resumes_there_and_another_folder_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = |p: &str| dir.path().join(p).to_str().unwrap().to_string();
    let (first, moved, run) = (path("a/recordings"), path("b/recordings"), path("run"));
    let synth = [
        "synth",
        "--out",
        &first,
        "--machine-ids",
        "1",
        "--train-clips-per-id",
        "8",
        "--test-clips-per-id",
        "2",
        "--seconds",
        "4",
    ];
    let output = trainer_cli()
        .args(synth)
        .output()
        .expect("trainer-cli starts");
    assert_success(&output, &synth);
    let split = [
        "--json",
        "--no-eval",
        "--backend",
        "flex",
        "--no-plan",
        "--batch-size",
        "2",
        "--n-patches",
        "2",
        "--gradient-accumulation-steps",
        "1",
    ];
    run_json(&with(
        &["train"],
        &with(
            &split,
            &["--data-root", &first, "--steps", "2", "--out", &run],
        ),
    ));
    std::fs::create_dir_all(dir.path().join("b")).unwrap();
    std::fs::rename(&first, &moved).unwrap();
    let resumed = run_json(&[
        "train",
        "--json",
        "--no-eval",
        "--resume",
        &run,
        "--steps",
        "3",
        "--data-root",
        &moved,
    ]);
    let said = events(&resumed, "resumed")[0]["changes"].to_string();
    assert!(
        said.contains(&format!("--data-root {moved} (was {first}")),
        "{said}"
    );
    let steps: Vec<u64> = events(&resumed, "step")
        .iter()
        .map(|s| s["step"].as_u64().unwrap())
        .collect();
    assert_eq!(steps, [3]);
    let other = path("b/other");
    let stderr = run_failing(&[
        "train",
        "--resume",
        &run,
        "--steps",
        "4",
        "--data-root",
        &other,
    ]);
    assert!(
        stderr.contains(&format!("--data-root {other} (the run has {moved})")),
        "{stderr}"
    );
}
