//! The speech task trains, plans, resumes and reports its error rates through the engine's
//! one loop, as every kind of training does.

use headroom_datasets::speech::synthetic::SpeechConfig;

use super::AsrConfig;
use crate::events::Event;
use crate::plan::{Fixed, Planning, PlanningError};
use crate::train::{BuiltIn, Evaluation, RunOptions, TaskTrainer};
use crate::{RunLength, TrainConfig};

/// A small corpus: a few dozen short utterances.
fn task() -> AsrConfig {
    AsrConfig {
        corpus: SpeechConfig {
            train: 24,
            validation: 4,
            test: 4,
            median_words: 2.0,
            ..SpeechConfig::default()
        },
        ..AsrConfig::default()
    }
}

fn config(steps: u64) -> TrainConfig {
    let mut config = TrainConfig {
        length: RunLength::Steps(steps),
        validate_every: 0,
        checkpoint_every: 0,
        ..TrainConfig::default()
    };
    task().configure(&mut config);
    config.micro_batch = 4;
    config.accumulation = 2;
    config
}

/// The run saves a checkpoint halfway; continuing from it ends where the run itself did.
/// (Resumed from the run's own checkpoint rather than a second run's: the device's random
/// generator is shared by tests running beside this one, so two runs need not start alike.)
#[test]
fn a_speech_run_trains_resumes_exactly_and_reports_cer_and_wer() {
    let dir = tempfile::tempdir().unwrap();
    let mut run_config = config(6);
    run_config.checkpoint_every = 3;
    let mut whole = TaskTrainer::<AsrConfig>::new(
        run_config,
        RunOptions {
            out_dir: Some(dir.path().to_path_buf()),
            ..RunOptions::default()
        },
    )
    .unwrap();
    let mut events = Vec::new();
    whole.run(&mut events).unwrap();
    let saved: AsrConfig = whole.config().model.config().unwrap();
    let vocabulary = saved
        .vocabulary
        .expect("the vocabulary is saved with the run");
    assert_eq!(vocabulary.len(), 2 + 25, "24 letters and the space");
    assert!(saved.longest.frames > 100, "{:?}", saved.longest);
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::Validation { loss, .. } if loss.is_finite())),
        "a validation loss"
    );

    let halfway = dir.path().join("checkpoints/step-00000003");
    let mut resumed =
        TaskTrainer::<AsrConfig>::resume(&halfway, &Default::default(), RunOptions::default())
            .unwrap();
    assert_eq!(resumed.step(), 3);
    resumed.run(&mut Vec::new()).unwrap();
    let (a, b) = (
        crate::model::flat_parameters(resumed.model()),
        crate::model::flat_parameters(whole.model()),
    );
    let differing = a.iter().zip(&b).filter(|(x, y)| x != y).count();
    assert_eq!(
        differing,
        0,
        "a resumed run ends where the uninterrupted one does ({differing} of {} differ)",
        a.len()
    );

    let Evaluation::Results(results) = whole.evaluate().unwrap() else {
        panic!("a speech run reports its own results")
    };
    assert_eq!(results.measures, ["CER", "WER"]);
    let labels: Vec<&str> = results.rows.iter().map(|r| r.label.as_str()).collect();
    assert_eq!(labels, ["validation", "test"]);
    for row in &results.rows {
        assert!(
            row.values.iter().all(|v| v.is_finite() && *v >= 0.0),
            "{row:?}"
        );
    }
}

#[test]
fn a_speech_run_is_planned_on_whole_utterances_and_refuses_patches() {
    let defaults = task().default_batch();
    let planning = Planning::new(1 << 30, Some(8), Fixed::default(), defaults).unwrap();
    let mut trainer = TaskTrainer::<AsrConfig>::new(
        config(1),
        RunOptions {
            planning: Some(planning),
            ..RunOptions::default()
        },
    )
    .unwrap();
    let plan = trainer.plan().expect("planned").clone();
    assert_eq!((plan.n_patches, plan.split().effective_batch()), (1, 8));
    trainer.run(&mut Vec::new()).unwrap();

    let patches = Fixed {
        n_patches: Some(4),
        ..Fixed::default()
    };
    let planning = Planning::new(1 << 30, Some(8), patches, defaults).unwrap();
    let refused = TaskTrainer::<AsrConfig>::new(
        config(1),
        RunOptions {
            planning: Some(planning),
            ..RunOptions::default()
        },
    );
    assert!(
        matches!(
            refused,
            Err(crate::TrainError::Planning(PlanningError::WholeItems {
                n_patches: 4
            }))
        ),
        "{:?}",
        refused.err()
    );
}
