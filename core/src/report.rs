//! What `trainer-cli bench --report` finds on a user's machine, as one document they can
//! attach to a bug report: each built-in model's training step timed on the chosen backend,
//! and the planner's predictions against the peaks that real runs reached over a grid of
//! budgets, with the device's own count of its memory beside them where the platform gives
//! one. The front-end runs the steps and the runs; here their results and events are read
//! into rows and summarised against the planner's targets, the figures the project's own
//! benchmarks (`bench/plan_inrun`) check.

use serde::{Deserialize, Serialize};

use crate::bench::BenchResult;
use crate::events::Event;
use crate::events::planned::Plan;
use crate::probe::MachineReport;
use crate::probe::device_use::DeviceUse;

/// The planner's promise in runs: the median prediction within 3% of the peak reached,
/// every one within 8%.
pub const MEDIAN_TARGET: f64 = 0.03;
pub const WORST_TARGET: f64 = 0.08;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    /// Headroom's version and the build's commit where it was recorded.
    pub headroom: String,
    /// Seconds since 1970 when the report was made.
    pub created_unix_s: u64,
    pub backend: String,
    /// The device in words ("NVIDIA H200, Vulkan"; the CPU's model and threads).
    pub device: String,
    /// Why auto chose the backend, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_reason: Option<String>,
    pub threads: usize,
    /// What the probe found: every device with its memory as its driver reports it.
    pub machine: MachineReport,
    pub speed: Vec<SpeedRow>,
    pub planner: Vec<PlannerRow>,
    pub summary: PlannerSummary,
}

/// One model's step, timed at its default batch.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SpeedRow {
    pub model: String,
    /// The timing, or why the model could not be timed here.
    pub result: Result<BenchResult, String>,
    /// The device's own count while it ran (NVML); empty where none is read.
    #[serde(default)]
    pub device_use: Vec<DeviceUse>,
}

/// One budget of the planner's grid: a run of `model` planned for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlannerRow {
    pub model: String,
    pub budget_bytes: u64,
    pub effective_batch: usize,
    /// What the run showed, or why it did not run.
    pub check: Result<PlanCheck, String>,
    #[serde(default)]
    pub device_use: Vec<DeviceUse>,
    pub seconds: f64,
}

/// A plan against the run it was made for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanCheck {
    pub plan: Plan,
    pub dry_runs: Vec<DryRunCheck>,
    /// The highest peak of the run's steps at the plan's own split (every step's when a
    /// recovery left none at it).
    pub measured_peak_bytes: u64,
    /// (predicted - measured) / measured: above 0 the plan was cautious.
    pub error: f64,
    pub steps: usize,
    pub recoveries: usize,
    /// Whether any step's measured peak passed the budget.
    pub over_budget: bool,
}

/// One dry-run: the planner's prediction for a real step, and what the step measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DryRunCheck {
    pub micro_batch: usize,
    pub predicted_peak_bytes: u64,
    pub measured_peak_bytes: u64,
    pub fits: bool,
    /// The device refused the step (a buffer past its largest): no measurement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

impl DryRunCheck {
    /// Relative error of a measured dry-run; `None` for a refused one.
    pub fn error(&self) -> Option<f64> {
        (self.refused.is_none() && self.measured_peak_bytes > 0).then(|| {
            (self.predicted_peak_bytes as f64 - self.measured_peak_bytes as f64)
                / self.measured_peak_bytes as f64
        })
    }
}

impl PlanCheck {
    /// Reads a run's events (`trainer-cli train --json`): its last plan, dry-runs, steps
    /// and recoveries.
    pub fn from_events(events: &[Event]) -> Result<Self, String> {
        let plan = events
            .iter()
            .rev()
            .find_map(|e| match e {
                Event::Plan(p) => Some(p.plan.clone()),
                _ => None,
            })
            .ok_or("the run made no plan")?;
        let steps: Vec<_> = events
            .iter()
            .filter_map(|e| match e {
                Event::Step(s) => Some(s),
                _ => None,
            })
            .collect();
        let at_plan: Vec<_> = steps
            .iter()
            .filter(|s| s.micro_batch == plan.micro_batch)
            .collect();
        let measured = if at_plan.is_empty() {
            steps.iter().map(|s| s.mem_peak_bytes).max()
        } else {
            at_plan.iter().map(|s| s.mem_peak_bytes).max()
        }
        .filter(|&b| b > 0)
        .ok_or("the run trained no step, so no peak was measured")?;
        let dry_runs = events
            .iter()
            .filter_map(|e| match e {
                Event::DryRun(d) => Some(DryRunCheck {
                    micro_batch: d.micro_batch,
                    predicted_peak_bytes: d.predicted_peak_bytes,
                    measured_peak_bytes: d.measured_peak_bytes,
                    fits: d.fits,
                    refused: d.refused.clone(),
                }),
                _ => None,
            })
            .collect();
        let recoveries = events
            .iter()
            .filter(|e| matches!(e, Event::Recovery(_)))
            .count();
        Ok(Self {
            error: (plan.predicted_peak_bytes as f64 - measured as f64) / measured as f64,
            over_budget: steps.iter().any(|s| s.mem_peak_bytes > plan.budget_bytes),
            measured_peak_bytes: measured,
            steps: steps.len(),
            recoveries,
            dry_runs,
            plan,
        })
    }
}

/// The grid against the planner's targets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlannerSummary {
    pub cells: usize,
    /// Cells whose run gave a check (the others failed; their rows say why).
    pub checked: usize,
    pub median_abs_error: Option<f64>,
    pub worst_abs_error: Option<f64>,
    /// The furthest any prediction fell under its measured peak (0: none under).
    pub most_under: Option<f64>,
    /// The dry-runs' worst relative error, the first dry-run of each run included.
    pub worst_dry_run_abs_error: Option<f64>,
    pub recoveries: usize,
    pub over_budget: usize,
    /// Median and worst within their targets, no recovery, nothing over a budget, every
    /// cell checked.
    pub holds: bool,
}

impl PlannerSummary {
    pub fn of(rows: &[PlannerRow]) -> Self {
        let checks: Vec<&PlanCheck> = rows.iter().filter_map(|r| r.check.as_ref().ok()).collect();
        let mut abs: Vec<f64> = checks.iter().map(|c| c.error.abs()).collect();
        // Sorts `abs` too, so its last is the worst.
        let median = (!abs.is_empty()).then(|| crate::bench::median(&mut abs));
        let worst = abs.last().copied();
        let most_under = checks
            .iter()
            .map(|c| (-c.error).max(0.0))
            .max_by(f64::total_cmp);
        let worst_dry_run = checks
            .iter()
            .flat_map(|c| c.dry_runs.iter().filter_map(DryRunCheck::error))
            .map(f64::abs)
            .max_by(f64::total_cmp);
        let recoveries = checks.iter().map(|c| c.recoveries).sum();
        let over_budget = checks.iter().filter(|c| c.over_budget).count();
        Self {
            cells: rows.len(),
            checked: checks.len(),
            median_abs_error: median,
            worst_abs_error: worst,
            most_under,
            worst_dry_run_abs_error: worst_dry_run,
            recoveries,
            over_budget,
            holds: !checks.is_empty()
                && checks.len() == rows.len()
                && median.is_some_and(|m| m <= MEDIAN_TARGET)
                && worst.is_some_and(|w| w <= WORST_TARGET)
                && recoveries == 0
                && over_budget == 0,
        }
    }
}

#[cfg(test)]
mod tests;
