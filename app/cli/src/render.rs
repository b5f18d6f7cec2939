//! Human-readable rendering of engine events: progress bars and memory lines.

use std::time::Duration;

use headroom_core::events::{
    DatasetReport, DryRunReport, EvaluationReport, Event, Padding, RecoveryReport, Results, RunInfo,
};
use headroom_core::lengths::LengthBuckets;
use headroom_core::plan::Breakdown;
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

pub fn mib(bytes: u64) -> String {
    headroom_core::size::human(bytes)
}

/// Renders a run as a progress bar plus a memory line beneath it.
pub struct ProgressRenderer {
    bars: MultiProgress,
    progress: ProgressBar,
    memory: ProgressBar,
    last_loss: Option<f64>,
    effective_batch: Option<String>,
    skipped: Vec<String>,
    /// Frames the run's steps computed, for a run split by length.
    padding: Option<Padding>,
}

impl ProgressRenderer {
    pub fn new() -> Self {
        let bars = MultiProgress::new();
        let progress = bars.add(ProgressBar::new(0));
        progress.set_style(
            ProgressStyle::with_template(
                "{prefix:>9} [{bar:30.cyan/blue}] {pos}/{len} steps {msg} ({elapsed} < {eta})",
            )
            .expect("the template is valid")
            .progress_chars("=> "),
        );
        progress.set_prefix("training");
        let memory = bars.add(ProgressBar::new(0));
        memory.set_style(ProgressStyle::with_template("{msg}").expect("the template is valid"));
        progress.enable_steady_tick(Duration::from_millis(250));
        Self {
            bars,
            progress,
            memory,
            last_loss: None,
            effective_batch: None,
            skipped: Vec::new(),
            padding: None,
        }
    }

    fn say(&self, line: String) {
        // Above the bars when they are drawn; plain stdout when output is not a terminal.
        if self.bars.is_hidden() {
            println!("{line}");
        } else {
            let _ = self.bars.println(line);
        }
    }

