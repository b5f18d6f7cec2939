//! The speech recogniser on recordings: a manifest and a LibriSpeech-layout folder
//! of WAV files, a quarter of them at 8 kHz (resampled, and said so), a listed file that is
//! missing (a clear error naming it, or with `--on-bad-file skip` left out and listed), and a
//! test transcript with a character the train transcripts lack (counted as errors, said so).

mod common;

use std::fmt::Write;
use std::path::{Path, PathBuf};

use common::{assert_success, events, run_failing, run_json, trainer_cli};
use headroom_datasets::audio::{self, write_wav};
use headroom_datasets::speech::synthetic::{SpeechConfig, SpeechSplit};

/// Writes a small generated corpus as WAV files under `dir`: a train manifest (TSV, with one
/// line whose file is missing), a test manifest (JSON lines) and the train utterances again
/// in the LibriSpeech layout. Returns the three paths and the train files at 8 kHz.
fn recordings(dir: &Path) -> (PathBuf, PathBuf, PathBuf, usize) {
    let corpus = SpeechConfig {
        train: 16,
        validation: 0,
        test: 4,
        median_words: 2.0,
        ..SpeechConfig::default()
    };
    let (mut train, mut test) = (String::from("audio\ttranscript\n"), String::new());
    let libri = dir.join("libri");
    let chapter = libri.join("19").join("198");
    std::fs::create_dir_all(&chapter).unwrap();
    std::fs::create_dir_all(dir.join("wav")).unwrap();
    let mut trans = String::new();
    let mut slow = 0;
    for key in corpus.keys() {
        let mut audio = corpus.audio(&key);
        if key.index % 4 == 0 {
            audio = audio::resample(&audio, 8_000).unwrap();
            if key.split == SpeechSplit::Train {
                slow += 1;
            }
        }
        let name = format!("{:?}-{}.wav", key.split, key.index).to_lowercase();
        write_wav(&dir.join("wav").join(&name), &audio).unwrap();
        match key.split {
            SpeechSplit::Train => {
                writeln!(train, "wav/{name}\t{}", key.transcript).unwrap();
                let id = format!("19-198-{:04}", key.index);
                write_wav(&chapter.join(format!("{id}.wav")), &audio).unwrap();
                writeln!(trans, "{id} {}", key.transcript).unwrap();
            }
            SpeechSplit::Test => {
                // One reference holds a character no train transcript does.
                let text = if key.index == 0 {
                    format!("{}Ø", key.transcript)
                } else {
                    key.transcript.clone()
                };
                let line = serde_json::json!({"audio": format!("wav/{name}"), "text": text});
                writeln!(test, "{line}").unwrap();
            }
            SpeechSplit::Validation => {}
        }
    }
    train.push_str("wav/missing.wav\tA WORD\n");
    std::fs::write(chapter.join("19-198.trans.txt"), trans).unwrap();
    let (train_path, test_path) = (dir.join("train.tsv"), dir.join("test.jsonl"));
    std::fs::write(&train_path, train).unwrap();
    std::fs::write(&test_path, test).unwrap();
    (train_path, test_path, libri, slow)
}

fn train_args<'a>(train: &'a str, out: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "train",
        "--json",
        "--backend",
        "flex",
        "--model",
        "asr-transformer",
        "--speech-train",
        train,
        "--steps",
        "2",
        "--effective-batch",
        "4",
        "--out",
        out,
    ];
    args.extend_from_slice(extra);
    args
}

