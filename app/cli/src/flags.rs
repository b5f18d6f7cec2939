//! Core's settings in the words of this program's flags: every error and refusal core reports
//! names a setting, and the user reads the flag that sets it.

use headroom_core::TrainError;
use headroom_core::budget::BudgetError;
use headroom_core::checkpoint::CheckpointError;
use headroom_core::config::{ConfigError, Setting};
use headroom_core::data::DataError;
use headroom_core::model::ModelError;
use headroom_core::plan::{CalibrationError, PlanError, PlanningError, RequestError};
use headroom_core::setting::{Described, Wording};
use headroom_core::spec::{ResumeError, SpecError};
use headroom_datasets::dcase::LayoutError;
use headroom_datasets::{FileError, PatchError};

/// The flag that sets `setting`.
pub fn flag(setting: Setting) -> &'static str {
    match setting {
        Setting::Model => "--model",
        Setting::LearningRate => "--lr",
        Setting::ClipNorm => "--clip-norm",
        Setting::Seed => "--seed",
        Setting::Stride => "--stride",
        Setting::ScoringStride => "eval_stride in the run's config.json",
        Setting::MicroBatch => "--batch-size",
        Setting::Accumulation => "--gradient-accumulation-steps",
        Setting::PatchesPerSpectrogram => "--n-patches",
        Setting::Placement => "--placement",
        Setting::EffectiveBatch => "--effective-batch",
        Setting::MachineIds => "--machine-ids",
        Setting::TrainClipsPerId => "--train-clips-per-id",
        Setting::TestClipsPerId => "the test clips per ID",
        Setting::MemoryBudget => "--memory-budget",
        Setting::MemoryFraction => "--memory-fraction",
        Setting::PlannerOff => "--no-plan",
        Setting::OutDir => "--out",
        Setting::Resume => "--resume",
        Setting::SkipBadFiles => "--on-bad-file skip",
        Setting::Resample => "--resample",
        Setting::SampleRate => "--sample-rate",
        Setting::DataRoot => "--data-root",
        Setting::SpeechTrain => "--speech-train",
        Setting::AsrSize => "--asr-size",
        Setting::GanSize => "--gan-size",
        Setting::SashimiSize => "--sashimi-size",
        Setting::SampleLen => "--sample-len",
        Setting::Quantizer => "--quantizer",
        Setting::Waveforms => "--waveforms",
        Setting::Ema => "--ema",
        Setting::Stereo => "--stereo",
        Setting::Mixtures => "--mixtures",
        Setting::ClassifierArch => "--classifier",
        Setting::Generator => "--generator",
        Setting::GeneratedShare => "--generated-share",
        Setting::Negatives => "--negatives",
        Setting::MachineType => "--machine-type",
        Setting::NMels => "--n-mels",
        Setting::Steps => "--steps",
        Setting::Epochs => "--epochs",
        Setting::CheckpointEvery => "--checkpoint-every",
        Setting::ValidateEvery => "--validate-every",
        Setting::EmptyCacheEvery => "--empty-cache-every",
        Setting::Precision => "--precision",
        Setting::Checkpointing => "--use-gradient-checkpointing",
    }
}

/// Core's settings as this program's flags.
pub struct Flags;

impl Wording for Flags {
    fn setting(&self, setting: Setting) -> String {
        flag(setting).to_string()
    }

    /// Switches are one flag each way; flags with a value take it after a space.
    fn given(&self, setting: Setting, value: &str) -> String {
        match (setting, value) {
            (Setting::Checkpointing, "off") => "--no-gradient-checkpointing".into(),
            (Setting::Checkpointing | Setting::Resample, _) => flag(setting).into(),
            _ => format!("{} {value}", flag(setting)),
        }
    }
}

/// `error` in the words of the flags that fix it, when it is an `E`.
fn worded<E: Described + std::error::Error + 'static>(
    error: &(dyn std::error::Error + 'static),
) -> Option<String> {
    error.downcast_ref::<E>().map(|e| e.describe(&Flags))
}

