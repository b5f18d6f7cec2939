//! The app: panels for the dataset, the devices, the plan, memory, training and results.
//! It holds what the user chose and what the background jobs reported; all work happens in
//! [`crate::jobs`], all training logic in headroom-core.

use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use eframe::egui::{self, Color32, RichText};
use headroom_core::auto::Choice;
use headroom_core::budget::DEFAULT_FRACTION;
use headroom_core::budget::simulated as devices;
use headroom_core::model::ModelConfig;
use headroom_core::plan::{Breakdown, Calibration, Plan};
use headroom_core::precision::Precision;
use headroom_core::probe::{DeviceReport, MachineReport};
use headroom_core::train::Evaluation;
use headroom_core::{Target, TrainConfig};
use headroom_datasets::{FeatureSettings, SyntheticConfig};

use crate::dataset::DatasetSummary;
use crate::jobs::{self, Message, Outbox, RunControl};
use crate::memory_bar::{MemoryBar, Segment, legend, palette};
use crate::session::{RunState, Session, human};

mod choices;
mod dataset_panel;
mod devices_panel;
mod memory_panel;
mod plan_panel;
mod planning;
mod results_panel;
mod run;
pub mod run_file;
mod training_panel;

pub use choices::{BudgetChoice, Pin, Pins};

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
    /// The speech recogniser's train recordings to open at launch (`trainer-gui
    /// --speech-train PATH`: a manifest or a LibriSpeech-layout folder).
    pub speech_train: Option<PathBuf>,
    /// A run file to open at launch (`trainer-gui --config FILE`), as *Open run file...*.
    pub run_file: Option<PathBuf>,
    /// `steps` was given (`--steps N`): it wins over the run file's length.
    pub steps_given: bool,
    /// Where a run writes its events as JSON lines (`trainer-gui --events FILE`), as
    /// `trainer-cli train --json` prints them.
    pub events_file: Option<PathBuf>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            probe_gpus: true,
            runs_dir: PathBuf::from("runs"),
            steps: 288,
            autostart: false,
            data_root: None,
            speech_train: None,
            run_file: None,
            steps_given: false,
            events_file: None,
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
    /// The model to train, by name (`registry::built_in`).
    pub model: String,
    /// The speech recogniser's train recordings (a manifest, or a folder in the LibriSpeech
    /// layout) instead of its generated corpus; every 10th is held out for validation, as
    /// `trainer-cli --speech-train` does. Only the recogniser reads them.
    pub recordings: Option<PathBuf>,
    pub pins: Pins,
    pub effective_batch: usize,
    pub budget_choice: BudgetChoice,
    /// The run file opened last (its length where it trains epochs): what the app has no
    /// control for is taken from it for runs of its model (`run_file`).
    base: headroom_core::spec::RunSpec,
    pub session: Session,
    control: Option<RunControl>,
    pub evaluation: Option<Evaluation>,
    host: HostMemory,
    confirm_close: bool,
    close_after_stop: bool,
    status: String,
    /// The run's newest picture of what its networks make (a GAN's generated patches).
    picture: headroom_ui::picture_view::PictureView,
    /// [`Self::plan`] as of this frame.
    frame_plan: Option<Result<(Plan, Breakdown), String>>,
    /// The CPU time drawing the window takes from the run (the training panel's line).
    draw_cost: crate::draw_cost::DrawCost,
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
            recordings: settings.speech_train.clone(),
            pins: Pins::default(),
            effective_batch: 32,
            budget_choice: BudgetChoice::FreeMemory,
            base: Default::default(),
            session: Session::default(),
            control: None,
            evaluation: None,
            host: HostMemory {
                read_at: None,
                total: 0,
                available: 0,
            },
            confirm_close: false,
            picture: Default::default(),
            close_after_stop: false,
            frame_plan: None,
            draw_cost: Default::default(),
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
        if let Some(path) = app.settings.run_file.clone() {
            let steps = app.settings.steps;
            app.open_run_file(&path);
            if app.settings.steps_given {
                app.settings.steps = steps;
                app.base.length = None;
            }
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

    /// One frame of the whole app.
    pub fn ui(&mut self, ui: &mut egui::Ui) {
        self.outbox.painted();
        self.drain();
        let ctx = ui.ctx().clone();
        // Hidden or minimised: the messages are taken in, nothing is drawn, and the next frame
        // comes with the next message or the window's return (docs/GUI.md).
        let hidden = ctx.input(|i| {
            let viewport = i.viewport();
            viewport.minimized == Some(true) || viewport.occluded == Some(true)
        });
        if hidden {
            self.handle_close(&ctx);
            return;
        }
        self.read_host_memory();
        self.read_draw_cost();
        // The planner's search runs once a frame; the panels read this.
        self.frame_plan = self.plan();
        if self.settings.autostart && matches!(self.frame_plan, Some(Ok(_))) {
            self.settings.autostart = false;
            self.start();
        }
        self.handle_drops(&ctx);
        self.handle_close(&ctx);
        egui::Panel::top("status").show(ui, |ui| {
            ui.horizontal(|ui| {
                ui.heading("Headroom");
                ui.separator();
                self.run_file_buttons(ui);
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
        // Steps repaint the window as they come (jobs::Outbox, at a bounded rate); while a run
        // goes on, a frame every 2 s keeps its ETA moving between slow steps.
        if self.calibrating.is_some() || self.dataset.checking.is_some() {
            ctx.request_repaint_after(Duration::from_millis(200));
        } else if self.session.is_running() {
            ctx.request_repaint_after(Duration::from_secs(2));
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
            if path.extension().is_some_and(|e| e == "toml") {
                self.open_run_file(&path);
                return;
            }
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
pub fn export_csv(csv: &str, path: &Path) -> std::io::Result<()> {
    headroom_datasets::error::write_atomically(path, |w| {
        std::io::Write::write_all(w, csv.as_bytes())
    })
}

impl eframe::App for HeadroomApp {
    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        HeadroomApp::ui(self, ui);
    }
}
