//! The built-in dataset can show a regression: the default run scores its graded anomalies
//! well above chance but not perfectly, differently per machine ID, and a model trained for
//! a tenth of the steps scores measurably lower, so a change that makes the model worse
//! shows in the score.

mod common;

use common::{events, run_json};
use serde_json::Value;

fn evaluate(steps: Option<&str>, out: &std::path::Path) -> Value {
    let mut args = vec!["train", "--json", "--backend", "flex"];
    if let Some(steps) = steps {
        args.extend(["--steps", steps]);
    }
    args.extend(["--out", out.to_str().unwrap()]);
    let all = run_json(&args);
    let evaluation = events(&all, "evaluation");
    assert_eq!(evaluation.len(), 1);
    evaluation[0].clone()
}

#[test]
fn the_score_moves_with_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let default = evaluate(None, &dir.path().join("default"));
    let tenth = evaluate(Some("29"), &dir.path().join("tenth"));

    let auc = default["auc"].as_f64().unwrap();
    let pauc = default["pauc"].as_f64().unwrap();
    assert!(
        (0.6..0.97).contains(&auc),
        "the default run's mean AUC {auc} should be well above chance and below 0.97"
    );
    assert!(pauc < auc, "pAUC {pauc} below AUC {auc}, as on real data");
    let per_id: Vec<f64> = default["per_machine"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["auc"].as_f64().unwrap())
        .collect();
    assert_eq!(per_id.len(), 4);
    let (lowest, highest) = per_id
        .iter()
        .fold((1.0f64, 0.0f64), |(lo, hi), &a| (lo.min(a), hi.max(a)));
    assert!(
        highest - lowest > 0.1,
        "machine IDs differ in difficulty: {per_id:?}"
    );

    let short = tenth["auc"].as_f64().unwrap();
    assert!(
        short < auc - 0.03,
        "a tenth of the training scores AUC {short}, the default run {auc}: the score should \
         fall with the model"
    );
}
