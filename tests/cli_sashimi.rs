//! The SaShiMi model planned inside one example, as a user runs it: at a budget between one
//! crop's step with checkpointing and without, the plan checkpoints and the run completes;
//! below the checkpointed step, the error names the asked crop, what it needs, and a shorter
//! crop it planned and dry-ran within the budget. Budgets come from the model's own
//! calibration on this machine (`trainer-cli plan --json`), so the test holds on any. A
//! trained run generates WAV files; a folder of the user's recordings trains it, its bad
//! files named.

mod common;

use common::{events, run_json, trainer_cli};
use serde_json::Value;

const SAMPLE_LEN: &str = "2048";

/// One crop's calibrated step, without and with checkpointing, and what the process holds
/// before any step.
fn one_crop() -> (u64, u64, u64) {
    let output = trainer_cli()
        .args([
            "plan",
            "--model",
            "sashimi",
            "--sample-len",
            SAMPLE_LEN,
            "--memory-budget",
            "1GiB",
            "--json",
        ])
        .output()
        .expect("trainer-cli starts");
    common::assert_success(&output, &["plan"]);
    let plan: Value = serde_json::from_slice(&output.stdout).expect("the plan as JSON");
    let memory = &plan["calibration"]["memory"];
    let at_one = |line: &str| {
        let points = memory[line]["points"].as_array().expect("measured points");
        let one = points
            .iter()
            .find(|p| p[0] == 1)
            .expect("a step of one crop");
        one[1].as_f64().expect("bytes") as u64
    };
    let resident = plan["breakdown"]["resident"]
        .as_u64()
        .expect("resident bytes");
    (at_one("plain"), at_one("checkpointed"), resident)
}

/// Two steps of the sashimi model at `budget`, into `out`.
fn train_args<'a>(out: &'a str, budget: &'a str) -> Vec<&'a str> {
    vec![
        "train",
        "--model",
        "sashimi",
        "--sample-len",
        SAMPLE_LEN,
        "--steps",
        "2",
        "--memory-budget",
        budget,
        "--out",
        out,
    ]
}

#[test]
fn a_crop_is_planned_inside_itself_and_one_too_long_names_one_that_fits() {
    let (plain, checkpointed, resident) = one_crop();
    assert!(checkpointed < plain, "{checkpointed} < {plain}");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("tight");
    let budget = format!("{}B", resident + (plain + checkpointed) / 2);
    let mut args = train_args(out.to_str().unwrap(), &budget);
    args.extend(["--no-eval", "--json"]);
    let run = run_json(&args);
    let plan = events(&run, "plan")[0];
    assert_eq!(plan["checkpointing"], true, "{plan}");
    assert_eq!(plan["micro_batch"], 1, "{plan}");
    let finished = events(&run, "finished")[0];
    assert_eq!(finished["step"], 2, "{finished}");
    for step in events(&run, "step") {
        let peak = step["mem_peak_bytes"].as_u64().unwrap();
        let budget = plan["budget_bytes"].as_u64().unwrap();
        assert!(peak <= budget, "{peak} over {budget}: {step}");
    }

    let too_little = format!("{}B", resident + checkpointed * 3 / 4);
    let out = dir.path().join("too-long");
    let refused = trainer_cli()
        .args(train_args(out.to_str().unwrap(), &too_little))
        .output()
        .expect("trainer-cli starts");
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("a crop of 2048 samples does not fit") && said.contains("needs"),
        "{said}"
    );
    let fits: usize = said
        .split("--sample-len ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a crop that fits, as a flag: {said}"));
    assert!(
        fits < 2_048 && fits > 0 && fits.is_multiple_of(16),
        "{fits}: {said}"
    );
}

/// A short run's checkpoint makes WAV files a WAV reader reads back: mono at the run's
/// 16 kHz, the asked length, samples in [-1, 1], clips that differ. A checkpoint of
/// another model is refused with both names.
#[test]
fn a_run_generates_audio_a_wav_reader_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    run_json(&[
        "train",
        "--model",
        "sashimi",
        "--sample-len",
        SAMPLE_LEN,
        "--steps",
        "3",
        "--no-eval",
        "--json",
        "--out",
        run.to_str().unwrap(),
    ]);
    let audio = dir.path().join("audio");
    let generated = trainer_cli()
        .args([
            "generate",
            "--clips",
            "2",
            "--seconds",
            "0.05",
            "--seed",
            "3",
        ])
        .args(["--checkpoint", run.to_str().unwrap()])
        .args(["--out", audio.to_str().unwrap()])
        .output()
        .expect("trainer-cli starts");
    common::assert_success(&generated, &["generate"]);
    let clips: Vec<Vec<f32>> = ["sample-00.wav", "sample-01.wav"]
        .iter()
        .map(|name| {
            let mut reader = hound::WavReader::open(audio.join(name)).expect("a WAV file");
            let spec = reader.spec();
            assert_eq!((spec.channels, spec.sample_rate), (1, 16_000), "{name}");
            let samples: Vec<f32> = match spec.sample_format {
                hound::SampleFormat::Float => reader.samples::<f32>().map(Result::unwrap).collect(),
                hound::SampleFormat::Int => reader
                    .samples::<i32>()
                    .map(|s| s.unwrap() as f32 / (1 << (spec.bits_per_sample - 1)) as f32)
                    .collect(),
            };
            samples
        })
        .collect();
    for clip in &clips {
        assert_eq!(clip.len(), 800);
        assert!(clip.iter().all(|s| s.is_finite() && s.abs() <= 1.0));
    }
    assert_ne!(clips[0], clips[1], "two draws differ");

    let other = dir.path().join("other");
    run_json(&[
        "train",
        "--model",
        "dcase-ae",
        "--steps",
        "1",
        "--no-eval",
        "--json",
        "--out",
        other.to_str().unwrap(),
    ]);
    let refused = trainer_cli()
        .args(["generate", "--checkpoint", other.to_str().unwrap()])
        .args(["--out", audio.to_str().unwrap()])
        .output()
        .expect("trainer-cli starts");
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("dcase-ae") && said.contains("sashimi"),
        "{said}"
    );
}

