//! What a resumed run may not change: the one rule set every front-end applies. A run is what
//! it learns from (the model, the data, the step's size, the learning rate and clipping, the
//! seed); a setting given again with the saved value is fine (a command or a link repeated),
//! another value is refused, named. What it may change is [`ResumeChanges`](crate::config::ResumeChanges).

use std::path::PathBuf;

use headroom_datasets::PatchPlacement;

pub use crate::config::Setting;
use crate::config::{DatasetSource, TrainConfig};
use crate::split::Split;

/// The settings that make a run what it is, as a front-end was given them for a resumed run;
/// `None`: not given.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Identity {
    pub model: Option<String>,
    pub lr: Option<f64>,
    pub clip_norm: Option<f64>,
    pub seed: Option<u64>,
    pub stride: Option<usize>,
    pub n_patches: Option<usize>,
    pub placement: Option<PatchPlacement>,
    pub effective_batch: Option<usize>,
    pub micro_batch: Option<usize>,
    pub accumulation: Option<usize>,
    pub machine_ids: Option<u32>,
    pub train_clips_per_id: Option<usize>,
    pub test_clips_per_id: Option<usize>,
}

/// What the saved run has instead of a refused setting.
#[derive(Debug, Clone, PartialEq)]
pub enum Saved {
    /// Its own value, in words.
    Value(String),
    /// The recordings under this root: the built-in dataset's sizes do not apply.
    Recordings(PathBuf),
}

/// A setting a resumed run refuses: given as `given`, the run has `saved`.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub setting: Setting,
    pub given: String,
    pub saved: Saved,
}

impl Identity {
    /// The given settings that would make the saved run another run.
    pub fn refusals(&self, saved: &TrainConfig) -> Vec<Refusal> {
        let mut refused = Vec::new();
        let mut differs = |setting, given: Option<String>, was: String| {
            if let Some(given) = given
                && given != was
            {
                refused.push(Refusal {
                    setting,
                    given,
                    saved: Saved::Value(was),
                });
            }
        };
        let text = |v: Option<f64>| v.map(|v| v.to_string());
        differs(Setting::Model, self.model.clone(), saved.model.name.clone());
        differs(Setting::LearningRate, text(self.lr), saved.lr.to_string());
        differs(
            Setting::ClipNorm,
            text(self.clip_norm),
            saved.clip_norm.map_or("none".into(), |v| v.to_string()),
        );
        differs(
            Setting::Seed,
            self.seed.map(|v| v.to_string()),
            saved.seed.to_string(),
        );
        differs(
            Setting::Stride,
            self.stride.map(|v| v.to_string()),
            saved.stride.to_string(),
        );
        differs(
            Setting::PatchesPerSpectrogram,
            self.n_patches.map(|v| v.to_string()),
            saved.n_patches.to_string(),
        );
        differs(
            Setting::Placement,
            self.placement.map(|p| placement_words(p).to_string()),
            placement_words(saved.placement).to_string(),
        );
        differs(
            Setting::EffectiveBatch,
            self.effective_batch.map(|v| v.to_string()),
            saved.effective_batch().to_string(),
        );
        if let (Some(micro_batch), Some(accumulation)) = (self.micro_batch, self.accumulation) {
            let patches = self.n_patches.unwrap_or(saved.n_patches);
            let asked = Split::even(micro_batch, patches, accumulation);
            differs(
                Setting::MicroBatchTimesAccumulation,
                Some(asked.effective_batch().to_string()),
                saved.effective_batch().to_string(),
            );
        }
        let built_in = [
            (Setting::MachineIds, self.machine_ids.map(|v| v as usize)),
            (Setting::TrainClipsPerId, self.train_clips_per_id),
            (Setting::TestClipsPerId, self.test_clips_per_id),
        ];
        match &saved.dataset {
            DatasetSource::Synthetic(synthetic) => {
                let was = [
                    synthetic.machine_ids as usize,
                    synthetic.train_per_id,
                    synthetic.test_normal_per_id,
                ];
                for ((setting, given), was) in built_in.into_iter().zip(was) {
                    differs(setting, given.map(|v| v.to_string()), was.to_string());
                }
            }
            DatasetSource::Dcase { root, .. } => {
                for (setting, given) in built_in {
                    if let Some(given) = given {
                        refused.push(Refusal {
                            setting,
                            given: given.to_string(),
                            saved: Saved::Recordings(root.clone()),
                        });
                    }
                }
            }
        }
        refused
    }
}

/// How a placement is written on every front-end.
pub fn placement_words(placement: PatchPlacement) -> &'static str {
    match placement {
        PatchPlacement::Even => "even",
        PatchPlacement::Random => "random",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_saved_values_given_again_are_fine_others_are_refused_by_setting() {
        let saved = TrainConfig::default();
        let again = Identity {
            lr: Some(saved.lr),
            seed: Some(saved.seed),
            n_patches: Some(saved.n_patches),
            micro_batch: Some(saved.micro_batch),
            accumulation: Some(saved.accumulation),
            ..Identity::default()
        };
        assert_eq!(again.refusals(&saved), []);
        let other = Identity {
            lr: Some(0.5),
            micro_batch: Some(2),
            accumulation: Some(1),
            machine_ids: Some(9),
            ..Identity::default()
        };
        let refused = other.refusals(&saved);
        let settings: Vec<Setting> = refused.iter().map(|r| r.setting).collect();
        assert_eq!(
            settings,
            [
                Setting::LearningRate,
                Setting::MicroBatchTimesAccumulation,
                Setting::MachineIds
            ]
        );
        assert_eq!(refused[0].given, "0.5");
        assert_eq!(refused[0].saved, Saved::Value(saved.lr.to_string()));
        assert_eq!(refused[1].given, (2 * saved.n_patches).to_string());
    }

    #[test]
    fn a_run_on_recordings_refuses_any_built_in_size() {
        let saved = TrainConfig {
            dataset: DatasetSource::Dcase {
                root: "dev_data".into(),
                machine_type: None,
                features: Default::default(),
            },
            ..TrainConfig::default()
        };
        let asked = Identity {
            train_clips_per_id: Some(40),
            ..Identity::default()
        };
        assert_eq!(
            asked.refusals(&saved),
            [Refusal {
                setting: Setting::TrainClipsPerId,
                given: "40".into(),
                saved: Saved::Recordings("dev_data".into()),
            }]
        );
    }
}
