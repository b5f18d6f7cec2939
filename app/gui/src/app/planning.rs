//! The app's planning: the budget resolved by core from the user's choice, and the plan
//! previewed from the device's calibration as the pins change (the run plans again, with its
//! dataset counted).

use headroom_core::budget::simulated as devices;
use headroom_core::budget::{BudgetSource, DEFAULT_FRACTION};
use headroom_core::model::{ModelConfig, WithModel, with_default};
use headroom_core::plan::{Breakdown, Calibration, Plan, Planning, RunShare, from_calibration};

use super::{BudgetChoice, HeadroomApp};

impl HeadroomApp {
    /// The planner's request for the current pins and budget, built by core as every
    /// front-end's is: the effective batch the user set, the pinned parts kept, the model's
    /// own patches per spectrogram preferred.
    pub(super) fn planning(&self, budget_bytes: u64) -> Result<Planning, String> {
        let defaults = headroom_core::model::info_of(&self.model)
            .map_err(|e| e.to_string())?
            .default_batch;
        Planning::new(
            budget_bytes,
            Some(self.effective_batch),
            self.pins.fixed(),
            defaults,
        )
        .map_err(|e| e.to_string())
    }

    /// The budget and where it came from, resolved by core as the CLI's is.
    pub fn budget(&self) -> Result<(u64, String), String> {
        let source = match &self.budget_choice {
            BudgetChoice::FreeMemory => BudgetSource::FreeMemory,
            BudgetChoice::Simulated(i) => BudgetSource::Simulated(
                *devices::DEVICES.get(*i).ok_or("no such simulated device")?,
            ),
            BudgetChoice::Custom(text) => BudgetSource::Given(
                headroom_core::size::parse_size(text).map_err(|e| e.to_string())?,
            ),
        };
        source
            .resolve(DEFAULT_FRACTION, self.device())
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
        let (budget, _) = match self.budget() {
            Ok(b) => b,
            Err(e) => return Some(Err(e)),
        };
        let planning = match self.planning(budget) {
            Ok(planning) => planning,
            Err(e) => return Some(Err(e)),
        };
        // A preview before the run: the dataset and its read-ahead are not counted here; the
        // run's own plan counts them.
        struct Preview<'a>(&'a Calibration, Planning);
        impl WithModel for Preview<'_> {
            type Output = Result<(Plan, Breakdown), String>;
            fn run<C: ModelConfig>(self, model: C) -> Self::Output {
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
