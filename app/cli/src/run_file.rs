//! Run files from the command line: `train --config FILE` reads one as the run's spec, and
//! every new run writes its own, resolved, into its directory (`OUT/run.toml`), so that
//! `train --config OUT/run.toml` trains it again (docs/TRAINING.md, "Run files").

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use headroom_core::spec::RunSpec;
use headroom_core::spec::file::{self, RunFileError};
use headroom_core::spec::writing;
#[cfg(test)]
use headroom_core::spec::writing::{comment, document};

use crate::args::DeviceArg;

/// The run file at `path`, as a spec; an unknown key, a value of the wrong type and a device
/// that is none are errors naming the file, the line and the key.
pub fn read(path: &Path) -> Result<RunSpec> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the run file {}", path.display()))?;
    Ok(parse(path, &text)?)
}

/// `text`, the run file at `path`, as a spec.
pub fn parse(path: &Path, text: &str) -> Result<RunSpec, RunFileError> {
    let spec: RunSpec = toml::from_str(text)
        .map_err(|e| RunFileError::new(path, text, e.span().map(|s| s.start), e.message()))?;
    if let Some(device) = &spec.device
        && let Err(words) = device.parse::<DeviceArg>()
    {
        return Err(RunFileError::new(
            path,
            text,
            value_of(text, "device"),
            &words,
        ));
    }
    Ok(spec)
}

/// Where the value of the top-level key `key` starts in `text`.
fn value_of(text: &str, key: &str) -> Option<usize> {
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        if trimmed.starts_with('[') {
            return None;
        }
        if let Some(rest) = trimmed.strip_prefix(key)
            && let Some(value) = rest.trim_start().strip_prefix('=')
        {
            return Some(offset + line.len() - value.trim_start().len());
        }
        offset += line.len();
    }
    None
}

/// Who writes the file: this program's version and, when it was built from a git checkout,
/// its commit.
fn written_by() -> String {
    let commit = option_env!("HEADROOM_COMMIT")
        .map(|c| format!(" (commit {c})"))
        .unwrap_or_default();
    format!("trainer-cli {}{commit}", env!("CARGO_PKG_VERSION"))
}

/// The run file of a run: `resolved` (its spec as it trains) after the header, which says what
/// a re-run keeps ([`writing::text`]).
pub fn text(resolved: &RunSpec, unix_secs: u64) -> Result<String> {
    let again = "Train it again with `trainer-cli train --config run.toml` (flags given \
                 beside it win) or the desktop app's Open run file.";
    writing::text(resolved, &written_by(), again, unix_secs)
        .context("cannot write the run's settings as TOML")
}

/// Writes `text` as the run file of the run directory `dir` ([`writing::write`]), and returns
/// its path.
pub fn write(dir: &Path, text: &str) -> Result<PathBuf> {
    writing::write(dir, text)
        .with_context(|| format!("cannot write {}", dir.join(file::FILE_NAME).display()))
}

#[cfg(test)]
mod tests {
    use headroom_core::RunLength;
    use headroom_core::spec::{BudgetSpec, ClassifierSpec, DataSpec, MemorySpec, SplitSpec};

    use super::*;

