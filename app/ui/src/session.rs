//! What the app shows about a run, folded from core's events: no egui here, so it is tested
//! like any other code and the panels only draw it.

use web_time::Instant;

use headroom_core::events::{
    DatasetReport, EvaluationReport, Event, PictureReport, PlanReport, Results, RunInfo,
};
use headroom_core::lengths::Padding;

/// One memory reading of a step, for the bars and their history.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MemorySample {
    pub step: u64,
    pub allocated: u64,
    pub peak: u64,
    pub reserved: Option<u64>,
    pub budget: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunState {
    Idle,
    Preparing,
    Training,
    Paused,
    Stopping,
    Finished,
    Failed,
}

/// A run as the app sees it.
#[derive(Debug)]
pub struct Session {
    pub state: RunState,
    pub info: Option<RunInfo>,
    pub dataset: Option<DatasetReport>,
    pub plan: Option<PlanReport>,
    pub budget: Option<u64>,
    /// (step, loss) of every step.
    pub loss: Vec<[f64; 2]>,
    /// For a task of several phases, each phase after the first by name, with its (step,
    /// loss) of every step; the first phase's is `loss`.
    pub phase_losses: Vec<(String, Vec<[f64; 2]>)>,
    pub throughput: Vec<[f64; 2]>,
    pub validation: Vec<[f64; 2]>,
    pub memory: Vec<MemorySample>,
    /// Steps redone after running out of memory: (step, from micro-batch, to micro-batch).
    pub recoveries: Vec<(u64, usize, usize)>,
    pub evaluation: Option<EvaluationReport>,
    /// A task's own figures, when it is not the patch task.
    pub results: Option<Results>,
    pub checkpoints: Vec<String>,
    /// The newest picture the run drew of what its networks make.
    pub picture: Option<PictureReport>,
    /// Frames the steps computed with and without padding, summed: examples of every
    /// length (utterances) only.
    pub padding: Option<Padding>,
    /// Everything that happened, in words, newest last.
    pub log: Vec<String>,
    pub error: Option<String>,
    started: Option<Instant>,
    /// When the first step after warm-up ended, and which step that was: the ETA's origin.
    eta_origin: Option<(Instant, u64)>,
}

/// Steps before the ETA is trusted: the first ones include set-up and compilation.
const ETA_WARMUP_STEPS: u64 = 3;

impl Default for Session {
    fn default() -> Self {
        Self {
            state: RunState::Idle,
            info: None,
            dataset: None,
            plan: None,
            budget: None,
            loss: Vec::new(),
            phase_losses: Vec::new(),
            throughput: Vec::new(),
            validation: Vec::new(),
            memory: Vec::new(),
            recoveries: Vec::new(),
            evaluation: None,
            results: None,
            checkpoints: Vec::new(),
            picture: None,
            padding: None,
            log: Vec::new(),
            error: None,
            started: None,
            eta_origin: None,
        }
    }
}

impl Session {
    /// A session for a run about to start.
    pub fn starting() -> Self {
        Self {
            state: RunState::Preparing,
            started: Some(Instant::now()),
            ..Self::default()
        }
    }

    pub fn is_running(&self) -> bool {
        matches!(
            self.state,
            RunState::Preparing | RunState::Training | RunState::Paused | RunState::Stopping
        )
    }

    pub fn step(&self) -> u64 {
        self.loss.last().map_or(0, |l| l[0] as u64)
    }

    pub fn total_steps(&self) -> u64 {
        self.info.as_ref().map_or(0, |i| i.total_steps)
    }

    pub fn latest_memory(&self) -> Option<&MemorySample> {
        self.memory.last()
    }

    /// Seconds left, once a few steps have set the pace.
    pub fn eta_seconds(&self) -> Option<f64> {
        let (origin, from_step) = self.eta_origin?;
        let done = self.step().checked_sub(from_step).filter(|&d| d > 0)?;
        let per_step = origin.elapsed().as_secs_f64() / done as f64;
        Some(per_step * self.total_steps().saturating_sub(self.step()) as f64)
    }

    pub fn fail(&mut self, error: String) {
        self.log.push(format!("error: {error}"));
        self.error = Some(error);
        self.state = RunState::Failed;
    }