/// Every error type of core's (and of its dataset crate's) that names settings.
const CORE_ERRORS: [fn(&(dyn std::error::Error + 'static)) -> Option<String>; 15] = [
    worded::<TrainError>,
    worded::<SpecError>,
    worded::<ResumeError>,
    worded::<BudgetError>,
    worded::<PlanningError>,
    worded::<PlanError>,
    worded::<CalibrationError>,
    worded::<RequestError>,
    worded::<ConfigError>,
    worded::<ModelError>,
    worded::<CheckpointError>,
    worded::<DataError>,
    worded::<PatchError>,
    worded::<FileError>,
    worded::<LayoutError>,
];

/// What `main` prints for an error: its chain, as `{:#}` prints it, with the first of core's
/// errors in it worded as flags (its own causes are in its words already).
pub fn error_words(error: &anyhow::Error) -> String {
    let mut parts = Vec::new();
    for cause in error.chain() {
        if let Some(words) = CORE_ERRORS.iter().find_map(|worded| worded(cause)) {
            parts.push(words);
            break;
        }
        parts.push(cause.to_string());
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use headroom_core::spec::RunSpec;

    #[test]
    fn core_names_the_setting_and_the_cli_its_flag() {
        let error = ConfigError::NotPositive {
            setting: Setting::LearningRate,
            value: -1.0,
        };
        assert_eq!(
            error.to_string(),
            "the learning rate must be a positive finite number (got -1)"
        );
        assert_eq!(
            error_words(&error.into()),
            "--lr must be a positive finite number (got -1)"
        );
        let request = anyhow::Error::from(RequestError::Zero(Setting::PatchesPerSpectrogram));
        assert_eq!(
            error_words(&request.context("cannot plan")),
            "cannot plan: --n-patches must be at least 1 (got 0)"
        );
    }

    #[test]
    fn a_refused_resume_names_the_flags_given() {
        let saved = headroom_core::TrainConfig::default();
        let args = |flags: &[&str]| {
            let mut all = vec!["trainer-cli", "train", "--resume", "runs/x"];
            all.extend_from_slice(flags);
            match crate::args::Cli::parse_from(all).command {
                Some(crate::args::Command::Train(a)) => a.spec().unwrap(),
                other => panic!("not a train command: {other:?}"),
            }
        };
        let spec: RunSpec = args(&[
            "--lr",
            "0.5",
            "--batch-size",
            "2",
            "--gradient-accumulation-steps",
            "1",
        ]);
        let error = anyhow::Error::from(spec.resume(&saved, None).unwrap_err());
        let said = error_words(&error);
        assert!(
            said.starts_with("--resume continues the saved run"),
            "{said}"
        );
        assert!(
            said.contains(&format!("--lr 0.5 (the run has {})", saved.lr)),
            "{said}"
        );
        assert!(
            said.contains("--batch-size 2 with --gradient-accumulation-steps 1"),
            "{said}"
        );
        let spec = args(&[
            "--no-plan",
            "--no-gradient-checkpointing",
            "--batch-size",
            "3",
        ]);
        let said = error_words(&spec.resume(&saved, None).unwrap_err().into());
        assert!(said.contains("--batch-size 3 with --no-plan"), "{said}");
        let spec = args(&["--steps", "9", "--use-gradient-checkpointing"]);
        let said = spec.resume(&saved, None).unwrap().said(&Flags).join("; ");
        assert!(said.contains("--steps 9 (was --epochs"), "{said}");
        assert!(
            said.contains("--use-gradient-checkpointing for the plan"),
            "{said}"
        );
    }

    #[test]
    fn a_run_error_deep_in_core_is_worded_as_flags() {
        let error = TrainError::Planning(PlanningError::Calibration(CalibrationError::Unmeasured(
            headroom_core::BackendKind::Wgpu,
        )));
        let plain = error.to_string();
        assert!(
            plain.contains("the planner off") && !plain.contains("--"),
            "{plain}"
        );
        let said = error_words(&anyhow::Error::from(error));
        assert!(
            said.contains("--no-plan")
                && said.contains("--batch-size")
                && said.contains("--gradient-accumulation-steps"),
            "{said}"
        );
    }
}