    fn path() -> &'static Path {
        Path::new("runs/a/run.toml")
    }

    /// A spec with every setting given.
    fn every_setting() -> RunSpec {
        RunSpec {
            model: Some("spec-classifier".into()),
            backend: Some(headroom_core::BackendKind::Flex),
            device: Some("cuda:1".into()),
            data: DataSpec {
                root: Some("data/dcase".into()),
                machine_type: Some("fan".into()),
                n_mels: Some(128),
                sample_rate: Some(22_050),
                resample: true,
                machine_ids: Some(2),
                train_clips_per_id: Some(3),
                test_clips_per_id: Some(4),
                speech: Some(headroom_core::speech::SpeechFiles {
                    train: "speech/train.tsv".into(),
                    validation: Some("speech/dev".into()),
                    test: None,
                }),
            },
            split: SplitSpec {
                micro_batch: Some(5),
                n_patches: Some(6),
                accumulation: Some(7),
                stride: Some(8),
                placement: Some(headroom_datasets::PatchPlacement::Even),
            },
            memory: MemorySpec {
                budget: BudgetSpec::Given { bytes: 1 << 33 },
                fraction: 0.25,
                effective_batch: Some(42),
                checkpointing: Some(true),
                precision: Some(headroom_core::precision::Precision::Bf16),
            },
            planner: false,
            length: Some(RunLength::Epochs(3)),
            lr: Some(1.5e-4),
            clip_norm: Some(0.5),
            ema: Some(0.999),
            seed: Some(u64::from(u32::MAX) + 1),
            checkpoint_every: Some(9),
            validate_every: Some(10),
            empty_cache_every: Some(0),
            asr_size: Some(headroom_core::speech::AsrSize::Large),
            gan_size: Some(headroom_core::gan::GanSize::Seed96),
            classifier: ClassifierSpec {
                arch: Some(headroom_core::classifier::ClassifierArch::Cnn),
                generator: Some("runs/gan".into()),
                generated_share: Some(0.3),
            },
            negatives: Some(headroom_core::contrastive::Negatives::MicroBatch),
            sashimi: headroom_core::spec::SashimiSpec {
                size: Some(headroom_core::waveform::SashimiSize::Seed),
                sample_len: Some(131_072),
                quantizer: Some(headroom_datasets::waveform::Quantizer::Linear),
                waveforms: Some("recordings/piano".into()),
                mixtures: Some(6),
                stereo: true,
            },
        }
    }

    #[test]
    fn a_spec_reads_back_from_its_run_file() {
        let config = headroom_core::TrainConfig::default();
        let every = every_setting();
        let mut no_planner = every.clone();
        no_planner.planner = true;
        for spec in [every, no_planner, RunSpec::default().resolved(&config)] {
            let text = text(&spec, 1_796_644_800).unwrap();
            assert_eq!(parse(path(), &text).unwrap(), spec, "{text}");
            assert!(text.contains("on 2026-12-07 (UTC)"), "{text}");
            assert_eq!(text.contains("planned again"), spec.planner, "{text}");
        }
        // An empty file is the flags' default run.
        assert_eq!(parse(path(), "").unwrap(), RunSpec::default());
        assert_eq!(
            parse(path(), "# only a comment\n").unwrap(),
            RunSpec::default()
        );
    }

    /// The error a file gives, checked to name the file, its line and its key.
    fn error(text: &str, line: usize, key: &str) -> String {
        let error = parse(path(), text).unwrap_err();
        let place = error
            .place
            .clone()
            .unwrap_or_else(|| panic!("no place: {error}"));
        assert_eq!(
            (place.line, place.key.as_deref()),
            (line, Some(key)),
            "{error}"
        );
        let said = error.to_string();
        assert!(
            said.starts_with(&format!("runs/a/run.toml, line {line}, column ")),
            "{said}"
        );
        assert!(said.contains(&format!("key `{key}`")), "{said}");
        said
    }

    #[test]
    fn an_unknown_key_is_named_with_its_line() {
        let said = error("seed = 3\nstepz = 4\n", 2, "stepz");
        assert!(said.contains("unknown field `stepz`"), "{said}");
        error(
            "lr = 0.1\n\n[memory]\nfraction = 0.5\nbudgett = 3\n",
            5,
            "memory.budgett",
        );
        error(
            "[split]\nmicro_batch = 2\n[data]\nroots = \"x\"\n",
            4,
            "data.roots",
        );
        error(
            "[memory.budget]\nkind = \"given\"\nbytez = 3\n",
            3,
            "memory.budget.bytez",
        );
        error(
            "[data.speech]\ntrain = \"a\"\nvalidaton = \"b\"\n",
            3,
            "data.speech.validaton",
        );
        error("[memmory]\nfraction = 0.5\n", 1, "memmory");
    }

    #[test]
    fn a_value_of_the_wrong_type_is_named_with_its_line() {
        let said = error("model = \"dcase-ae\"\nlr = \"fast\"\n", 2, "lr");
        assert!(said.contains("expected f64"), "{said}");
        error("[split]\nmicro_batch = -2\n", 2, "split.micro_batch");
        error("planner = \"yes\"\n", 1, "planner");
        error("[memory]\nprecision = \"f64\"\n", 2, "memory.precision");
        error("length = { steps = \"many\" }\n", 1, "length.steps");
        error("backend = \"tpu\"\n", 1, "backend");
        let said = error("seed = 1\ndevice = \"cuda:x\"\n", 2, "device");
        assert!(said.contains("whole number"), "{said}");
    }

    #[test]
    fn a_run_file_lists_the_model_first_and_short_tables_on_a_line() {
        let config = headroom_core::TrainConfig::default();
        let written = document(&RunSpec::default().resolved(&config)).unwrap();
        assert!(
            written.starts_with("model = \"vq-patch-ae\"\n"),
            "{written}"
        );
        assert!(
            written.contains("\nlength = { epochs = 16 }\n"),
            "{written}"
        );
        assert!(
            written.contains("\n[memory]\nbudget = { kind = \"free_memory\" }\n"),
            "{written}"
        );
        assert!(written.contains("\n[split]\nplacement = \"random\"\nstride = 32\n"));
        // No empty table: the classifier's settings are not given.
        assert!(!written.contains("classifier"), "{written}");
        let every = document(&every_setting()).unwrap();
        assert!(
            every.contains(
                "\nspeech = { train = \"speech/train.tsv\", validation = \"speech/dev\" }\n"
            ),
            "{every}"
        );
    }

    #[test]
    fn a_file_that_is_not_toml_says_where() {
        let error = parse(path(), "seed = 1\nlr = \n").unwrap_err();
        assert_eq!(error.place.map(|p| p.line), Some(2), "{}", error.message);
    }

    #[test]
    fn comments_wrap_and_keys_are_found_only_at_the_top() {
        let long = "word ".repeat(40);
        assert!(
            comment(&long)
                .lines()
                .all(|l| l.len() <= 90 && l.starts_with("# "))
        );
        assert_eq!(value_of("a = 1\ndevice = \"x\"\n", "device"), Some(15));
        assert_eq!(value_of("[t]\ndevice = 1\n", "device"), None);
    }

    #[test]
    fn the_file_is_written_whole_into_the_run_directory() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run-1");
        let written = write(&run, "seed = 1\n").unwrap();
        assert_eq!(written, run.join("run.toml"));
        assert_eq!(std::fs::read_to_string(&written).unwrap(), "seed = 1\n");
        write(&run, "seed = 2\n").unwrap();
        assert_eq!(read(&written).unwrap().seed, Some(2));
        let missing = read(&run.join("none.toml")).unwrap_err();
        assert!(format!("{missing:#}").contains("cannot read the run file"));
    }
}
