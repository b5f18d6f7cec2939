//! Core's settings in the words of this program's flags: every error and refusal core reports
//! names a setting, and the user reads the flag that sets it.

use headroom_core::config::{ConfigError, Setting};
use headroom_core::plan::RequestError;

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
    }
}

/// A configuration error in the words of the flags that set it right.
pub fn config_error(error: &ConfigError) -> Option<String> {
    Some(match error {
        ConfigError::Zero(setting) => format!("{} must be at least 1 (got 0)", flag(*setting)),
        ConfigError::NotPositive { setting, value } => {
            format!(
                "{} must be a positive finite number (got {value})",
                flag(*setting)
            )
        }
        ConfigError::UnevenSplit { .. } => return None,
    })
}

/// A planning request error in the words of the flags.
pub fn request_error(error: RequestError) -> String {
    let RequestError::Zero(setting) = error;
    format!("{} must be at least 1 (got 0)", flag(setting))
}

/// Any error of a run, with core's configuration errors worded as flags.
pub fn train_error(error: headroom_core::TrainError) -> anyhow::Error {
    match &error {
        headroom_core::TrainError::Config(config) => match config_error(config) {
            Some(words) => anyhow::anyhow!(words),
            None => error.into(),
        },
        _ => error.into(),
    }
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
            config_error(&error).unwrap(),
            "--lr must be a positive finite number (got -1)"
        );
        assert_eq!(
            request_error(RequestError::Zero(Setting::PatchesPerSpectrogram)),
            "--n-patches must be at least 1 (got 0)"
        );
    }
}
