//! What a resumed run may change: the one rule set every front-end applies. A run is what it
//! learns from (the model, the data, the step's size, the learning rate and clipping, the
//! seed); a setting given again with the saved value is fine (a command or a link repeated),
//! another value is refused, named. Where it trains, how long, how often it checkpoints and
//! validates, and how the planner splits its step may change, and each change is said.

use std::path::PathBuf;

use headroom_datasets::PatchPlacement;

use super::RunSpec;
use crate::Target;
use crate::config::{DatasetSource, ResumeChanges, RunLength, TrainConfig};
use crate::setting::{Described, PlainWords, Setting, Wording};
use crate::split::Split;

/// A setting a resumed run refuses.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// Given as `given`, where the run has `saved`.
    Differs {
        setting: Setting,
        given: String,
        saved: String,
    },
    /// A size of the built-in dataset, given to a run on the recordings under `root`.
    Recordings {
        setting: Setting,
        given: String,
        root: PathBuf,
    },
    /// Micro-batch and accumulation that make another effective batch than the run's.
    Split {
        micro_batch: usize,
        accumulation: usize,
        effective_batch: usize,
        saved: usize,
    },
    /// A part of the step's split given with the planner off, other than the run's: without
    /// a plan the saved split is the run's, and nothing would apply it.
    WithoutPlanner { setting: Setting, given: String },
}

impl Described for Refusal {
    fn describe(&self, words: &dyn Wording) -> String {
        match self {
            Refusal::Differs {
                setting,
                given,
                saved,
            } => format!("{} (the run has {saved})", words.given(*setting, given)),
            Refusal::Recordings {
                setting,
                given,
                root,
            } => format!(
                "{} (the run reads the recordings under {})",
                words.given(*setting, given),
                root.display()
            ),
            Refusal::Split {
                micro_batch,
                accumulation,
                effective_batch,
                saved,
            } => format!(
                "{} with {} (an effective batch of {effective_batch} patches; the run's is \
                 {saved})",
                words.given(Setting::MicroBatch, &micro_batch.to_string()),
                words.given(Setting::Accumulation, &accumulation.to_string()),
            ),
            Refusal::WithoutPlanner { setting, given } => {
                let planner_off = words.setting(Setting::PlannerOff);
                format!(
                    "{} with {planner_off} (without {planner_off} the planner splits the \
                     resumed run's steps with it)",
                    words.given(*setting, given)
                )
            }
        }
    }
}

/// A change a resumed run applies, to be said to the user.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    Target {
        given: Target,
        was: Target,
    },
    Length {
        given: RunLength,
        was: RunLength,
    },
    /// An interval: checkpoints, validation, returning cached memory.
    Every {
        setting: Setting,
        given: u64,
        was: u64,
    },
    /// The run's folder of recordings at another path: the same folder's name.
    DataRoot {
        given: PathBuf,
        was: PathBuf,
    },
    /// Parts of the split (or the precision, the checkpointing) the planner keeps; the
    /// effective batch stays the run's.
    ForThePlan {
        given: Vec<(Setting, String)>,
        effective_batch: usize,
    },
}

fn length_words(length: RunLength, words: &dyn Wording) -> String {
    match length {
        RunLength::Steps(n) => words.given(Setting::Steps, &n.to_string()),
        RunLength::Epochs(n) => words.given(Setting::Epochs, &n.to_string()),
    }
}

impl Described for Change {
    fn describe(&self, words: &dyn Wording) -> String {
        match self {
            Change::Target { given, was } => {
                format!("backend {} (was {})", given.backend, was.backend)
            }
            Change::Length { given, was } => format!(
                "{} (was {})",
                length_words(*given, words),
                length_words(*was, words)
            ),
            Change::Every {
                setting,
                given,
                was,
            } => format!("{} (was {was})", words.given(*setting, &given.to_string())),
            Change::DataRoot { given, was } => format!(
                "{} (was {}: the same folder's name)",
                words.given(Setting::DataRoot, &given.display().to_string()),
                was.display()
            ),
            Change::ForThePlan {
                given,
                effective_batch,
            } => format!(
                "{} for the plan (the effective batch stays {effective_batch} patches)",
                given
                    .iter()
                    .map(|(setting, value)| words.given(*setting, value))
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
        }
    }
}

/// A resumed run's changes, and each in a form to say.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Resumed {
    pub changes: ResumeChanges,
    pub said: Vec<Change>,
}

impl Resumed {
    /// The changes in a front-end's words.
    pub fn said(&self, words: &dyn Wording) -> Vec<String> {
        self.said.iter().map(|c| c.describe(words)).collect()
    }
}

