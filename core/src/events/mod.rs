//! Typed progress events: the engine reports, front-ends render. Serialised with an
//! `event` tag, one JSON object per event; the field names are a stable interface.

pub mod picture;
pub mod planned;
pub mod results;

use serde::{Deserialize, Serialize};

pub use crate::lengths::Padding;
use crate::memory::MemorySource;
pub use picture::{Picture, PictureReport};
use planned::{Breakdown, Plan, StepMeasurement};
pub use results::{Results, ResultsRow};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// How `--backend auto` chose, and why.
    BackendChoice { backend: String, reason: String },
    /// The memory budget a run plans for and guards, and where it came from.
    Budget { bytes: u64, source: String },
    /// One check of a plan: a real step at the plan's size, measured against the budget.
    DryRun(DryRunReport),
    /// The plan a run trains with, its prediction and the reason in words.
    Plan(PlanReport),
    /// The run's clips: what was found, how they are read, what was left out.
    Dataset(DatasetReport),
    /// A saved run continues: from where, at which step, and what the flags given with it
    /// changed (empty: the saved settings as they were).
    Resumed {
        from: String,
        step: u64,
        changes: Vec<String>,
    },
    /// The run's settings were written as a run file (`trainer-cli train`'s OUT/run.toml,
    /// which it reads back): where, the run file the run was read from, if any, and the
    /// settings given beside that one (in the front-end's words), which won over its own.
    RunFile {
        path: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        config: Option<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        overridden: Vec<String>,
    },
    /// The run's configuration, once before the first step.
    Config(RunInfo),
    /// A step ran out of memory; the run shrank its micro-batch and redid the step.
    Recovery(RecoveryReport),
    /// One optimizer step.
    Step(StepReport),
    /// An epoch of the train split has been consumed.
    Epoch { epoch: u64, step: u64 },
    /// Loss on held-out examples, without autodiff.
    Validation {
        step: u64,
        loss: f64,
        /// The most memory the pass held (as a step's `mem_peak_bytes` counts it): held-out
        /// batches are planned too, and this is what they reached.
        #[serde(skip_serializing_if = "Option::is_none", default)]
        mem_peak_bytes: Option<u64>,
    },
    /// What the networks make now, drawn at a validation (a GAN's generated patches).
    Picture(PictureReport),
    /// A checkpoint was written (atomically).
    Checkpoint { step: u64, path: String },
    /// The device was asked to return cached memory.
    MemoryCleanup { step: u64 },
    /// Anomaly scores of the test split.
    Evaluation(EvaluationReport),
    /// What a kind of training other than the patch task measured on held-out data.
    Results(Results),
    /// Training stopped: finished, or asked to stop.
    Finished {
        step: u64,
        total_steps: u64,
        stopped_early: bool,
        elapsed_s: f64,
        /// The process's peak resident memory so far (Linux's VmHWM), when known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        host_peak_bytes: Option<u64>,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanReport {
    #[serde(flatten)]
    pub plan: Plan,
    pub breakdown: Breakdown,
    /// The calibration steps the prediction rests on.
    pub calibration: Vec<StepMeasurement>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DryRunReport {
    pub attempt: usize,
    pub micro_batch: usize,
    pub n_patches: usize,
    pub accumulation: usize,
    pub checkpointing: bool,
    pub precision: crate::precision::Precision,
    pub predicted_peak_bytes: u64,
    pub measured_peak_bytes: u64,
    pub budget_bytes: u64,
    pub fits: bool,
    /// Frames of each example, for a run planned by length: the bucket measured.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub frames: Option<usize>,
    /// The device refused the step whatever the budget (an allocation over its largest
    /// buffer, or out of its memory), in its words; nothing was measured then.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub refused: Option<String>,
    /// A plan of several phases: each phase's micro-batch, prediction and measured peak.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub phases: Vec<PhaseDryRun>,
}

/// One phase of a dry-run step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhaseDryRun {
    pub phase: String,
    pub micro_batch: usize,
    pub predicted_peak_bytes: u64,
    pub measured_peak_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecoveryReport {
    /// The step that was redone.
    pub step: u64,
    pub error: String,
    pub from_micro_batch: usize,
    pub to_micro_batch: usize,
    pub n_patches: usize,
    pub from_accumulation: usize,
    pub to_accumulation: usize,
    pub effective_batch: usize,
    /// Recoveries in a row, this one included.
    pub in_a_row: u32,
    /// A task of several phases: the phase that ran out, whose micro-batch alone shrank
    /// (`from_`/`to_` are its own); `None`: every phase's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    /// The model's name (`trainer-cli models`).
    #[serde(default)]
    pub model: String,
    pub backend: String,
    pub device: String,
    pub micro_batch: usize,
    pub accumulation: usize,
    pub n_patches: usize,
    pub stride: usize,
    /// Patches per optimizer step: micro_batch x n_patches x accumulation.
    pub effective_batch: usize,
    pub total_steps: u64,
    pub start_step: u64,
    pub steps_per_epoch: u64,
    pub lr: f64,
    pub seed: u64,
    pub train_clips: usize,
    pub validation_clips: usize,
    pub test_clips: usize,
    pub parameters: usize,
    pub memory_source: MemorySource,
    pub precision: String,
    pub checkpointing: bool,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub budget_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub predicted_peak_bytes: Option<u64>,
    /// For a run split by length: how many examples a micro-batch of each length holds
    /// (then `micro_batch` is the longest bucket's, `accumulation` the most a step takes).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub length_buckets: Option<crate::lengths::LengthBuckets>,
    /// What a step of this split means for the task, where the split changes what its loss
    /// computes (a contrastive model's negatives per pair).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub step_words: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepReport {
    pub step: u64,
    pub total_steps: u64,
    pub epoch: u64,
    /// Loss of the optimizer step: the mean over its micro-batches.
    pub loss: f64,
    pub reconstruction_loss: f64,
    pub lr: f64,
    /// Global gradient norm before clipping.
    pub grad_norm: f64,
    pub patches_per_s: f64,
    pub step_ms: f64,
    /// The split this step ran with (it changes when a run recovers from out-of-memory).
    pub micro_batch: usize,
    pub accumulation: usize,
    pub mem_allocated_bytes: u64,
    pub mem_peak_bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub mem_reserved_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub mem_budget_bytes: Option<u64>,
    /// Each phase's figures, in the task's order, for a task of several phases (a GAN's
    /// discriminator and generator); `loss` and `grad_norm` above are the first phase's.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub phases: Vec<PhaseReport>,
    /// For examples of every length: the frames the step's micro-batches held, with and
    /// without padding.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub padding: Option<Padding>,
    /// What the plan predicts this step's micro-batches reach (by length: the memory model
    /// at each micro-batch's examples and longest frames), where it predicts this step:
    /// `None` without a plan, or when a fixed split was changed by a recovery.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub predicted_peak_bytes: Option<u64>,
}

/// One phase of a step: the network it trained, its loss and gradient norm, how it cut the
/// step, and the most memory it held beside what its plan predicted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseReport {
    pub phase: String,
    pub loss: f64,
    pub grad_norm: f64,
    /// The phase's largest micro-batch (spectrograms, as a step's `micro_batch`), and its
    /// micro-batches in the step.
    #[serde(default)]
    pub micro_batch: usize,
    #[serde(default)]
    pub accumulation: usize,
    /// The phase's own peak, measured apart from the step's other phases.
    #[serde(default)]
    pub peak_bytes: u64,
    /// The plan's prediction for this phase while the run keeps the plan's split.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicted_peak_bytes: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MachineScore {
    #[serde(default)]
    pub machine_type: String,
    pub machine_id: u32,
    pub auc: f64,
    /// Partial AUC for false-positive rates up to 0.1, McClish-standardised (DCASE 2020).
    pub pauc: f64,
    pub normal_clips: usize,
    pub anomalous_clips: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvaluationReport {
    /// Mean of the per-machine-ID AUCs, as the DCASE challenge averages.
    pub auc: f64,
    /// Mean of the per-machine-ID pAUCs.
    pub pauc: f64,
    pub per_machine: Vec<MachineScore>,
    /// Means over each machine type's IDs, as the challenge reports them.
    #[serde(default)]
    pub per_type: Vec<TypeScore>,
    pub clips: usize,
    /// Test files left out (`--on-bad-file skip`), each with its problem.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TypeScore {
    pub machine_type: String,
    pub auc: f64,
    pub pauc: f64,
    pub machine_ids: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DatasetReport {
    /// `synthetic`, or the dataset's root folder.
    pub source: String,
    pub machine_types: Vec<String>,
    pub train_clips: usize,
    pub validation_clips: usize,
    pub test_clips: usize,
    /// Spectrograms kept in host memory once read (the dataset fits the loader's share);
    /// otherwise every epoch streams them from disk.
    pub resident: bool,
    pub host_memory_bytes: u64,
    /// Files left out (`--on-bad-file skip`), each with its problem.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
}

/// Anything that takes events: a closure, a channel, a collector in tests.
pub trait EventSink {
    fn emit(&mut self, event: Event);
}

impl<F: FnMut(Event)> EventSink for F {
    fn emit(&mut self, event: Event) {
        self(event)
    }
}

/// The step reports among `events`, in order: what a caller checks a run's steps by.
pub fn steps(events: &[Event]) -> Vec<StepReport> {
    events
        .iter()
        .filter_map(|event| match event {
            Event::Step(step) => Some(step.clone()),
            _ => None,
        })
        .collect()
}

/// The first plan report among `events`: the plan a run trained with.
pub fn plan(events: &[Event]) -> Option<&PlanReport> {
    events.iter().find_map(|event| match event {
        Event::Plan(plan) => Some(plan),
        _ => None,
    })
}

impl EventSink for std::sync::mpsc::Sender<Event> {
    fn emit(&mut self, event: Event) {
        // A front-end that hung up no longer wants progress; training goes on regardless.
        let _ = self.send(event);
    }
}

impl EventSink for Vec<Event> {
    fn emit(&mut self, event: Event) {
        self.push(event);
    }
}

/// The validation losses among `events`, in order: what tests of a run read.
#[cfg(test)]
pub(crate) fn validation_losses(events: &[Event]) -> Vec<f64> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Validation { loss, .. } => Some(*loss),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_events_carry_the_stable_keys() {
        let event = Event::Step(StepReport {
            step: 3,
            total_steps: 10,
            epoch: 0,
            loss: 0.5,
            reconstruction_loss: 0.4,
            lr: 1e-3,
            grad_norm: 2.0,
            patches_per_s: 40.0,
            step_ms: 800.0,
            micro_batch: 8,
            accumulation: 1,
            mem_allocated_bytes: 1,
            mem_peak_bytes: 2,
            mem_reserved_bytes: None,
            mem_budget_bytes: None,
            phases: Vec::new(),
            padding: None,
            predicted_peak_bytes: None,
        });
        let json: serde_json::Value = serde_json::to_value(&event).unwrap();
        for key in [
            "event",
            "step",
            "loss",
            "patches_per_s",
            "mem_allocated_bytes",
            "mem_peak_bytes",
        ] {
            assert!(json.get(key).is_some(), "missing {key} in {json}");
        }
        assert_eq!(json["event"], "step");
        let back: Event = serde_json::from_value(json).unwrap();
        assert_eq!(back, event);
    }
}
