//! The app's planning: the user's choices as core's run spec, the budget resolved by core
//! from it, and the plan previewed from the device's calibration as the pins change (the run plans again, with its
//! dataset counted).

use headroom_core::RunLength;
use headroom_core::budget::simulated as devices;
use headroom_core::plan::{Breakdown, Calibration, Plan, Planning, RunShare, from_calibration};
use headroom_core::registry::{BuiltIn, WithTask, with_default};
use headroom_core::spec::{BudgetSpec, DataSpec, MemorySpec, RunSpec, SplitSpec};
use headroom_core::speech::SpeechFiles;

use super::{BudgetChoice, HeadroomApp};

impl HeadroomApp {
    /// The run the current choices ask for, as core's spec, which the CLI's flags and the
    /// page's address fill too: the model, the dataset, the pinned parts of the split, the
    /// effective batch, the budget's source and the run's length.
    pub(super) fn spec(&self) -> Result<RunSpec, String> {
        let budget = match &self.budget_choice {
            BudgetChoice::FreeMemory => BudgetSpec::FreeMemory,
            BudgetChoice::Simulated(i) => BudgetSpec::Simulated {
                device: devices::DEVICES
                    .get(*i)
                    .ok_or("no such simulated device")?
                    .name
                    .to_string(),
            },
            BudgetChoice::Custom(text) => BudgetSpec::Given {
                bytes: headroom_core::size::parse_size(text).map_err(|e| e.to_string())?,
            },
        };
        let fixed = self.pins.fixed();
        // A run file's settings are its model's: another model trains with its defaults.
        let base = if self.base.model_name() == self.model {
            self.base.clone()
        } else {
            RunSpec::default()
        };
        let speech = self.speech_files().map(|files| match &base.data.speech {
            // The file's validation and test recordings, with its train recordings.
            Some(opened) if opened.train == files.train => opened.clone(),
            _ => files,
        });
        let root = self.dataset.root.clone();
        // The file's settings of its own source of clips, for that source.
        let data = match (&root, &speech) {
            (Some(_), _) if base.data.root == root => DataSpec {
                speech: None,
                machine_ids: None,
                train_clips_per_id: None,
                test_clips_per_id: None,
                ..base.data.clone()
            },
            (None, None) if base.data.root.is_none() => DataSpec {
                speech: None,
                ..base.data.clone()
            },
            _ => DataSpec::default(),
        };
        Ok(RunSpec {
            model: Some(self.model.clone()),
            data: DataSpec {
                root,
                speech,
                ..data
            },
            split: SplitSpec {
                micro_batch: fixed.micro_batch,
                n_patches: fixed.n_patches,
                accumulation: fixed.accumulation,
                ..base.split
            },
            memory: MemorySpec {
                budget,
                effective_batch: Some(self.effective_batch),
                checkpointing: fixed.checkpointing,
                precision: fixed.precision,
                ..base.memory.clone()
            },
            length: base.length.or(Some(RunLength::Steps(self.settings.steps))),
            // The app plans; it trains on the device selected.
            planner: true,
            backend: None,
            device: None,
            ..base
        })
    }

    /// The recordings the run reads: the recogniser's alone, so that another model picked
    /// with recordings open trains on its own data.
    pub fn speech_files(&self) -> Option<SpeechFiles> {
        self.recordings
            .clone()
            .filter(|_| self.speech_reader())
            .map(|train| SpeechFiles {
                train,
                validation: None,
                test: None,
            })
    }

    /// The budget and where it came from, resolved by core as the CLI's is.
    pub fn budget(&self) -> Result<(u64, String), String> {
        self.budget_of(&self.spec()?)
    }

    /// The budget `spec` names, on the selected device.
    pub(super) fn budget_of(&self, spec: &RunSpec) -> Result<(u64, String), String> {
        let source = spec.budget_source().map_err(|e| e.to_string())?;
        source
            .resolve(spec.memory.fraction, self.device())
            .map(|b| (b.bytes, b.source))
            .map_err(|e| e.to_string())
    }

    /// The plan for the current pins and budget, from the device's calibration: instant, so
    /// it follows every change of a pin.
    pub fn plan(&self) -> Option<Result<(Plan, Breakdown), String>> {
        let (target, model, calibration) = self.calibration.as_ref()?;
        if Some(*target) != self.target() || *model != self.model {
            return None;
        }
        let spec = match self.spec() {
            Ok(spec) => spec,
            Err(e) => return Some(Err(e)),
        };
        let planning = match self
            .budget_of(&spec)
            .and_then(|(budget, _)| planning_of(&spec, budget))
        {
            Ok(planning) => planning,
            Err(e) => return Some(Err(e)),
        };
        // A preview before the run: the dataset and its read-ahead are not counted here; the
        // run's own plan counts them.
        struct Preview<'a>(&'a Calibration, Planning);
        impl WithTask for Preview<'_> {
            type Output = Result<(Plan, Breakdown), String>;
            fn run<T: BuiltIn>(self, model: T) -> Self::Output {
                from_calibration(&model, self.0, &self.1, RunShare::default())
                    .map_err(|e| e.to_string())
            }
        }
        Some(
            with_default(model, Preview(calibration, planning))
                .map_err(|e| e.to_string())
                .and_then(|preview| preview),
        )
    }
}

/// The planner's request for `spec` and a budget, built by core as every front-end's is.
pub(super) fn planning_of(spec: &RunSpec, budget_bytes: u64) -> Result<Planning, String> {
    spec.planning(budget_bytes)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| "the app always plans".to_string())
}