    pub fn handle(&mut self, event: &Event) {
        match event {
            Event::BackendChoice { reason, .. } => self.say(reason.clone()),
            Event::Resumed {
                from,
                step,
                changes,
            } => self.say(if changes.is_empty() {
                format!("Resuming {from} at step {step} with its saved settings")
            } else {
                format!(
                    "Resuming {from} at step {step}, changed: {}",
                    changes.join(", ")
                )
            }),
            Event::Budget { bytes, source } => self.say(format!(
                "Memory budget: {} ({source})",
                headroom_core::size::human(*bytes)
            )),
            Event::DryRun(d) => self.say(describe_dry_run(d)),
            Event::Plan(p) => {
                self.say(format!("Plan: {}", p.plan.reason));
                self.say(describe_breakdown(&p.breakdown));
            }
            Event::Recovery(r) => self.say(describe_recovery(r)),
            Event::Dataset(d) => {
                self.say(describe_dataset(d));
                self.skipped = d.skipped.clone();
            }
            Event::RunFile {
                path,
                config,
                overridden,
            } => self.say(describe_run_file(path, config.as_deref(), overridden)),
            Event::Config(info) => {
                self.progress.set_length(info.total_steps);
                self.progress.set_position(info.start_step);
                // The summary repeats the split and, for a contrastive run, the negatives each
                // pair saw.
                self.effective_batch = Some(split_and_negatives(info));
                self.say(describe_run(info));
            }
            Event::Step(s) => {
                self.progress.set_position(s.step);
                let unit = if s.padding.is_some() {
                    "utterances"
                } else {
                    "patches"
                };
                // A task of several phases: each phase's loss by name.
                let loss = match s.phases.as_slice() {
                    [] => format!("loss {:.4}", s.loss),
                    phases => phases
                        .iter()
                        .map(|p| format!("{} {:.4}", p.phase, p.loss))
                        .collect::<Vec<_>>()
                        .join(" | "),
                };
                self.progress
                    .set_message(format!("{loss} | {:.1} {unit}/s", s.patches_per_s));
                if let Some(padding) = s.padding {
                    self.padding.get_or_insert_default().add(padding);
                }
                let reserved = s
                    .mem_reserved_bytes
                    .map(|r| format!(", reserved {}", mib(r)))
                    .unwrap_or_default();
                let budget = s
                    .mem_budget_bytes
                    .map(|b| format!(", budget {}", mib(b)))
                    .unwrap_or_default();
                self.memory.set_message(format!(
                    "Memory - allocated {}, peak {}{reserved}{budget}",
                    mib(s.mem_allocated_bytes),
                    mib(s.mem_peak_bytes)
                ));
                self.last_loss = Some(s.loss);
            }
            Event::Epoch { epoch, step } => {
                if let Some(loss) = self.last_loss {
                    self.say(format!("epoch {epoch} done at step {step}, loss {loss:.4}"));
                }
            }
            Event::Validation {
                step,
                loss,
                mem_peak_bytes,
            } => {
                let memory = mem_peak_bytes
                    .map(|peak| format!(" (memory peak {})", mib(peak)))
                    .unwrap_or_default();
                self.say(format!("validation at step {step}: loss {loss:.4}{memory}"))
            }
            Event::Checkpoint { step, path } => {
                self.say(format!("checkpoint at step {step}: {path}"))
            }
            Event::Picture(p) => {
                if let Some(path) = &p.path {
                    self.say(format!("picture at step {}: {path} ({})", p.step, p.about));
                }
            }
            Event::MemoryCleanup { .. } => {}
            Event::Evaluation(report) => self.say(describe_evaluation(report)),
            Event::Results(results) => self.say(describe_results(results)),
            Event::Finished {
                step,
                total_steps,
                stopped_early,
                elapsed_s,
                host_peak_bytes,
            } => {
                self.progress.finish_and_clear();
                let memory = self.memory.message();
                self.memory.finish_and_clear();
                if !memory.is_empty() {
                    self.say(memory.to_string());
                }
                let how = if *stopped_early {
                    "stopped"
                } else {
                    "finished"
                };
                self.say(format!(
                    "Training {how} at step {step}/{total_steps} in {:.1} s",
                    elapsed_s
                ));
                if let Some(line) = &self.effective_batch {
                    self.say(line.clone());
                }
                if let Some(padding) = self.padding {
                    self.say(describe_padding(padding));
                }
                if let Some(peak) = host_peak_bytes {
                    self.say(format!("Host memory: peak resident {}", mib(*peak)));
                }
                if !self.skipped.is_empty() {
                    self.say(describe_skipped(&self.skipped));
                }
            }
        }
    }
}

/// "Padding: 31% of 1,204,000 frames computed": what packing by length left.
pub fn describe_padding(padding: Padding) -> String {
    format!(
        "Padding: {:.1}% of the {} frames the steps computed ({} of the utterances' own)",
        padding.share() * 100.0,
        padding.padded_frames,
        padding.frames
    )
}

/// Where the run's settings were written and, for a run read from a run file, which flags
/// given beside it won: `config a.toml; flags override: --steps, --lr; settings in ...`.
fn describe_run_file(path: &str, config: Option<&str>, overridden: &[String]) -> String {
    let Some(config) = config else {
        return format!(
            "Settings in {path}: `trainer-cli train --config {path}` trains this run again"
        );
    };
    let flags = if overridden.is_empty() {
        String::new()
    } else {
        format!("; flags override: {}", overridden.join(", "))
    };
    format!("config {config}{flags}; settings in {path}")
}

pub fn describe_dry_run(d: &DryRunReport) -> String {
    // A plan by length measures a bucket: its utterances and their frames.
    let step = match d.frames {
        Some(frames) => format!(
            "{} utterances of {frames} frames, {}",
            d.micro_batch, d.precision
        ),
        None => format!(
            "micro-batch {} x {} patches, {}{}",
            d.micro_batch,
            d.n_patches,
            d.precision,
            if d.checkpointing {
                ", checkpointing,"
            } else {
                ""
            }
        ),
    };
    if let Some(refused) = &d.refused {
        return format!(
            "Dry-run {}: {step} refused by the device ({refused}) - re-planning smaller",
            d.attempt
        );
    }
    format!(
        "Dry-run {}: {step} measured {} of {} (predicted {}) - {}",
        d.attempt,
        mib(d.measured_peak_bytes),
        mib(d.budget_bytes),
        mib(d.predicted_peak_bytes),
        if d.fits {
            "fits"
        } else {
            "over budget, re-planning"
        }
    )
}

