//! The app: panels for the dataset, the devices, the plan, memory, training and results.
//! It holds what the user chose and what the background jobs reported; all work happens in
//! [`crate::jobs`], all training logic in headroom-core.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use eframe::egui::{self, Color32, RichText};
use headroom_core::auto::Choice;
use headroom_core::budget::Budget;
use headroom_core::budget::simulated as devices;
use headroom_core::budget::{BudgetSource as CoreSource, DEFAULT_FRACTION};
use headroom_core::model::{ModelConfig, WithModel, with_default};
use headroom_core::plan::{Breakdown, Calibration, Fixed, Plan, Planning, breakdown_of, search};
use headroom_core::precision::Precision;
use headroom_core::probe::{DeviceReport, MachineReport};
use headroom_core::train::{DatasetSource, Evaluation};
use headroom_core::{RunLength, RunOptions, Target, TrainConfig};
use headroom_datasets::{FeatureSettings, SyntheticConfig};

use crate::dataset::DatasetSummary;
use crate::jobs::{self, Message, Outbox, RunControl};
use crate::memory_bar::{MemoryBar, Segment, legend, palette};
use crate::session::{RunState, Session, human};

mod dataset_panel;
mod devices_panel;
mod memory_panel;
mod plan_panel;
mod results_panel;
mod training_panel;

/// How the app starts; tests use their own.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Probe GPUs at start (in a child process). Off in tests: the CPU is always there.
    pub probe_gpus: bool,
    /// Where runs write checkpoints: a folder per run inside.
    pub runs_dir: PathBuf,
    pub steps: u64,
    /// Start training as soon as the plan is ready (`trainer-gui --start`).
    pub autostart: bool,
    /// A dataset to open at launch (`trainer-gui --data-root DIR`).
    pub data_root: Option<PathBuf>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            probe_gpus: true,
            runs_dir: PathBuf::from("runs"),
            steps: 288,
            autostart: false,
            data_root: None,
        }
    }
}

/// Where the memory budget comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum BudgetSource {
    /// The default fraction of the selected device's free memory.
    FreeMemory,
    /// A simulated GPU's memory (index into `devices::DEVICES`), x the default fraction.
    Simulated(usize),
    /// The user's figure, e.g. "2GiB".
    Custom(String),
}

/// A value the user may pin; unpinned ones are the planner's to choose.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pin<T> {
    pub pinned: bool,
    pub value: T,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pins {
    pub micro_batch: Pin<usize>,
    pub n_patches: Pin<usize>,
    pub accumulation: Pin<usize>,
    pub precision: Pin<Precision>,
    pub checkpointing: Pin<bool>,
}

impl Default for Pins {
    fn default() -> Self {
        let unpinned = |value| Pin {
            pinned: false,
            value,
        };
        Self {
            micro_batch: unpinned(8),
            n_patches: unpinned(4),
            accumulation: unpinned(1),
            precision: Pin {
                pinned: false,
                value: Precision::F32,
            },
            checkpointing: Pin {
                pinned: false,
                value: false,
            },
        }
    }
}

impl Pins {
    pub fn fixed(&self) -> Fixed {
        let pick = |p: Pin<usize>| p.pinned.then_some(p.value);
        Fixed {
            micro_batch: pick(self.micro_batch),
            n_patches: pick(self.n_patches),
            accumulation: pick(self.accumulation),
            checkpointing: self
                .checkpointing
                .pinned
                .then_some(self.checkpointing.value),
            precision: self.precision.pinned.then_some(self.precision.value),
        }
    }
}

