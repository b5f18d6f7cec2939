//! Models by name: `trainer-cli models` lists them, `train --model` trains each on the
//! built-in dataset and on a `synth` folder and scores it, a checkpoint of one model is refused as another, and an
//! unknown name lists the known ones.

mod common;

use common::{
    assert_score_files, assert_success, events, run_failing, run_json, run_json_document,
    trainer_cli,
};

/// The loss of each step the run reported.
fn step_losses(all: &[serde_json::Value]) -> Vec<f64> {
    events(all, "step")
        .iter()
        .map(|s| s["loss"].as_f64().unwrap())
        .collect()
}

#[test]
fn the_models_are_listed_with_parameters_and_inputs() {
    let output = trainer_cli()
        .args(["models", "--json"])
        .output()
        .expect("trainer-cli starts");
    assert!(output.status.success());
    let models: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let find = |name: &str| {
        models
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == name)
            .unwrap_or_else(|| panic!("{name} missing from {models}"))
            .clone()
    };
    assert_eq!(find("vq-patch-ae")["parameters"], 392_193);
    let dcase = find("dcase-ae");
    assert_eq!(dcase["parameters"], 267_928);
    // The baseline's batch of 512 frame stacks, 32 from each clip.
    assert_eq!(
        dcase["default_batch"],
        serde_json::json!({"spectrograms": 16, "patches": 32})
    );
    assert_eq!(dcase["input"]["mels"], 128);
    assert_eq!(dcase["input"]["frames"], 5);
    assert!(find("id-classifier")["parameters"].as_u64().unwrap() > 10_000);
}

/// The ID classifier learns the built-in dataset's machine IDs and scores clips by how
/// little it places them as their own machine; with one ID there is nothing to learn.
#[test]
fn id_classifier_trains_and_refuses_a_single_id() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let all = run_json(&[
        "train",
        "--json",
        "--backend",
        "flex",
        "--model",
        "id-classifier",
        "--machine-ids",
        "3",
        "--train-clips-per-id",
        "8",
        "--batch-size",
        "6",
        "--no-plan",
        "--steps",
        "12",
        "--out",
        out.to_str().unwrap(),
    ]);
    let losses = step_losses(&all);
    // Cross-entropy starts near log(3) for three machines and falls as it learns them.
    assert!((0.5..2.5).contains(&losses[0]), "{losses:?}");
    assert!(losses[losses.len() - 1] < losses[0], "{losses:?}");
    assert_eq!(events(&all, "evaluation").len(), 1);

    let err = run_failing(&[
        "train",
        "--model",
        "id-classifier",
        "--machine-ids",
        "1",
        "--steps",
        "1",
        "--no-plan",
        "--out",
        dir.path().join("one").to_str().unwrap(),
    ]);
    assert!(err.contains("only one ID"), "{err}");
}

#[test]
fn an_unknown_model_lists_the_known_ones() {
    let err = run_failing(&["train", "--model", "resnet", "--steps", "1"]);
    assert!(
        err.contains("resnet") && err.contains("vq-patch-ae") && err.contains("dcase-ae"),
        "{err}"
    );
}

/// The DCASE baseline trains on the built-in dataset's 128-mel features, its loss falls, its
/// test split is scored, and its checkpoint is not taken for the default model.
#[test]
fn dcase_ae_trains_scores_and_keeps_its_checkpoint_apart() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let out = out.to_str().unwrap();
    let all = run_json(&[
        "train",
        "--json",
        "--backend",
        "flex",
        "--model",
        "dcase-ae",
        "--machine-ids",
        "2",
        "--train-clips-per-id",
        "12",
        "--n-patches",
        "32",
        "--batch-size",
        "8",
        "--no-plan",
        "--steps",
        "30",
        "--out",
        out,
    ]);
    let config = events(&all, "config");
    assert_eq!(config[0]["parameters"], 267_928);
    let losses = step_losses(&all);
    let (first, last) = (
        losses[..5].iter().sum::<f64>(),
        losses[losses.len() - 5..].iter().sum::<f64>(),
    );
    assert!(last < first, "the loss should fall: {losses:?}");
    let evaluation = events(&all, "evaluation");
    let auc = evaluation[0]["auc"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&auc), "{auc}");

    let scored = dir.path().join("scored");
    let err = run_failing(&[
        "eval",
        "--checkpoint",
        out,
        "--model",
        "vq-patch-ae",
        "--out",
        scored.to_str().unwrap(),
    ]);
    assert!(
        err.contains("dcase-ae") && err.contains("vq-patch-ae"),
        "{err}"
    );
    let err = run_failing(&[
        "train",
        "--resume",
        out,
        "--model",
        "vq-patch-ae",
        "--steps",
        "31",
    ]);
    assert!(err.contains("--model vq-patch-ae"), "{err}");
}