fn describe_recovery(r: &RecoveryReport) -> String {
    let phase = r
        .phase
        .as_ref()
        .map(|p| format!("the {p} phase's "))
        .unwrap_or_default();
    format!(
        "Out of memory at step {} ({}): {phase}micro-batch {} -> {}, accumulation {} -> {}, effective batch {} kept; redoing the step",
        r.step,
        r.error,
        r.from_micro_batch,
        r.to_micro_batch,
        r.from_accumulation,
        r.to_accumulation,
        r.effective_batch
    )
}

fn effective_batch(info: &RunInfo) -> String {
    if let Some(buckets) = &info.length_buckets {
        return length_batch_words(info.effective_batch, buckets);
    }
    effective_batch_words(
        info.effective_batch,
        info.micro_batch,
        info.n_patches,
        info.accumulation,
    )
}

/// "Effective batch size: 16 utterances a step, packed into micro-batches by length (...)".
pub fn length_batch_words(effective: usize, buckets: &LengthBuckets) -> String {
    format!(
        "Effective batch size: {effective} utterances a step, packed into micro-batches by \
         length (utterances a micro-batch holds: {})",
        buckets.words()
    )
}

/// "Effective batch size: 128 patches (8 spectrograms x 4 patches x 4 accumulation steps)",
/// naming the last micro-batch when it takes fewer spectrograms than the others.
pub fn effective_batch_words(
    effective: usize,
    micro_batch: usize,
    n_patches: usize,
    accumulation: usize,
) -> String {
    let clips = effective / n_patches.max(1);
    let last = clips.saturating_sub(accumulation.saturating_sub(1) * micro_batch);
    let rest = if last == micro_batch {
        String::new()
    } else {
        format!(", the last micro-batch {last} spectrograms")
    };
    format!(
        "Effective batch size: {effective} patches ({micro_batch} spectrograms x {n_patches} patches x {accumulation} accumulation steps{rest})"
    )
}

/// The effective batch's line and, for a task that says them, its words on the step (a
/// contrastive run's negatives).
fn split_and_negatives(info: &RunInfo) -> String {
    match &info.step_words {
        Some(words) => format!("{}\n{words}", effective_batch(info)),
        None => effective_batch(info),
    }
}

fn describe_run(info: &RunInfo) -> String {
    format!(
        "Model {}, backend {} ({}), {} parameters, {}, checkpointing {}\n{}\n\
         {} steps per epoch; {} steps from step {}",
        info.model,
        info.backend,
        info.device,
        info.parameters,
        info.precision,
        if info.checkpointing { "on" } else { "off" },
        split_and_negatives(info),
        info.steps_per_epoch,
        info.total_steps,
        info.start_step,
    )
}

/// The AUC/pAUC table: one row per machine type and ID, each type's mean, the overall mean.
pub fn describe_evaluation(report: &EvaluationReport) -> String {
    let mut lines = vec![format!(
        "Anomaly scores of {} test clips (pAUC: false-positive rate up to 0.1, McClish-standardised)",
        report.clips
    )];
    lines.push(format!(
        "{:<14} {:>4} {:>7} {:>7} {:>7} {:>9}",
        "machine type", "id", "AUC", "pAUC", "normal", "anomalous"
    ));
    for t in &report.per_type {
        for m in report
            .per_machine
            .iter()
            .filter(|m| m.machine_type == t.machine_type)
        {
            lines.push(format!(
                "{:<14} {:>4} {:>7.3} {:>7.3} {:>7} {:>9}",
                m.machine_type,
                format!("{:02}", m.machine_id),
                m.auc,
                m.pauc,
                m.normal_clips,
                m.anomalous_clips
            ));
        }
        if report.per_type.len() > 1 || t.machine_ids > 1 {
            lines.push(format!(
                "{:<14} {:>4} {:>7.3} {:>7.3}",
                t.machine_type, "mean", t.auc, t.pauc
            ));
        }
    }
    if report.per_machine.is_empty() {
        lines.push("(no machine ID has both normal and anomalous labelled clips)".into());
    } else {
        lines.push(format!(
            "{:<14} {:>4} {:>7.3} {:>7.3}",
            "all", "mean", report.auc, report.pauc
        ));
    }
    if !report.skipped.is_empty() {
        lines.push(describe_skipped(&report.skipped));
    }
    lines.join("\n")
}