pub struct HeadroomApp {
    settings: Settings,
    outbox: Outbox,
    inbox: Receiver<Message>,
    pub dataset: DatasetSummary,
    synthetic: SyntheticConfig,
    pub machine: Option<MachineReport>,
    choice: Option<Choice>,
    /// Index into the probe's devices.
    pub selected: Option<usize>,
    /// The device's calibration and the model it was made for.
    pub calibration: Option<(Target, String, Calibration)>,
    calibrating: Option<(Target, String)>,
    /// A device and model whose calibration failed: not retried on every frame.
    calibration_failed: Option<(Target, String)>,
    /// The model to train, by name (`model::built_in`).
    pub model: String,
    pub pins: Pins,
    pub effective_batch: usize,
    pub budget_source: BudgetSource,
    pub session: Session,
    control: Option<RunControl>,
    pub evaluation: Option<Evaluation>,
    host: HostMemory,
    confirm_close: bool,
    close_after_stop: bool,
    status: String,
    /// [`Self::plan`] as of this frame.
    frame_plan: Option<Result<(Plan, Breakdown), String>>,
}

/// The machine's RAM, read at most once a second.
struct HostMemory {
    read_at: Option<Instant>,
    total: u64,
    available: u64,
}

impl HeadroomApp {
    pub fn new(ctx: &egui::Context, settings: Settings) -> Self {
        let (sender, inbox) = channel();
        let outbox = Outbox::new(sender, ctx.clone());
        let synthetic = SyntheticConfig::default();
        let mut machine = None;
        if settings.probe_gpus {
            jobs::probe(outbox.clone());
        } else {
            machine = Some(MachineReport {
                devices: headroom_core::probe::cpu::probe(),
                findings: vec!["GPUs not probed".into()],
                elapsed_ms: 0,
            });
        }
        let mut app = Self {
            dataset: jobs::synthetic_summary(&synthetic),
            synthetic,
            outbox,
            inbox,
            machine: None,
            choice: None,
            selected: None,
            calibration: None,
            calibrating: None,
            calibration_failed: None,
            model: headroom_core::model::VqAutoencoderConfig::NAME.to_string(),
            pins: Pins::default(),
            effective_batch: 32,
            budget_source: BudgetSource::FreeMemory,
            session: Session::default(),
            control: None,
            evaluation: None,
            host: HostMemory {
                read_at: None,
                total: 0,
                available: 0,
            },
            confirm_close: false,
            close_after_stop: false,
            frame_plan: None,
            status: "Probing the machine...".into(),
            settings,
        };
        if let Some(report) = machine {
            let choice = headroom_core::auto::choose(&report);
            app.probed(report, choice);
        }
        if let Some(root) = app.settings.data_root.clone() {
            app.open_dataset(root);
        }
        app
    }

    /// The line at the top of the window: what the app is doing or what went wrong.
    pub fn status(&self) -> &str {
        &self.status
    }

    /// The device training would use.
    pub fn device(&self) -> Option<&DeviceReport> {
        self.machine.as_ref()?.devices.get(self.selected?)
    }

    pub fn target(&self) -> Option<Target> {
        let d = self.device()?;
        Some(Target {
            backend: d.backend,
            device: d.target,
        })
    }

    /// The chosen model's own patches per spectrogram, which plans prefer.
    fn preferred_n_patches(&self) -> Option<usize> {
        headroom_core::model::info_of(&self.model)
            .ok()
            .map(|m| m.default_batch.patches)
    }

    /// The budget and where it came from, resolved by core as the CLI's is.
    pub fn budget(&self) -> Result<(u64, String), String> {
        let source = match &self.budget_source {
            BudgetSource::FreeMemory => CoreSource::FreeMemory,
            BudgetSource::Simulated(i) => {
                CoreSource::Simulated(*devices::DEVICES.get(*i).ok_or("no such simulated device")?)
            }
            BudgetSource::Custom(text) => {
                CoreSource::Given(headroom_core::size::parse_size(text).map_err(|e| e.to_string())?)
            }
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
        let planning = Planning {
            budget_bytes: budget,
            effective_batch: self.effective_batch,
            fixed: self.pins.fixed(),
            preferred_n_patches: self.preferred_n_patches(),
        };
        // A preview before the run: the dataset and its read-ahead are not counted here; the
        // run's own plan counts them.
        let request = planning.request(0, headroom_core::plan::ReadAhead::NONE);
        Some(
            search(&calibration.memory, &calibration.speed, &request)
                .map_err(|e| e.to_string())
                .and_then(|plan| {
                    struct Breakdown<'a>(&'a Plan, &'a Calibration);
                    impl WithModel for Breakdown<'_> {
                        type Output = headroom_core::plan::Breakdown;
                        fn run<C: ModelConfig>(self, model: C) -> Self::Output {
                            breakdown_of(&model, self.0, 0, self.1)
                        }
                    }
                    let breakdown = with_default(model, Breakdown(&plan, calibration))
                        .map_err(|e| e.to_string())?;
                    Ok((plan, breakdown))
                }),
        )
    }