    pub fn apply(&mut self, event: &Event) {
        match event {
            Event::BackendChoice { reason, .. } => self.log.push(reason.clone()),
            Event::Resumed { from, step, .. } => {
                self.log.push(format!("resuming {from} at step {step}"))
            }
            Event::RunFile { path, .. } => self.log.push(format!("settings in {path}")),
            Event::Budget { bytes, source } => {
                self.budget = Some(*bytes);
                self.log
                    .push(format!("memory budget {} ({source})", human(*bytes)));
            }
            Event::DryRun(d) => {
                let step = match d.frames {
                    Some(frames) => format!("{} utterances of {frames} frames", d.micro_batch),
                    None => format!("micro-batch {} x {} patches", d.micro_batch, d.n_patches),
                };
                self.log.push(match &d.refused {
                    Some(refused) => format!(
                        "dry-run {}: {step} refused by the device ({refused}), re-planning smaller",
                        d.attempt
                    ),
                    None => format!(
                        "dry-run {}: {step} measured {} of {} - {}",
                        d.attempt,
                        human(d.measured_peak_bytes),
                        human(d.budget_bytes),
                        if d.fits { "fits" } else { "over, re-planning" }
                    ),
                })
            }
            Event::Plan(p) => {
                self.log.push(format!("plan: {}", p.plan.reason));
                self.plan = Some(p.clone());
            }
            Event::Dataset(d) => {
                self.log.push(format!(
                    "dataset {}: {} train, {} validation, {} test clips{}",
                    d.source,
                    d.train_clips,
                    d.validation_clips,
                    d.test_clips,
                    match d.skipped.len() {
                        0 => String::new(),
                        n => format!(", {n} left out"),
                    }
                ));
                self.log
                    .extend(d.skipped.iter().map(|s| format!("left out: {s}")));
                self.dataset = Some(d.clone());
            }
            Event::Config(info) => {
                // A run paused or stopped while it prepared stays so: the flag holds it at
                // its first step boundary.
                if matches!(self.state, RunState::Idle | RunState::Preparing) {
                    self.state = RunState::Training;
                }
                self.log.push(format!(
                    "training {} on {} ({}): {} steps, effective batch {} {}",
                    info.model,
                    info.backend,
                    info.device,
                    info.total_steps,
                    info.effective_batch,
                    if info.length_buckets.is_some() {
                        "utterances"
                    } else {
                        "patches"
                    }
                ));
                if let Some(buckets) = &info.length_buckets {
                    self.log.push(format!(
                        "packed by length; a micro-batch holds {}",
                        buckets.words()
                    ));
                }
                // What the split changes in the loss (a contrastive model's negatives).
                self.log.extend(info.step_words.iter().cloned());
                self.info = Some(info.clone());
            }
            Event::Recovery(r) => {
                self.recoveries
                    .push((r.step, r.from_micro_batch, r.to_micro_batch));
                let phase = r
                    .phase
                    .as_ref()
                    .map(|p| format!("{p}'s "))
                    .unwrap_or_default();
                self.log.push(format!(
                    "out of memory at step {}: {phase}micro-batch {} -> {}, step redone",
                    r.step, r.from_micro_batch, r.to_micro_batch
                ));
            }
            Event::Step(s) => {
                let step = s.step as f64;
                self.loss.push([step, s.loss]);
                for phase in s.phases.iter().skip(1) {
                    let at = match self
                        .phase_losses
                        .iter()
                        .position(|(n, _)| *n == phase.phase)
                    {
                        Some(at) => at,
                        None => {
                            self.phase_losses.push((phase.phase.clone(), Vec::new()));
                            self.phase_losses.len() - 1
                        }
                    };
                    self.phase_losses[at].1.push([step, phase.loss]);
                }
                if let Some(padding) = s.padding {
                    self.padding
                        .get_or_insert_with(Padding::default)
                        .add(padding);
                }
                self.throughput.push([step, s.patches_per_s]);
                self.memory.push(MemorySample {
                    step: s.step,
                    allocated: s.mem_allocated_bytes,
                    peak: s.mem_peak_bytes,
                    reserved: s.mem_reserved_bytes,
                    budget: s.mem_budget_bytes,
                });
                let first = self.info.as_ref().map_or(0, |i| i.start_step);
                if self.eta_origin.is_none() && s.step >= first + ETA_WARMUP_STEPS {
                    self.eta_origin = Some((Instant::now(), s.step));
                }
            }
            Event::Epoch { epoch, step } => {
                self.log.push(format!("epoch {epoch} done at step {step}"))
            }
            Event::Validation { step, loss, .. } => {
                self.validation.push([*step as f64, *loss]);
                self.log
                    .push(format!("validation at step {step}: loss {loss:.4}"));
            }
            Event::Checkpoint { step, path } => {
                self.checkpoints.push(path.clone());
                self.log.push(format!("checkpoint at step {step}: {path}"));
            }
            Event::Picture(report) => {
                let written = report
                    .path
                    .as_ref()
                    .map(|path| format!(", written to {path}"))
                    .unwrap_or_default();
                self.log
                    .push(format!("picture at step {}{written}", report.step));
                self.picture = Some(report.clone());
            }
            Event::MemoryCleanup { .. } => {}
            Event::Evaluation(report) => {
                self.log.push(format!(
                    "evaluation: AUC {:.3}, pAUC {:.3} over {} clips",
                    report.auc, report.pauc, report.clips
                ));
                self.evaluation = Some(report.clone());
            }
            Event::Results(results) => {
                let headline = results
                    .headline()
                    .map(|(measure, value)| format!(": {measure} {value:.4}"))
                    .unwrap_or_default();
                self.log
                    .push(format!("results{headline} ({})", results.about));
                self.results = Some(results.clone());
            }
            Event::Finished {
                step,
                stopped_early,
                elapsed_s,
                ..
            } => {
                self.state = RunState::Finished;
                let how = if *stopped_early {
                    "stopped"
                } else {
                    "finished"
                };
                self.log
                    .push(format!("training {how} at step {step} in {elapsed_s:.1} s"));
                // The summary says again what the split changed in the loss (for a contrastive
                // run, the negatives each pair saw).
                let words = self.info.as_ref().and_then(|i| i.step_words.clone());
                self.log.extend(words);
                if let Some(padding) = self.padding.filter(|p| p.padded_frames > 0) {
                    self.log.push(format!(
                        "padding: {:.1}% of the {} frames the steps computed",
                        100.0 * padding.share(),
                        padding.padded_frames
                    ));
                }
            }
        }
    }

