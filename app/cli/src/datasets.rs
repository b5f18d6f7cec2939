//! `trainer-cli synth`, `features` and `eval`: datasets on disk in, scores out.

use std::path::Path;

use anyhow::{Context, Result};
use headroom_core::eval::ClipScore;
use headroom_core::registry::evaluate_checkpoint;
use headroom_core::train::{DatasetSource, Evaluation};
use headroom_datasets::audio::{Audio, write_wav};
use headroom_datasets::npy::write_npy;
use headroom_datasets::synthetic::waveform;
use headroom_datasets::{ClipReader, Split, SyntheticConfig, SyntheticDataset};
use rayon::prelude::*;

use crate::args::{EvalArgs, FeaturesArgs, SynthArgs};

pub fn synth(args: SynthArgs) -> Result<()> {
    let mut config = SyntheticConfig::default();
    if let Some(n) = args.machine_ids {
        config.machine_ids = n;
    }
    if let Some(n) = args.train_clips_per_id {
        config.train_per_id = n;
    }
    if let Some(n) = args.test_clips_per_id {
        config.test_normal_per_id = n;
        config.test_anomaly_per_id = n;
    }
    if let Some(s) = args.seconds {
        anyhow::ensure!(
            s.is_finite() && s > 0.0,
            "--seconds must be a positive number (got {s})"
        );
        config.seconds = s;
    }
    if let Some(seed) = args.seed {
        config.seed = seed;
    }
    anyhow::ensure!(
        !args.machine_type.is_empty()
            && !args.machine_type.contains(['/', '\\'])
            && args.machine_type != "."
            && args.machine_type != "..",
        "--machine-type must be a folder name (got {:?})",
        args.machine_type
    );
    let type_dir = args.out.join(&args.machine_type);
    for split in ["train", "test"] {
        let dir = type_dir.join(split);
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let clips = SyntheticDataset::index(&config);
    clips.par_iter().try_for_each(|clip| -> Result<()> {
        let headroom_datasets::Origin::Synthetic(key) = &clip.origin else {
            unreachable!("the synthetic index holds synthetic clips only")
        };
        let split = match clip.split {
            Split::Train => "train",
            Split::Test => "test",
        };
        let path = type_dir.join(split).join(&clip.name);
        let audio = Audio {
            sample_rate: config.sample_rate,
            samples: waveform(&config, key),
        };
        write_wav(&path, &audio).with_context(|| format!("cannot write {}", path.display()))
    })?;
    let train = clips.iter().filter(|c| c.split == Split::Train).count();
    println!(
        "Wrote {} clips ({train} train, {} test; {} machine IDs, {} s at {} Hz, 16-bit PCM) to {}",
        clips.len(),
        clips.len() - train,
        config.machine_ids,
        config.seconds,
        config.sample_rate,
        type_dir.display()
    );
    Ok(())
}

pub fn features(args: FeaturesArgs) -> Result<()> {
    let reader = ClipReader::new(args.features.settings());
    let spectrogram = reader.wav_features(&args.input)?;
    write_npy(&args.out, &spectrogram)
        .with_context(|| format!("cannot write {}", args.out.display()))?;
    println!(
        "Wrote {} ([{}, {}] float32 log-mel, dB)",
        args.out.display(),
        spectrogram.n_mels,
        spectrogram.frames
    );
    Ok(())
}

pub fn eval(args: EvalArgs) -> Result<()> {
    let state = headroom_core::checkpoint::read_state(&args.checkpoint)
        .with_context(|| format!("cannot read the checkpoint {}", args.checkpoint.display()))?;
    if let Some(asked) = &args.model {
        headroom_core::registry::default_spec(asked)?;
        let saved = &state.config.model.name;
        anyhow::ensure!(
            saved == asked,
            "{} holds the model {saved}, not {asked}; score it as --model {saved}, or pass a \
             checkpoint of {asked}",
            args.checkpoint.display()
        );
    }
    let source = match (&args.data_root, &state.config.dataset) {
        (Some(root), saved) => Some(DatasetSource::Dcase {
            root: root.clone(),
            machine_type: args.machine_type.clone(),
            features: headroom_core::data::features_of(saved),
        }),
        (None, DatasetSource::Dcase { root, features, .. }) if args.machine_type.is_some() => {
            Some(DatasetSource::Dcase {
                root: root.clone(),
                machine_type: args.machine_type.clone(),
                features: *features,
            })
        }
        (None, _) => None,
    };
    let target = args.backend.map(|b| b.resolve().target());
    let evaluation = evaluate_checkpoint(&args.checkpoint, source, target, args.loader.options()?)
        .context("cannot score the test split")?;
    write_results(&args.out, &evaluation)?;
    if args.json {
        match &evaluation {
            Evaluation::Anomaly { report, .. } => println!("{}", serde_json::to_string(report)?),
            Evaluation::Results(results) => println!("{}", serde_json::to_string(results)?),
        }
    } else {
        match &evaluation {
            Evaluation::Anomaly { report, .. } => {
                println!("{}", crate::render::describe_evaluation(report))
            }
            Evaluation::Results(results) => {
                println!("{}", crate::render::describe_results(results))
            }
        }
        println!("Scores and results written to {}", args.out.display());
    }
    Ok(())
}

/// For anomaly scores, the challenge baseline's score files
/// (`anomaly_score_<type>_id_<XX>.csv`, rows `file name,score`, no header); then
/// `results.csv` and `results.json`.
fn write_results(out: &Path, evaluation: &Evaluation) -> Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    write_file(&out.join("results.csv"), evaluation.csv().as_bytes())?;
    let (report, scores) = match evaluation {
        Evaluation::Anomaly { report, scores } => (report, scores),
        Evaluation::Results(results) => {
            let json = serde_json::to_string_pretty(results)?;
            return write_file(&out.join("results.json"), json.as_bytes());
        }
    };
    let mut groups: std::collections::BTreeMap<(&str, u32), Vec<&ClipScore>> = Default::default();
    for clip in scores {
        groups
            .entry((clip.machine_type.as_str(), clip.machine_id))
            .or_default()
            .push(clip);
    }
    for ((machine_type, id), clips) in groups {
        let path = out.join(format!("anomaly_score_{machine_type}_id_{id:02}.csv"));
        let text: String = clips
            .iter()
            .map(|c| format!("{},{}\n", c.name, c.score))
            .collect();
        write_file(&path, text.as_bytes())?;
    }
    let json = serde_json::to_string_pretty(report)?;
    write_file(&out.join("results.json"), json.as_bytes())
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    headroom_datasets::error::write_atomically(path, |w| std::io::Write::write_all(w, bytes))
        .with_context(|| format!("cannot write {}", path.display()))
}