    /// Opens a dataset folder (the dialog, a dropped folder, or a test).
    pub fn open_dataset(&mut self, root: PathBuf) {
        self.dataset =
            DatasetSummary::from_clips(root.display().to_string(), Some(root.clone()), &[]);
        self.dataset.checking = Some(0);
        self.status = format!("Reading {}...", root.display());
        jobs::scan(self.outbox.clone(), root, FeatureSettings::default());
    }

    pub fn use_synthetic(&mut self) {
        self.dataset = jobs::synthetic_summary(&self.synthetic);
    }

    fn probed(&mut self, report: MachineReport, choice: Choice) {
        let chosen = report.devices.iter().position(|d| {
            Some(d) == choice.device.as_ref()
                || (choice.device.is_none() && d.backend == choice.backend)
        });
        self.selected = chosen.or_else(|| report.devices.iter().position(|d| d.usable));
        self.status = choice.reason.clone();
        self.machine = Some(report);
        self.choice = Some(choice);
        self.calibrate_selected();
    }

    /// Calibrates the chosen device for the chosen model, unless that is done, failed, or
    /// another calibration is under way.
    pub(super) fn calibrate_selected(&mut self) {
        let Some(target) = self.target() else { return };
        let wanted = (target, self.model.clone());
        // One calibration at a time: two would measure each other's allocations. The one
        // under way calls this again when it ends, for a choice made meanwhile.
        if self.calibrating.is_some()
            || self.calibration_failed.as_ref() == Some(&wanted)
            || self
                .calibration
                .as_ref()
                .is_some_and(|(t, m, _)| (*t, m) == (target, &self.model))
        {
            return;
        }
        self.calibrating = Some(wanted);
        jobs::calibrate(self.outbox.clone(), target, self.model.clone());
    }