/// Writes `seconds` of a tone at `rate` Hz as 16-bit mono WAV.
fn tone(path: &std::path::Path, rate: u32, seconds: f32, hz: f32) {
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: rate,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut writer = hound::WavWriter::create(path, spec).expect("a WAV file");
    for i in 0..(rate as f32 * seconds) as usize {
        let phase = std::f32::consts::TAU * hz * i as f32 / rate as f32;
        writer
            .write_sample((phase.sin() * 12_000.0) as i16)
            .expect("a sample");
    }
    writer.finalize().expect("a finished WAV file");
}

/// A user's folder of recordings trains the model: a corrupt file stops the run naming it
/// (or is left out and listed, when asked); a file at another rate is left out as such, or
/// resampled with `--resample`, and the test split it falls in is scored.
#[test]
fn a_folder_of_recordings_trains_and_its_bad_files_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("recordings");
    std::fs::create_dir_all(&folder).unwrap();
    for (i, name) in ["a.wav", "b.wav", "c.wav", "d.wav"].iter().enumerate() {
        tone(&folder.join(name), 16_000, 0.3, 220.0 * (i + 1) as f32);
    }
    // In name order the last file is the test split, the one before it validation.
    tone(&folder.join("e_8k.wav"), 8_000, 0.3, 300.0);
    std::fs::write(folder.join("bad.wav"), b"RIFF1234WAVEjunk").unwrap();
    let args = |out: &str, extra: &[&'static str]| -> Vec<String> {
        let mut args: Vec<String> = [
            "train",
            "--model",
            "sashimi",
            "--waveforms",
            folder.to_str().unwrap(),
            "--sample-len",
            "1024",
            "--steps",
            "2",
            "--json",
            "--out",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.push(dir.path().join(out).display().to_string());
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    };

    let strict = args("strict", &[]);
    let said = common::run_failing(&strict.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(
        said.contains("bad.wav") && said.contains("--on-bad-file skip"),
        "{said}"
    );

    let skipped = args("skipped", &["--on-bad-file", "skip"]);
    let run = run_json(&skipped.iter().map(String::as_str).collect::<Vec<_>>());
    let dataset = events(&run, "dataset")[0];
    let listed = dataset["skipped"].to_string();
    assert!(
        listed.contains("bad.wav") && listed.contains("e_8k.wav: sample rate 8000 Hz"),
        "{dataset}"
    );
    assert_eq!(dataset["test_clips"], 0, "{dataset}");
    assert_eq!(events(&run, "finished")[0]["step"], 2);

    let resampled = args("resampled", &["--on-bad-file", "skip", "--resample"]);
    let run = run_json(&resampled.iter().map(String::as_str).collect::<Vec<_>>());
    let dataset = events(&run, "dataset")[0];
    assert!(
        dataset["source"].as_str().unwrap().contains("1 resampled"),
        "{dataset}"
    );
    // 0.3 s at 16 kHz, one crop of 1,024 samples in 4,800.
    assert_eq!(dataset["test_clips"], 4, "{dataset}");
    let rows = events(&run, "results")[0]["rows"].to_string();
    assert!(rows.contains("\"test\""), "{rows}");
    let mono_crops = dataset["train_clips"].as_u64().unwrap();

    // Two channels interleaved: each file twice as long, as many crops again.
    let stereo = args(
        "stereo",
        &["--on-bad-file", "skip", "--resample", "--stereo"],
    );
    let run = run_json(&stereo.iter().map(String::as_str).collect::<Vec<_>>());
    let dataset = events(&run, "dataset")[0];
    assert!(
        dataset["source"]
            .as_str()
            .unwrap()
            .contains("stereo interleaved"),
        "{dataset}"
    );
    let crops = dataset["train_clips"].as_u64().unwrap();
    assert!(
        (2 * mono_crops..=2 * mono_crops + 1).contains(&crops),
        "{crops} crops against {mono_crops} mono: {dataset}"
    );
}

/// A run that keeps a moving average of its weights holds no more memory from one step to
/// the next (its updates once left a little behind every step), and its checkpoint holds it.
#[test]
fn the_weights_average_holds_the_same_memory_every_step() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let run = run_json(&[
        "train",
        "--model",
        "sashimi",
        "--sample-len",
        "1024",
        "--ema",
        "0.99",
        "--no-plan",
        "--batch-size",
        "2",
        "--n-patches",
        "1",
        "--gradient-accumulation-steps",
        "1",
        "--steps",
        "8",
        // One thread: on two, the CPU kernels' scratch moves with how rayon shares a call
        // out (a scratch made when a thread finds none free), and a fresh .ci/run of
        // fb5ddb5 saw a step 1 MiB above the one before, once.
        "--threads",
        "1",
        "--no-eval",
        "--json",
        "--out",
        out.to_str().unwrap(),
    ]);
    let peaks: Vec<u64> = events(&run, "step")
        .iter()
        .map(|s| s["mem_peak_bytes"].as_u64().expect("a measured peak"))
        .collect();
    assert_eq!(peaks.len(), 8);
    // The first step makes AdamW's moments; from the second on every step is alike.
    assert!(
        peaks[2..].iter().all(|&p| p == peaks[1]),
        "step peaks: {peaks:?}"
    );
    assert!(
        out.join("checkpoints/step-00000008/average.safetensors")
            .is_file()
    );
}
