//! The run's memory budget from the command line: `--memory-budget`, `--simulate-device` or
//! the training device's free memory, as the run's spec names it, resolved by core's
//! [`BudgetSource`] as every front-end's is; this finds the device to size it from when none
//! was chosen yet.

use anyhow::{Context, Result, anyhow};
use headroom_core::BackendKind;
use headroom_core::budget::simulated as devices;
use headroom_core::budget::{BudgetSource, ResolvedBudget};
use headroom_core::probe::gpus::ProbeSettings;
use headroom_core::probe::{self, DeviceReport, isolate};
use headroom_core::size::human as gib;
use headroom_core::spec::{BudgetSpec, RunSpec};

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

/// A what-if row's device: its name, its budget, what is resident there before the run, and
/// whether it is a GPU (planned from the GPU path's memory).
pub struct WhatIfDevice {
    pub name: String,
    pub budget_bytes: u64,
    pub resident_bytes: u64,
    pub gpu: bool,
}

/// The what-if table's devices: a GPU given `--memory-budget`, each GPU of the table, and
/// this CPU (`resident` in use on it), their budgets at the spec's fraction.
pub fn what_if_devices(
    spec: &headroom_core::spec::RunSpec,
    resident: u64,
) -> Result<Vec<WhatIfDevice>> {
    let f = spec.memory.fraction;
    let gpu = |name: String, budget_bytes| WhatIfDevice {
        name,
        budget_bytes,
        resident_bytes: 0,
        gpu: true,
    };
    let mut out = Vec::new();
    // A budget the user names is a GPU's: the table's own rows already cover this CPU.
    if let BudgetSpec::Given { bytes } = spec.memory.budget {
        out.push(gpu(format!("a GPU, --memory-budget {}", gib(bytes)), bytes));
    }
    for d in devices::DEVICES {
        let budget = BudgetSource::Simulated(*d).resolve(f, None)?.bytes;
        out.push(gpu(d.label.to_string(), budget));
    }
    let cpu = headroom_core::probe::cpu::probe()
        .into_iter()
        .find(|d| d.backend.is_host())
        .context("the CPU probe found no CPU device")?;
    let cpu_free = cpu
        .free_memory
        .bytes
        .ok_or_else(|| anyhow!("the CPU probe did not report free RAM"))?;
    out.push(WhatIfDevice {
        name: format!("this CPU ({} RAM free)", gib(cpu_free)),
        budget_bytes: BudgetSource::FreeMemory.resolve(f, Some(&cpu))?.bytes,
        resident_bytes: resident,
        gpu: false,
    });
    Ok(out)
}