    /// Seconds since the run was started.
    pub fn elapsed_seconds(&self) -> f64 {
        self.started.map_or(0.0, |s| s.elapsed().as_secs_f64())
    }
}

pub fn human(bytes: u64) -> String {
    headroom_core::size::human(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use headroom_core::events::StepReport;

    fn step(step: u64, loss: f64) -> Event {
        Event::Step(StepReport {
            step,
            total_steps: 10,
            epoch: 0,
            loss,
            reconstruction_loss: loss,
            lr: 1e-3,
            grad_norm: 1.0,
            patches_per_s: 50.0,
            step_ms: 100.0,
            micro_batch: 4,
            accumulation: 1,
            mem_allocated_bytes: 10 << 20,
            mem_peak_bytes: 60 << 20,
            mem_reserved_bytes: None,
            mem_budget_bytes: Some(1 << 30),
            phases: Vec::new(),
            padding: None,
            predicted_peak_bytes: None,
        })
    }

    #[test]
    fn steps_fill_the_curves_and_the_memory_history() {
        let mut session = Session::starting();
        session.apply(&step(1, 0.9));
        session.apply(&step(2, 0.7));
        assert_eq!(session.loss, vec![[1.0, 0.9], [2.0, 0.7]]);
        assert_eq!(session.step(), 2);
        let latest = session.latest_memory().unwrap();
        assert_eq!((latest.allocated, latest.peak), (10 << 20, 60 << 20));
        assert_eq!(latest.budget, Some(1 << 30));
    }

    #[test]
    fn each_further_phase_of_a_step_gets_its_own_curve() {
        let mut session = Session::starting();
        for (at, (first, second)) in [(0.9, 2.0), (0.8, 1.5)].into_iter().enumerate() {
            let Event::Step(mut report) = step(at as u64 + 1, first) else {
                unreachable!()
            };
            report.phases = [("discriminator", first), ("generator", second)]
                .map(|(phase, loss)| headroom_core::events::PhaseReport {
                    phase: phase.into(),
                    loss,
                    grad_norm: 1.0,
                    micro_batch: 4,
                    accumulation: 2,
                    peak_bytes: 1 << 20,
                    predicted_peak_bytes: None,
                })
                .to_vec();
            session.apply(&Event::Step(report));
        }
        assert_eq!(session.loss, vec![[1.0, 0.9], [2.0, 0.8]]);
        assert_eq!(
            session.phase_losses,
            vec![("generator".to_string(), vec![[1.0, 2.0], [2.0, 1.5]])]
        );
    }

    #[test]
    fn what_a_split_changes_in_the_loss_is_said_in_the_log() {
        let info = |step_words: Option<&str>| {
            let mut session = Session::starting();
            session.apply(&Event::Config(headroom_core::events::RunInfo {
                model: "speech-clap".into(),
                backend: "flex".into(),
                device: "CPU".into(),
                micro_batch: 16,
                accumulation: 8,
                n_patches: 1,
                stride: 1,
                effective_batch: 128,
                total_steps: 10,
                start_step: 0,
                steps_per_epoch: 2,
                lr: 1e-3,
                seed: 42,
                train_clips: 240,
                validation_clips: 24,
                test_clips: 48,
                parameters: 1,
                memory_source: headroom_core::memory::MemorySource::HostAllocator,
                precision: "f32".into(),
                checkpointing: false,
                budget_bytes: None,
                predicted_peak_bytes: None,
                length_buckets: None,
                step_words: step_words.map(Into::into),
            }));
            session
        };
        let said = "Negatives: each pair is contrasted with the other 127 pairs of its step";
        let mut session = info(Some(said));
        assert_eq!(session.log.last().map(String::as_str), Some(said));
        assert_eq!(info(None).log.len(), 1, "only the run's line");
        // And again in the run's summary.
        session.apply(&Event::Finished {
            step: 10,
            total_steps: 10,
            stopped_early: false,
            elapsed_s: 1.0,
            host_peak_bytes: None,
        });
        assert_eq!(session.log.last().map(String::as_str), Some(said));
    }

    #[test]
    fn a_tasks_own_results_are_kept_and_said_in_the_log() {
        let mut session = Session::starting();
        session.apply(&Event::Results(headroom_core::events::Results {
            about: "greedy decoding".into(),
            measures: vec!["CER".into(), "WER".into()],
            rows: vec![headroom_core::events::ResultsRow {
                label: "test".into(),
                examples: 12,
                values: vec![0.125, 0.25],
            }],
            skipped: Vec::new(),
        }));
        assert_eq!(session.results.as_ref().map(|r| r.rows.len()), Some(1));
        assert!(session.evaluation.is_none());
        assert_eq!(
            session.log.last().map(String::as_str),
            Some("results: CER 0.1250 (greedy decoding)")
        );
    }

    #[test]
    fn a_recovery_is_kept_for_the_timeline_and_the_log() {
        let mut session = Session::starting();
        session.apply(&Event::Recovery(headroom_core::events::RecoveryReport {
            step: 3,
            error: "over budget".into(),
            from_micro_batch: 8,
            to_micro_batch: 4,
            n_patches: 4,
            from_accumulation: 1,
            to_accumulation: 2,
            effective_batch: 32,
            in_a_row: 1,
            phase: None,
        }));
        assert_eq!(session.recoveries, vec![(3, 8, 4)]);
        assert!(session.log.last().unwrap().contains("micro-batch 8 -> 4"));
    }

    /// A run of utterances: its dry-run in utterances and frames, the utterances left out
    /// by name, and the padding its steps computed, summed and said when it ends.
    #[test]
    fn a_run_by_length_says_its_frames_what_it_left_out_and_its_padding() {
        let mut session = Session::starting();
        session.apply(&Event::DryRun(headroom_core::events::DryRunReport {
            attempt: 1,
            micro_batch: 2,
            n_patches: 1,
            accumulation: 4,
            checkpointing: false,
            precision: headroom_core::precision::Precision::F32,
            predicted_peak_bytes: 70 << 20,
            measured_peak_bytes: 68 << 20,
            budget_bytes: 80 << 20,
            fits: true,
            frames: Some(1877),
            refused: None,
            phases: Vec::new(),
        }));
        assert!(
            session.log[0].starts_with("dry-run 1: 2 utterances of 1877 frames measured"),
            "{}",
            session.log[0]
        );
        session.apply(&Event::Dataset(DatasetReport {
            source: "generated speech".into(),
            machine_types: Vec::new(),
            train_clips: 237,
            validation_clips: 24,
            test_clips: 48,
            resident: true,
            host_memory_bytes: 1 << 30,
            skipped: vec!["utterance 57 (2947 frames, 29.5 s): longer than any plan".into()],
        }));
        assert!(session.log[1].ends_with("48 test clips, 1 left out"));
        assert!(session.log[2].starts_with("left out: utterance 57 (2947 frames"));
        for (at, (frames, padded)) in [(1, (300, 400)), (2, (100, 400))] {
            let Event::Step(mut report) = step(at, 1.0) else {
                unreachable!()
            };
            report.padding = Some(Padding {
                frames,
                padded_frames: padded,
            });
            session.apply(&Event::Step(report));
        }
        assert_eq!(
            session.padding,
            Some(Padding {
                frames: 400,
                padded_frames: 800
            })
        );
        session.apply(&Event::Finished {
            step: 2,
            total_steps: 2,
            stopped_early: false,
            elapsed_s: 1.0,
            host_peak_bytes: None,
        });
        assert_eq!(
            session.log.last().unwrap(),
            "padding: 50.0% of the 800 frames the steps computed"
        );
    }

    #[test]
    fn a_run_of_patches_says_no_padding() {
        let mut session = Session::starting();
        session.apply(&step(1, 0.5));
        session.apply(&Event::Finished {
            step: 1,
            total_steps: 1,
            stopped_early: false,
            elapsed_s: 1.0,
            host_peak_bytes: None,
        });
        assert_eq!(session.padding, None);
        assert!(session.log.last().unwrap().starts_with("training finished"));
    }
}