/// Settings that would make the saved run another run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}", self.describe(&PlainWords))]
pub struct ResumeError {
    pub refusals: Vec<Refusal>,
}

impl Described for ResumeError {
    fn describe(&self, words: &dyn Wording) -> String {
        let refused: Vec<String> = self.refusals.iter().map(|r| r.describe(words)).collect();
        format!(
            "{} continues the saved run, which {} would change; leave them out to continue it, \
             or start a new run",
            words.setting(Setting::Resume),
            refused.join(", ")
        )
    }
}

/// The refusals found so far.
#[derive(Default)]
struct Refusals(Vec<Refusal>);

impl Refusals {
    /// Refuses `setting` when it was given with another value than the run's.
    fn differs(&mut self, setting: Setting, given: Option<String>, was: String) {
        if let Some(given) = given
            && given != was
        {
            self.0.push(Refusal::Differs {
                setting,
                given,
                saved: was,
            });
        }
    }
}

fn on_off(on: bool) -> String {
    if on { "on" } else { "off" }.to_string()
}

/// How a placement is written on every front-end.
fn placement_words(placement: PatchPlacement) -> &'static str {
    match placement {
        PatchPlacement::Even => "even",
        PatchPlacement::Random => "random",
    }
}

impl RunSpec {
    /// What a run resumed from `saved` takes from this spec, on `target` (`None`: its own).
    pub fn resume(
        &self,
        saved: &TrainConfig,
        target: Option<Target>,
    ) -> Result<Resumed, ResumeError> {
        let refusals = self.refusals(saved);
        if !refusals.is_empty() {
            return Err(ResumeError { refusals });
        }
        let mut resumed = Resumed::default();
        if let Some(target) = target
            && target != saved.target()
        {
            resumed.changes.target = Some(target);
            resumed.said.push(Change::Target {
                given: target,
                was: saved.target(),
            });
        }
        if let Some(length) = self.length
            && length != saved.length
        {
            resumed.changes.length = Some(length);
            resumed.said.push(Change::Length {
                given: length,
                was: saved.length,
            });
        }
        for (setting, given, was, slot) in [
            (
                Setting::CheckpointEvery,
                self.checkpoint_every,
                saved.checkpoint_every,
                &mut resumed.changes.checkpoint_every,
            ),
            (
                Setting::ValidateEvery,
                self.validate_every,
                saved.validate_every,
                &mut resumed.changes.validate_every,
            ),
            (
                Setting::EmptyCacheEvery,
                self.empty_cache_every,
                saved.empty_cache_every,
                &mut resumed.changes.empty_cache_every,
            ),
        ] {
            if let Some(given) = given
                && given != was
            {
                *slot = Some(given);
                resumed.said.push(Change::Every {
                    setting,
                    given,
                    was,
                });
            }
        }
        if let (Some(given), DatasetSource::Dcase { root, .. }) = (&self.data.root, &saved.dataset)
            && given != root
        {
            resumed.changes.data_root = Some(given.clone());
            resumed.said.push(Change::DataRoot {
                given: given.clone(),
                was: root.clone(),
            });
        }
        let for_the_plan: Vec<(Setting, String)> = self
            .split_parts()
            .into_iter()
            .filter_map(|(setting, given)| Some((setting, given?)))
            .collect();
        if self.planner && !for_the_plan.is_empty() {
            resumed.said.push(Change::ForThePlan {
                given: for_the_plan,
                effective_batch: saved.effective_batch(),
            });
        }
        Ok(resumed)
    }

    /// The parts of the split the planner keeps, each `None` where not given: micro-batch,
    /// accumulation, precision, checkpointing.
    fn split_parts(&self) -> [(Setting, Option<String>); 4] {
        [
            (
                Setting::MicroBatch,
                self.split.micro_batch.map(|v| v.to_string()),
            ),
            (
                Setting::Accumulation,
                self.split.accumulation.map(|v| v.to_string()),
            ),
            (
                Setting::Precision,
                self.memory.precision.map(|p| p.to_string()),
            ),
            (
                Setting::Checkpointing,
                self.memory.checkpointing.map(on_off),
            ),
        ]
    }