/// Both baselines train on a DCASE folder that `synth` wrote (features computed from the
/// WAV files at each model's own mel count), and `eval` of each checkpoint writes the
/// challenge's score files for every test clip, with the reported AUCs.
#[test]
fn each_baseline_trains_on_a_synth_folder_and_eval_writes_the_challenge_files() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data = data.to_str().unwrap();
    let synth = [
        "synth",
        "--out",
        data,
        "--machine-type",
        "pump",
        "--machine-ids",
        "2",
        "--train-clips-per-id",
        "10",
        "--test-clips-per-id",
        "4",
    ];
    assert_success(&trainer_cli().args(synth).output().unwrap(), &synth);
    for (model, split) in [
        ("dcase-ae", ["--n-patches", "32", "--batch-size", "8"]),
        ("id-classifier", ["--n-patches", "2", "--batch-size", "6"]),
    ] {
        let run = dir.path().join(model);
        let run = run.to_str().unwrap();
        let mut args = vec![
            "train",
            "--json",
            "--backend",
            "flex",
            "--model",
            model,
            "--data-root",
            data,
            "--no-plan",
            "--steps",
            "12",
            "--out",
            run,
        ];
        args.extend(split);
        let all = run_json(&args);
        assert_eq!(events(&all, "config")[0]["model"], model);
        assert_eq!(events(&all, "dataset")[0]["test_clips"], 16);
        let losses = step_losses(&all);
        assert!(losses.iter().all(|l| l.is_finite()), "{model}: {losses:?}");
        let trained = events(&all, "evaluation")[0].clone();

        let scores = dir.path().join(format!("{model}-scores"));
        let report = run_json_document(&[
            "eval",
            "--json",
            "--checkpoint",
            run,
            "--data-root",
            data,
            "--out",
            scores.to_str().unwrap(),
        ]);
        assert_eq!(report["auc"], trained["auc"], "{model}");
        assert_score_files(&scores, "pump", &report, 4);
    }
}

/// The speech recogniser trains through the same `train` command on whole utterances (one
/// example each, never patches), reports CER and WER per split, and `eval` scores its
/// checkpoint into the same table and a results.csv of its own columns.
#[test]
fn the_speech_recogniser_trains_and_reports_its_error_rates() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("asr");
    let all = run_json(&[
        "train",
        "--json",
        "--backend",
        "flex",
        "--model",
        "asr-transformer",
        "--batch-size",
        "4",
        "--no-plan",
        "--steps",
        "3",
        "--out",
        out.to_str().unwrap(),
    ]);
    let losses = step_losses(&all);
    assert_eq!(losses.len(), 3);
    assert!(
        losses.iter().all(|l| l.is_finite() && *l > 0.0),
        "{losses:?}"
    );
    let config = &events(&all, "config")[0];
    assert_eq!(config["model"], "asr-transformer");
    assert_eq!(config["n_patches"], 1, "whole utterances");
    let results = events(&all, "results");
    assert_eq!(results.len(), 1, "one results event, no anomaly scores");
    assert!(events(&all, "evaluation").is_empty());
    let trained = results[0];
    assert_eq!(
        trained["measures"],
        serde_json::json!(["CER", "WER", "attention CER", "attention WER"])
    );
    let rows = trained["rows"].as_array().unwrap();
    assert_eq!(rows[0]["label"], "validation");
    assert_eq!(rows[1]["label"], "test");

    let scores = dir.path().join("scores");
    let report = run_json_document(&[
        "eval",
        "--json",
        "--checkpoint",
        out.to_str().unwrap(),
        "--out",
        scores.to_str().unwrap(),
    ]);
    assert_eq!(
        report["rows"], trained["rows"],
        "eval scores the checkpoint alike"
    );
    let csv = std::fs::read_to_string(scores.join("results.csv")).unwrap();
    assert!(
        csv.starts_with("label,examples,CER,WER,attention CER,attention WER\nvalidation,24,"),
        "{csv}"
    );
}
