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
        Setting::MicroBatchTimesAccumulation => "--batch-size x --gradient-accumulation-steps",
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
    }
}

/// Core's settings as this program's flags.
pub struct Flags;

impl Wording for Flags {
    fn setting(&self, setting: Setting) -> String {
        flag(setting).to_string()
    }
}

/// `error` in the words of the flags that fix it, when it is an `E`.
fn worded<E: Described + std::error::Error + 'static>(
    error: &(dyn std::error::Error + 'static),
) -> Option<String> {
    error.downcast_ref::<E>().map(|e| e.describe(&Flags))
}

/// Every error type of core's (and of its dataset crate's) that names settings.
const CORE_ERRORS: [fn(&(dyn std::error::Error + 'static)) -> Option<String>; 13] = [
    worded::<TrainError>,
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