    /// The given settings that would make the saved run another run.
    fn refusals(&self, saved: &TrainConfig) -> Vec<Refusal> {
        let mut refused = Refusals::default();
        let text = |v: Option<f64>| v.map(|v| v.to_string());
        let split = &self.split;
        refused.differs(Setting::Model, self.model.clone(), saved.model.name.clone());
        refused.differs(Setting::LearningRate, text(self.lr), saved.lr.to_string());
        refused.differs(
            Setting::ClipNorm,
            text(self.clip_norm),
            saved.clip_norm.map_or("none".into(), |v| v.to_string()),
        );
        refused.differs(
            Setting::Ema,
            text(self.ema),
            saved.ema.map_or("none".into(), |v| v.to_string()),
        );
        refused.differs(
            Setting::Seed,
            self.seed.map(|v| v.to_string()),
            saved.seed.to_string(),
        );
        refused.differs(
            Setting::Stride,
            split.stride.map(|v| v.to_string()),
            saved.stride.to_string(),
        );
        refused.differs(
            Setting::PatchesPerSpectrogram,
            split.n_patches.map(|v| v.to_string()),
            saved.n_patches.to_string(),
        );
        refused.differs(
            Setting::Placement,
            split.placement.map(|p| placement_words(p).to_string()),
            placement_words(saved.placement).to_string(),
        );
        refused.differs(
            Setting::EffectiveBatch,
            self.memory.effective_batch.map(|v| v.to_string()),
            saved.effective_batch().to_string(),
        );
        if !self.planner {
            // Without a plan the saved split is the run's: another value has nothing to apply it.
            let was = [
                saved.micro_batch.to_string(),
                saved.accumulation.to_string(),
                saved.precision.to_string(),
                on_off(saved.checkpointing),
            ];
            for ((setting, given), was) in self.split_parts().into_iter().zip(was) {
                if let Some(given) = given
                    && given != was
                {
                    refused.0.push(Refusal::WithoutPlanner { setting, given });
                }
            }
        }
        if let (Some(micro_batch), Some(accumulation)) = (split.micro_batch, split.accumulation) {
            let patches = split.n_patches.unwrap_or(saved.n_patches);
            let effective_batch = Split::even(micro_batch, patches, accumulation).effective_batch();
            if effective_batch != saved.effective_batch() {
                refused.0.push(Refusal::Split {
                    micro_batch,
                    accumulation,
                    effective_batch,
                    saved: saved.effective_batch(),
                });
            }
        }
        self.dataset_refusals(saved, &mut refused);
        refused.0
    }

    /// The dataset's settings against the saved run's dataset.
    fn dataset_refusals(&self, saved: &TrainConfig, refused: &mut Refusals) {
        let d = &self.data;
        let built_in = [
            (Setting::MachineIds, d.machine_ids.map(|v| v as usize)),
            (Setting::TrainClipsPerId, d.train_clips_per_id),
            (Setting::TestClipsPerId, d.test_clips_per_id),
        ];
        let recordings = [
            (Setting::MachineType, d.machine_type.clone()),
            (Setting::NMels, d.n_mels.map(|v| v.to_string())),
            (Setting::SampleRate, d.sample_rate.map(|v| v.to_string())),
            (Setting::Resample, d.resample.then(|| on_off(true))),
        ];
        // Another path with the same folder's name is the run's folder moved, or a page's run
        // (which saves only the picked folder's name) continued natively.
        if let (Some(given), DatasetSource::Dcase { root, .. }) = (&d.root, &saved.dataset)
            && given.file_name() != root.file_name()
        {
            refused.0.push(Refusal::Differs {
                setting: Setting::DataRoot,
                given: given.display().to_string(),
                saved: root.display().to_string(),
            });
        }
        match &saved.dataset {
            DatasetSource::Synthetic(synthetic) => {
                let was = [
                    synthetic.machine_ids as usize,
                    synthetic.train_per_id,
                    synthetic.test_normal_per_id,
                ];
                for ((setting, given), was) in built_in.into_iter().zip(was) {
                    refused.differs(setting, given.map(|v| v.to_string()), was.to_string());
                }
                let root = d.root.as_ref().map(|r| r.display().to_string());
                for (setting, given) in [(Setting::DataRoot, root)].into_iter().chain(recordings) {
                    refused.differs(setting, given, "the built-in dataset".to_string());
                }
            }
            DatasetSource::Dcase {
                root,
                machine_type,
                features,
            } => {
                let was = [
                    machine_type.clone().unwrap_or_else(|| "every type".into()),
                    features.logmel.n_mels.to_string(),
                    features.logmel.sample_rate.to_string(),
                    on_off(features.resample),
                ];
                for ((setting, given), was) in recordings.into_iter().zip(was) {
                    refused.differs(setting, given, was);
                }
                for (setting, given) in built_in {
                    if let Some(given) = given {
                        refused.0.push(Refusal::Recordings {
                            setting,
                            given: given.to_string(),
                            root: root.clone(),
                        });
                    }
                }
            }
        }
    }
}
