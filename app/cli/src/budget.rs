//! The run's memory budget from the command line: `--memory-budget`, `--simulate-device` or
//! the training device's free memory, as the run's spec names it, resolved by core's
//! [`BudgetSource`] as every front-end's is; this finds the device to size it from when none
//! was chosen yet.

use anyhow::{Context, Result};
use headroom_core::BackendKind;
use headroom_core::budget::{BudgetSource, ResolvedBudget};
use headroom_core::probe::gpus::ProbeSettings;
use headroom_core::probe::{self, DeviceReport, isolate};
use headroom_core::spec::RunSpec;

/// The budget for `backend`; `device` is the probed device when one was chosen already.
pub fn resolve(
    spec: &RunSpec,
    backend: BackendKind,
    device: Option<&DeviceReport>,
) -> Result<ResolvedBudget> {
    let source = spec.budget_source()?;
    let probed;
    let device = match (source, device) {
        (BudgetSource::FreeMemory, Some(d)) if d.backend == backend => Some(d),
        (BudgetSource::FreeMemory, _) if backend.is_host() => {
            probed = probe::cpu::probe()
                .into_iter()
                .find(|d| d.backend == backend)
                .context("the CPU probe found no CPU device")?;
            Some(&probed)
        }
        (BudgetSource::FreeMemory, _) => {
            let report = isolate::probe_machine(isolate::TIMEOUT, ProbeSettings::AUTO);
            probed = report
                .devices
                .into_iter()
                .find(|d| d.backend == backend && d.usable)
                .with_context(|| {
                    format!(
                        "the probe found no usable {backend} device to size the budget from; \
                         run `trainer-cli probe`, or give --memory-budget"
                    )
                })?;
            Some(&probed)
        }
        _ => None,
    };
    Ok(source.resolve(spec.memory.fraction, device)?)
}
