//! A run from the app: started on a thread of its own with the plan's request, paused and
//! stopped at step boundaries, its events drained into the session each frame.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use headroom_core::RunOptions;
use headroom_core::budget::Budget;

use super::HeadroomApp;
use super::planning::planning_of;
use crate::jobs::{self, Message, RunControl};
use crate::session::{RunState, Session};

impl HeadroomApp {
    /// Starts a run with the current choices; it plans (with a dry-run) before training.
    pub fn start(&mut self) {
        if self.session.is_running() {
            return;
        }
        let Some(target) = self.target() else {
            self.status = "Choose a device first".into();
            return;
        };
        // The spec fails only on the budget's choice (a figure that does not parse).
        let spec = match self.spec() {
            Ok(spec) => spec,
            Err(e) => {
                self.status = format!("No budget: {e}");
                return;
            }
        };
        let (budget, source) = match self.budget_of(&spec) {
            Ok(b) => b,
            Err(e) => {
                self.status = format!("No budget: {e}");
                return;
            }
        };
        let config = match spec.train_config(target) {
            Ok(config) => config,
            Err(e) => {
                self.status = e.to_string();
                return;
            }
        };
        let planning = match planning_of(&spec, budget) {
            Ok(planning) => planning,
            Err(e) => {
                self.status = format!("Cannot plan: {e}");
                return;
            }
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let out_dir = self
            .settings
            .runs_dir
            .join(format!("gui-{}", now.as_millis()));
        // As trainer-cli's runs: the run's spec as it trains, a file that trains it again.
        let written = headroom_core::spec::writing::text(
            &spec.resolved(&config),
            &super::run_file::written_by(),
            "Open it in the desktop app (Open run file...) to train it again, or give it to \
             `trainer-cli train --config run.toml`.",
            now.as_secs(),
        )
        .map_err(|e| e.to_string())
        .and_then(|text| {
            headroom_core::spec::writing::write(&out_dir, &text).map_err(|e| e.to_string())
        });
        if let Err(e) = written {
            tracing::warn!(dir = %out_dir.display(), error = %e, "the run file was not written");
        }
        let options = RunOptions {
            out_dir: Some(out_dir),
            planning: Some(planning),
            budget: Some(Budget::new(budget)),
            // The dataset panel lists bad files; training goes on without them.
            loader: headroom_core::data::LoaderOptions {
                on_bad_file: headroom_core::data::OnBadFile::Skip,
                ..Default::default()
            },
            // As trainer-cli: length plans pack by the timings kept on this machine.
            timings: headroom_core::plan::cache::CalibrationCache::user(),
            ..RunOptions::default()
        };
        self.session = Session::starting();
        self.session.apply(&headroom_core::events::Event::Budget {
            bytes: budget,
            source,
        });
        self.evaluation = None;
        let control = RunControl::default();
        self.draw_cost.reset();
        jobs::train(
            self.outbox.clone(),
            config,
            options,
            control.clone(),
            self.settings.events_file.clone(),
        );
        self.control = Some(control);
        self.status = "Planning and checking the plan with a dry-run step...".into();
    }

    pub fn pause(&mut self, paused: bool) {
        if let Some(c) = &self.control {
            c.pause.store(paused, Ordering::Relaxed);
            self.session.state = if paused {
                RunState::Paused
            } else {
                RunState::Training
            };
        }
    }

    /// Stops at the next step boundary; the run writes a checkpoint.
    pub fn stop(&mut self) {
        if let Some(c) = &self.control {
            c.stop.store(true, Ordering::Relaxed);
            c.pause.store(false, Ordering::Relaxed);
            self.session.state = RunState::Stopping;
        }
    }

    /// Takes in what the background jobs reported.
    pub fn drain(&mut self) {
        while let Ok(message) = self.inbox.try_recv() {
            match message {
                Message::Probed(probed) => self.probed(probed.0, probed.1),
                Message::Scanned(Ok(summary)) => {
                    self.status = format!("{}: {} clips", summary.name, summary.clips());
                    self.dataset = summary;
                }
                Message::Scanned(Err(e)) => {
                    self.status = e.clone();
                    self.dataset.problems.push(e);
                    self.dataset.checking = None;
                }
                Message::BadFile(problem) => self.dataset.problems.push(problem),
                Message::FilesChecked { checked } => {
                    self.dataset.checking = None;
                    self.status = format!(
                        "Checked {checked} files: {} problem(s)",
                        self.dataset.problems.len()
                    );
                }
                Message::Calibrated(target, model, result) => {
                    self.calibrating = None;
                    match result {
                        Ok(c) => self.calibration = Some((target, model, c)),
                        Err(e) => {
                            self.status = format!("Calibration failed: {e}");
                            self.calibration_failed = Some((target, model));
                        }
                    }
                    // The choice may have moved on while this one calibrated.
                    self.calibrate_selected();
                }
                Message::Event(event) => {
                    if let headroom_core::events::Event::Config(info) = &event {
                        self.status = format!(
                            "Training {} on {} ({})",
                            info.model, info.backend, info.device
                        );
                    }
                    self.session.apply(&event);
                }
                Message::Evaluated(evaluation) => self.evaluation = Some(*evaluation),
                Message::TrainingEnded(result) => {
                    self.control = None;
                    match result {
                        Ok(()) => {
                            self.session.state = RunState::Finished;
                            self.status = "Training finished".into();
                        }
                        Err(e) => {
                            self.status = format!("Training failed: {e}");
                            self.session.fail(e);
                        }
                    }
                }
            }
        }
    }

    /// Reads the window's CPU time against its frames and the run's steps (at most every
    /// couple of seconds). Frames before a run (probing, calibrating) set the cost of a frame,
    /// so that the run's first seconds are paced as the rest.
    pub(super) fn read_draw_cost(&mut self) {
        self.draw_cost.frame();
        let now = Instant::now();
        if !self.draw_cost.due(now) {
            return;
        }
        let Some(cpu_s) = crate::draw_cost::window_cpu_seconds() else {
            return;
        };
        let read = self.draw_cost.read(now, cpu_s, self.session.step());
        // A costly frame (drawn in software) is drawn less often while training.
        if let Some(frame) = self.draw_cost.per_frame().filter(|_| read) {
            self.outbox.set_interval(crate::pacer::interval_for(frame));
        }
    }

    pub(super) fn read_host_memory(&mut self) {
        if self
            .host
            .read_at
            .is_some_and(|t| t.elapsed() < Duration::from_secs(1))
        {
            return;
        }
        self.host.read_at = Some(Instant::now());
        if let Some(cpu) = headroom_core::probe::cpu::probe().into_iter().next() {
            self.host.total = cpu.total_memory.bytes.unwrap_or(0);
            self.host.available = cpu.free_memory.bytes.unwrap_or(0);
        }
    }
}