/// A task's own figures: a row per split or group, a column per measure.
pub fn describe_results(results: &Results) -> String {
    let mut lines = vec![results.about.clone()];
    let mut header = format!("{:<14} {:>8}", "", "examples");
    for measure in &results.measures {
        header.push_str(&format!(" {measure:>9}"));
    }
    lines.push(header);
    for row in &results.rows {
        let mut line = format!("{:<14} {:>8}", row.label, row.examples);
        for value in &row.values {
            line.push_str(&format!(" {value:>9.4}"));
        }
        lines.push(line);
    }
    if !results.skipped.is_empty() {
        lines.push(describe_skipped(&results.skipped));
    }
    lines.join("\n")
}

/// The files left out by --on-bad-file skip, each with its problem.
pub fn describe_skipped(skipped: &[String]) -> String {
    let mut lines = vec![format!("Skipped {} bad file(s):", skipped.len())];
    lines.extend(skipped.iter().map(|s| format!("  {s}")));
    lines.join("\n")
}

fn describe_dataset(d: &DatasetReport) -> String {
    let how = if d.resident {
        format!(
            "kept in host memory once read (they fit in half of --host-memory {})",
            mib(d.host_memory_bytes)
        )
    } else {
        format!(
            "streamed from disk every epoch (more than half of --host-memory {})",
            mib(d.host_memory_bytes)
        )
    };
    // Machine types, where the data has them (a speech corpus has none).
    let types = match d.machine_types.is_empty() {
        true => String::new(),
        false => format!(" ({})", d.machine_types.join(", ")),
    };
    let mut line = format!(
        "Dataset {}{types}: {} train, {} validation, {} test clips; spectrograms {how}",
        d.source, d.train_clips, d.validation_clips, d.test_clips,
    );
    if !d.skipped.is_empty() {
        line.push_str(&format!(
            "; {} bad file(s) skipped (listed at the end)",
            d.skipped.len()
        ));
    }
    line
}

/// The plan's memory breakdown in one line.
pub fn describe_breakdown(b: &Breakdown) -> String {
    format!(
        "Memory: parameters {} | gradients {} | optimizer {} | activations {} | data {} | overhead {} | resident {} | free {}",
        mib(b.parameters),
        mib(b.gradients),
        mib(b.optimizer),
        mib(b.activations),
        mib(b.data),
        mib(b.overhead),
        mib(b.resident),
        mib(b.free),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use headroom_core::events::ResultsRow;

    #[test]
    fn a_tasks_results_are_a_row_per_split_and_a_column_per_measure() {
        let results = Results {
            about: "greedy decoding of the held-out splits".into(),
            measures: vec!["CER".into(), "WER".into()],
            rows: vec![
                ResultsRow {
                    label: "validation".into(),
                    examples: 8,
                    values: vec![0.25, 0.5],
                },
                ResultsRow {
                    label: "test".into(),
                    examples: 120,
                    values: vec![0.125, 0.375],
                },
            ],
            skipped: vec!["a.flac: empty transcript".into()],
        };
        let text = describe_results(&results);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "greedy decoding of the held-out splits");
        assert_eq!(lines[1], "               examples       CER       WER");
        assert_eq!(lines[2], "validation            8    0.2500    0.5000");
        assert_eq!(lines[3], "test                120    0.1250    0.3750");
        assert_eq!(lines[4], "Skipped 1 bad file(s):");
    }
}