    /// Starts a run with the current choices; it plans (with a dry-run) before training.
    pub fn start(&mut self) {
        if self.session.is_running() {
            return;
        }
        let Some(target) = self.target() else {
            self.status = "Choose a device first".into();
            return;
        };
        let (budget, source) = match self.budget() {
            Ok(b) => b,
            Err(e) => {
                self.status = format!("No budget: {e}");
                return;
            }
        };
        let dataset = match &self.dataset.root {
            Some(root) => DatasetSource::Dcase {
                root: root.clone(),
                machine_type: None,
                features: FeatureSettings::default(),
            },
            None => DatasetSource::Synthetic(self.synthetic.clone()),
        };
        let mut config = TrainConfig {
            backend: target.backend,
            device: target.device,
            length: RunLength::Steps(self.settings.steps),
            dataset,
            ..TrainConfig::default()
        };
        if let Err(e) = config.set_built_in_model(&self.model) {
            self.status = e.to_string();
            return;
        }
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let options = RunOptions {
            out_dir: Some(self.settings.runs_dir.join(format!("gui-{stamp}"))),
            planning: Some(Planning {
                budget_bytes: budget,
                effective_batch: self.effective_batch,
                fixed: self.pins.fixed(),
                preferred_n_patches: self.preferred_n_patches(),
            }),
            budget: Some(Budget::new(budget)),
            // The dataset panel lists bad files; training goes on without them.
            loader: headroom_core::data::LoaderOptions {
                on_bad_file: headroom_core::data::OnBadFile::Skip,
                ..Default::default()
            },
            ..RunOptions::default()
        };
        self.session = Session::starting();
        self.session.apply(&headroom_core::events::Event::Budget {
            bytes: budget,
            source,
        });
        self.evaluation = None;
        let control = RunControl::default();
        jobs::train(self.outbox.clone(), config, options, control.clone());
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

    fn read_host_memory(&mut self) {
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

    /// One frame of the whole app.
    pub fn ui(&mut self, ui: &mut egui::Ui) {
        self.drain();
        self.read_host_memory();
        // The planner's search runs once a frame; the panels read this.
        self.frame_plan = self.plan();
        if self.settings.autostart && matches!(self.frame_plan, Some(Ok(_))) {
            self.settings.autostart = false;
            self.start();
        }
        let ctx = ui.ctx().clone();
        self.handle_drops(&ctx);
        self.handle_close(&ctx);
        egui::Panel::top("status").show(ui, |ui| {
            ui.horizontal(|ui| {
                ui.heading("Headroom");
                ui.separator();
                ui.label(&self.status);
            });
        });
        egui::Panel::left("setup")
            .resizable(true)
            .default_size(400.0)
            .show(ui, |ui| {
                egui::ScrollArea::vertical().show(ui, |ui| {
                    self.dataset_panel(ui);
                    ui.separator();
                    self.devices_panel(ui);
                    ui.separator();
                    self.plan_panel(ui);
                });
            });
        egui::CentralPanel::default_margins().show(ui, |ui| {
            egui::ScrollArea::vertical().show(ui, |ui| {
                self.memory_panel(ui);
                ui.separator();
                self.training_panel(ui);
                ui.separator();
                self.results_panel(ui);
                ui.separator();
                self.log_panel(ui);
            });
        });
        if self.confirm_close {
            self.close_dialog(&ctx);
        }
        if self.close_after_stop && self.control.is_none() {
            ctx.send_viewport_cmd(egui::ViewportCommand::Close);
        }
        if self.session.is_running()
            || self.calibrating.is_some()
            || self.dataset.checking.is_some()
        {
            ctx.request_repaint_after(Duration::from_millis(200));
        }
    }

    fn handle_drops(&mut self, ctx: &egui::Context) {
        let dropped: Option<PathBuf> = ctx.input(|i| {
            i.raw
                .dropped_files
                .first()
                .map(|f| f.path().to_path_buf())
                .filter(|p| !p.as_os_str().is_empty())
        });
        if let Some(path) = dropped {
            let folder = if path.is_dir() {
                path
            } else {
                path.parent().map_or(path.clone(), Path::to_path_buf)
            };
            self.open_dataset(folder);
        }
    }

    fn handle_close(&mut self, ctx: &egui::Context) {
        if ctx.input(|i| i.viewport().close_requested()) && self.session.is_running() {
            ctx.send_viewport_cmd(egui::ViewportCommand::CancelClose);
            self.confirm_close = true;
        }
    }

    fn close_dialog(&mut self, ctx: &egui::Context) {
        egui::Window::new("Training is running")
            .collapsible(false)
            .resizable(false)
            .anchor(egui::Align2::CENTER_CENTER, [0.0, 0.0])
            .show(ctx, |ui| {
                ui.label("Stop training and write a checkpoint before closing?");
                ui.horizontal(|ui| {
                    if ui.button("Stop and close").clicked() {
                        self.stop();
                        self.confirm_close = false;
                        // The run checkpoints at its next step boundary; the window closes
                        // once its thread has ended.
                        self.close_after_stop = true;
                    }
                    if ui.button("Keep training").clicked() {
                        self.confirm_close = false;
                    }
                });
            });
    }
}

/// The results table as `trainer-cli eval` writes results.csv.
pub fn export_csv(
    report: &headroom_core::events::EvaluationReport,
    path: &Path,
) -> std::io::Result<()> {
    let csv = headroom_core::eval::results_csv(report);
    headroom_datasets::error::write_atomically(path, |w| {
        std::io::Write::write_all(w, csv.as_bytes())
    })
}

impl eframe::App for HeadroomApp {
    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        HeadroomApp::ui(self, ui);
    }
}