#[test]
fn the_recogniser_trains_on_a_manifest_and_on_a_librispeech_folder() {
    let dir = tempfile::tempdir().unwrap();
    let (train, test, libri, slow) = recordings(dir.path());
    let (train, test) = (train.to_str().unwrap(), test.to_str().unwrap());
    let out = dir.path().join("run");
    let out = out.to_str().unwrap();

    let refused = run_failing(&train_args(train, out, &["--speech-test", test]));
    assert!(
        refused.contains("missing.wav") && refused.contains("train.tsv:18"),
        "the missing file and its line are named: {refused}"
    );

    let all = run_json(&train_args(
        train,
        out,
        &["--speech-test", test, "--on-bad-file", "skip"],
    ));
    let dataset = &events(&all, "dataset")[0];
    let source = dataset["source"].as_str().unwrap();
    assert!(source.contains("train.tsv"), "{source}");
    assert!(
        source.contains(&format!("{slow} recordings resampled to 16000 Hz")),
        "{source}"
    );
    // 16 listed: every 10th held out for validation.
    assert_eq!(dataset["train_clips"], 15);
    assert_eq!(dataset["validation_clips"], 1);
    assert_eq!(dataset["test_clips"], 4);
    let skipped = dataset["skipped"].as_array().unwrap();
    assert_eq!(skipped.len(), 1);
    assert!(skipped[0].as_str().unwrap().contains("missing.wav"));
    assert!(
        events(&all, "step")
            .iter()
            .all(|s| s["padding"]["frames"].as_u64() > Some(0)),
        "steps report their frames"
    );
    let results = &events(&all, "results")[0];
    let rows = results["rows"].as_array().unwrap();
    assert_eq!(rows[1]["label"], "test");
    assert_eq!(rows[1]["examples"], 4);
    let about = results["about"].as_str().unwrap();
    assert!(
        about.contains("1 test utterances hold characters the train transcripts do not"),
        "{about}"
    );

    // A budget that holds no utterance at all names the longest, even with bad files left
    // out (which leaves out only the utterances longer than what a step can hold:
    // core/tests/speech_by_length.rs).
    let small = dir.path().join("small");
    let too_long = run_failing(&train_args(
        train,
        small.to_str().unwrap(),
        &["--on-bad-file", "skip", "--memory-budget", "4MiB"],
    ));
    assert!(
        too_long.contains("is longer than any plan can hold") && too_long.contains(".wav ("),
        "{too_long}"
    );

    // `plan` opens the same recordings as `train` and plans them by length.
    let planned = common::run_json_document(&[
        "plan",
        "--json",
        "--backend",
        "flex",
        "--model",
        "asr-transformer",
        "--speech-train",
        train,
        "--on-bad-file",
        "skip",
        "--effective-batch",
        "4",
    ]);
    let buckets = planned["plan"]["lengths"]["buckets"]["buckets"]
        .as_array()
        .expect("a plan by length");
    let longest = events(&all, "dry_run")
        .iter()
        .filter_map(|d| d["frames"].as_u64())
        .max()
        .unwrap();
    assert_eq!(
        buckets.last().unwrap()["frames"].as_u64(),
        Some(longest),
        "the plan's longest bucket is the run's longest utterance"
    );

    let libri_out = dir.path().join("libri-run");
    let all = run_json(&train_args(
        libri.to_str().unwrap(),
        libri_out.to_str().unwrap(),
        &[],
    ));
    let dataset = &events(&all, "dataset")[0];
    assert_eq!(
        dataset["train_clips"], 15,
        "the same 16 utterances, by chapter"
    );
    assert_eq!(events(&all, "step").len(), 2);
    let results = &events(&all, "results")[0];
    let labels: Vec<&str> = results["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["label"].as_str().unwrap())
        .collect();
    assert_eq!(
        labels,
        ["validation"],
        "no test listing: scored on validation"
    );
}

#[test]
fn speech_recordings_are_refused_for_a_model_that_does_not_read_them() {
    let dir = tempfile::tempdir().unwrap();
    let message = run_failing(&[
        "train",
        "--model",
        "dcase-ae",
        "--speech-train",
        dir.path().to_str().unwrap(),
    ]);
    assert!(
        message.contains("--speech-train") && message.contains("--model asr-transformer"),
        "{message}"
    );
}

/// The contrastive model on the same manifest: its utterances and transcripts are its pairs.
#[test]
fn the_contrastive_model_trains_on_a_manifest_of_pairs() {
    let dir = tempfile::tempdir().unwrap();
    let (train, _, _, _) = recordings(dir.path());
    let out = dir.path().join("pairs");
    let mut args = train_args(
        train.to_str().unwrap(),
        out.to_str().unwrap(),
        &["--on-bad-file", "skip", "--negatives", "step"],
    );
    args[5] = "speech-clap";
    let all = run_json(&args);
    let dataset = &events(&all, "dataset")[0];
    assert!(dataset["source"].as_str().unwrap().contains("train.tsv"));
    assert_eq!(dataset["train_clips"], 15);
    let steps = events(&all, "step");
    assert_eq!(steps.len(), 2);
    assert!(
        steps
            .iter()
            .all(|s| s["loss"].as_f64().is_some_and(f64::is_finite))
    );
    let results = events(&all, "results");
    assert_eq!(results[0]["measures"][0], "R@1 audio to text");
    // Cut in two micro-batches, the run's summary says each pair still saw the step's others.
    let cut_out = dir.path().join("pairs-cut");
    let mut cut = train_args(
        train.to_str().unwrap(),
        cut_out.to_str().unwrap(),
        &[
            "--on-bad-file",
            "skip",
            "--batch-size",
            "2",
            "--gradient-accumulation-steps",
            "2",
        ],
    );
    cut[5] = "speech-clap";
    cut.remove(1); // --json: the summary is the human one
    let output = trainer_cli()
        .args(&cut)
        .output()
        .expect("trainer-cli starts");
    assert_success(&output, &cut);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let summary = stdout
        .split("Training finished")
        .nth(1)
        .unwrap_or_else(|| panic!("no summary:\n{stdout}"));
    assert!(
        summary.contains(
            "Negatives: each pair is contrasted with the other 3 pairs of its step, however the \
             step is cut (gradient caching"
        ),
        "{stdout}"
    );
    // The recogniser's size is not the contrastive model's to take.
    let refused = run_failing(&["train", "--model", "speech-clap", "--asr-size", "large"]);
    assert!(
        refused.contains("--asr-size is for --model asr-transformer"),
        "{refused}"
    );
}

/// `plan --what-if` for the recogniser: its steps measured at several lengths of the
/// corpus's own utterances, then the buckets each device's budget gives those lengths.
#[test]
fn the_what_if_plans_the_recogniser_by_length_for_each_device() {
    let table = common::run_json_document(&[
        "plan",
        "--json",
        "--what-if",
        "--backend",
        "flex",
        "--model",
        "asr-transformer",
        "--effective-batch",
        "8",
        "--memory-budget",
        "200MiB",
    ]);
    let longest = table["longest_frames"].as_u64().unwrap();
    let rows = table["rows"].as_array().unwrap();
    assert!(rows.len() >= 3, "the budget given, the GPUs, this CPU");
    let given = &rows[0];
    assert!(
        given["device"]
            .as_str()
            .unwrap()
            .contains("--memory-budget")
    );
    let plan = &given["plan"]["Ok"];
    let buckets = plan["buckets"]["buckets"].as_array().unwrap();
    assert_eq!(buckets.last().unwrap()["frames"].as_u64(), Some(longest));
    let caps: Vec<u64> = buckets
        .iter()
        .map(|b| b["examples"].as_u64().unwrap())
        .collect();
    assert!(
        caps.windows(2).all(|w| w[0] >= w[1]) && caps[0] > *caps.last().unwrap(),
        "short utterances go more at a time than long ones in 200 MiB: {caps:?}"
    );
    assert!(plan["predicted_peak_bytes"].as_u64().unwrap() <= 200 << 20);
    assert!(plan["utterances_per_s"].is_null(), "no speed for a GPU");
    let cpu = &rows.last().unwrap()["plan"]["Ok"];
    assert!(cpu["utterances_per_s"].as_f64().unwrap() > 0.0);

    let message = run_failing(&["plan", "--model", "dcase-ae", "--asr-size", "large"]);
    assert!(message.contains("--asr-size"), "{message}");
}
