//! The app: panels for the dataset, the devices, the plan, memory, training and results.
//! It holds what the user chose and what the background jobs reported; all work happens in
//! [`crate::jobs`], all training logic in headroom-core.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use eframe::egui::{self, Color32, RichText};
use headroom_core::memory::Budget;
use headroom_core::plan::{
    Breakdown, Calibration, Fixed, Plan, Planning, breakdown_of, devices, search,
};
use headroom_core::probe::{DeviceReport, MachineReport, Precision, choose::Choice};
use headroom_core::train::{DatasetSource, Evaluation};
use headroom_core::{RunLength, RunOptions, Target, TrainConfig};
use headroom_datasets::{FeatureSettings, SyntheticConfig};

use crate::dataset::DatasetSummary;
use crate::jobs::{self, Message, Outbox, RunControl};
use crate::memory_bar::{MemoryBar, Segment, legend, palette};
use crate::session::{RunState, Session, human};

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
    /// 90% of the selected device's free memory.
    FreeMemory,
    /// A simulated GPU's memory (index into `devices::DEVICES`), x 0.9.
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
    pub calibration: Option<(Target, Calibration)>,
    calibrating: Option<Target>,
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
            status: "Probing the machine...".into(),
            settings,
        };
        if let Some(report) = machine {
            let choice = headroom_core::probe::choose::choose(&report);
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

    /// The budget and where it came from.
    pub fn budget(&self) -> Result<(u64, String), String> {
        match &self.budget_source {
            BudgetSource::FreeMemory => self
                .device()
                .ok_or_else(|| "no device selected".to_string())?
                .budget(0.9),
            BudgetSource::Simulated(i) => {
                let d = devices::DEVICES.get(*i).ok_or("no such simulated device")?;
                Ok((
                    (d.memory_bytes as f64 * 0.9) as u64,
                    format!("simulated {} x 0.9", d.label),
                ))
            }
            BudgetSource::Custom(text) => headroom_core::memory::parse_size(text)
                .map(|b| (b, "your figure".to_string()))
                .map_err(|e| e.to_string()),
        }
    }

    /// The plan for the current pins and budget, from the device's calibration: instant, so
    /// it follows every change of a pin.
    pub fn plan(&self) -> Option<Result<(Plan, Breakdown), String>> {
        let (target, calibration) = self.calibration.as_ref()?;
        if Some(*target) != self.target() {
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
        };
        let request = planning.request(0);
        Some(
            search(&calibration.memory, &calibration.speed, &request)
                .map(|plan| {
                    let model = headroom_core::model::VqAutoencoderConfig::default();
                    let breakdown = breakdown_of(&model, &plan, 0, &calibration.memory);
                    (plan, breakdown)
                })
                .map_err(|e| e.to_string()),
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

    fn calibrate_selected(&mut self) {
        let Some(target) = self.target() else { return };
        if self.calibrating == Some(target)
            || self.calibration.as_ref().is_some_and(|(t, _)| *t == target)
        {
            return;
        }
        self.calibrating = Some(target);
        jobs::calibrate(self.outbox.clone(), target);
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
        let config = TrainConfig {
            backend: target.backend,
            device: target.device,
            length: RunLength::Steps(self.settings.steps),
            dataset,
            ..TrainConfig::default()
        };
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let options = RunOptions {
            out_dir: Some(self.settings.runs_dir.join(format!("gui-{stamp}"))),
            planning: Some(Planning {
                budget_bytes: budget,
                effective_batch: self.effective_batch,
                fixed: self.pins.fixed(),
            }),
            budget: Some(Budget::new(budget)),
            // The dataset panel lists bad files; training goes on without them.
            loader: headroom_core::dataset::LoaderOptions {
                on_bad_file: headroom_core::dataset::OnBadFile::Skip,
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
                Message::Calibrated(target, result) => {
                    self.calibrating = None;
                    match result {
                        Ok(c) => self.calibration = Some((target, c)),
                        Err(e) => self.status = format!("Calibration failed: {e}"),
                    }
                }
                Message::Event(event) => {
                    if let headroom_core::events::Event::Config(info) = &event {
                        self.status = format!("Training on {} ({})", info.backend, info.device);
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
        if self.settings.autostart && matches!(self.plan(), Some(Ok(_))) {
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

    fn dataset_panel(&mut self, ui: &mut egui::Ui) {
        ui.heading("Dataset");
        ui.horizontal(|ui| {
            let idle = !self.session.is_running();
            if ui
                .add_enabled(idle, egui::Button::new("Open dataset..."))
                .clicked()
                && let Some(folder) = rfd::FileDialog::new().pick_folder()
            {
                self.open_dataset(folder);
            }
            if ui
                .add_enabled(
                    idle && self.dataset.root.is_some(),
                    egui::Button::new("Built-in synthetic"),
                )
                .clicked()
            {
                self.use_synthetic();
            }
        });
        ui.label(RichText::new(&self.dataset.name).strong());
        ui.small(
            "Drop a folder here to open it (DCASE layout: ROOT/<machine type>/{train,test}/).",
        );
        egui::Grid::new("dataset-counts")
            .striped(true)
            .show(ui, |ui| {
                for h in ["type", "id", "train", "normal", "anomaly"] {
                    ui.label(RichText::new(h).strong());
                }
                ui.end_row();
                for (machine_type, ids) in &self.dataset.counts {
                    for (id, c) in ids {
                        ui.label(machine_type);
                        ui.label(format!("{id:02}"));
                        ui.label(c.train.to_string());
                        ui.label(c.test_normal.to_string());
                        ui.label(c.test_anomaly.to_string());
                        ui.end_row();
                    }
                }
            });
        if self.dataset.checking.is_some() {
            ui.horizontal(|ui| {
                ui.spinner();
                ui.label("Checking files...");
            });
        }
        if !self.dataset.problems.is_empty() {
            ui.colored_label(
                Color32::from_rgb(220, 120, 40),
                format!(
                    "{} bad file(s), left out of training:",
                    self.dataset.problems.len()
                ),
            );
            for p in &self.dataset.problems {
                ui.small(p);
            }
        }
    }

    fn devices_panel(&mut self, ui: &mut egui::Ui) {
        ui.heading("Devices");
        let Some(machine) = &self.machine else {
            ui.horizontal(|ui| {
                ui.spinner();
                ui.label("Probing CUDA, wgpu adapters and the CPU...");
            });
            return;
        };
        let auto = self.choice.as_ref().and_then(|c| c.device.clone());
        let mut pick = None;
        egui::Grid::new("devices").striped(true).show(ui, |ui| {
            for h in ["device", "kind", "free / total", "precisions"] {
                ui.label(RichText::new(h).strong());
            }
            ui.end_row();
            for (i, d) in machine.devices.iter().enumerate() {
                let is_auto = auto.as_ref() == Some(d)
                    || (auto.is_none()
                        && self
                            .choice
                            .as_ref()
                            .is_some_and(|c| c.backend == d.backend && d.target.is_none()));
                let name = format!(
                    "{} {}{}",
                    d.backend,
                    d.name,
                    if is_auto { "  (auto)" } else { "" }
                );
                if ui
                    .add_enabled(
                        d.usable && !self.session.is_running(),
                        egui::RadioButton::new(self.selected == Some(i), name),
                    )
                    .on_disabled_hover_text(d.notes.join("; "))
                    .clicked()
                {
                    pick = Some(i);
                }
                ui.label(d.class.label());
                let figure = |m: &headroom_core::probe::MemoryFigure| {
                    m.bytes.map_or("?".to_string(), |b| {
                        format!("{}{}", if m.at_least { ">= " } else { "" }, human(b))
                    })
                };
                ui.label(format!(
                    "{} / {}",
                    figure(&d.free_memory),
                    figure(&d.total_memory)
                ));
                ui.label(
                    d.precisions
                        .iter()
                        .map(|p| p.name())
                        .collect::<Vec<_>>()
                        .join(" "),
                );
                ui.end_row();
            }
        });
        if let Some(c) = &self.choice {
            ui.small(&c.reason);
        }
        if let Some(i) = pick {
            self.selected = Some(i);
            self.calibrate_selected();
        }
    }

    fn plan_panel(&mut self, ui: &mut egui::Ui) {
        ui.heading("Plan");
        let running = self.session.is_running();
        ui.add_enabled_ui(!running, |ui| {
            ui.horizontal(|ui| {
                ui.label("Budget");
                let mut kind = match self.budget_source {
                    BudgetSource::FreeMemory => 0,
                    BudgetSource::Simulated(_) => 1,
                    BudgetSource::Custom(_) => 2,
                };
                egui::ComboBox::from_id_salt("budget-kind")
                    .selected_text(["90% of free memory", "a simulated GPU", "my figure"][kind])
                    .show_ui(ui, |ui| {
                        ui.selectable_value(&mut kind, 0, "90% of free memory");
                        ui.selectable_value(&mut kind, 1, "a simulated GPU");
                        ui.selectable_value(&mut kind, 2, "my figure");
                    })
                    .response
                    .on_hover_text("Where the memory budget comes from");
                self.budget_source = match (kind, &self.budget_source) {
                    (0, _) => BudgetSource::FreeMemory,
                    (1, BudgetSource::Simulated(i)) => BudgetSource::Simulated(*i),
                    (1, _) => BudgetSource::Simulated(0),
                    (_, BudgetSource::Custom(t)) => BudgetSource::Custom(t.clone()),
                    _ => BudgetSource::Custom("2GiB".into()),
                };
                match &mut self.budget_source {
                    BudgetSource::Simulated(i) => {
                        egui::ComboBox::from_id_salt("simulated")
                            .selected_text(devices::DEVICES[*i].label)
                            .show_ui(ui, |ui| {
                                for (j, d) in devices::DEVICES.iter().enumerate() {
                                    ui.selectable_value(i, j, d.label);
                                }
                            })
                            .response
                            .on_hover_text("Simulated GPU");
                    }
                    BudgetSource::Custom(text) => {
                        ui.add(egui::TextEdit::singleline(text).desired_width(80.0))
                            .on_hover_text("Budget, e.g. 2GiB or 512MiB");
                    }
                    BudgetSource::FreeMemory => {}
                }
            });
            match self.budget() {
                Ok((bytes, source)) => ui.small(format!("{} ({source})", human(bytes))),
                Err(e) => ui.colored_label(Color32::from_rgb(220, 60, 60), e),
            };
            ui.horizontal(|ui| {
                ui.label("Effective batch (patches)");
                ui.add(egui::DragValue::new(&mut self.effective_batch).range(1..=65_536))
                    .on_hover_text("Effective batch (patches)");
            });
            let pins = &mut self.pins;
            egui::Grid::new("pins").show(ui, |ui| {
                pin_row(ui, "Micro-batch", &mut pins.micro_batch, 1..=4096);
                pin_row(ui, "Patches per spectrogram", &mut pins.n_patches, 1..=16);
                pin_row(ui, "Accumulation steps", &mut pins.accumulation, 1..=4096);
                ui.checkbox(&mut pins.precision.pinned, "Pin precision");
                egui::ComboBox::from_id_salt("precision")
                    .selected_text(pins.precision.value.name())
                    .show_ui(ui, |ui| {
                        for p in [Precision::F32, Precision::F16, Precision::Bf16] {
                            ui.selectable_value(&mut pins.precision.value, p, p.name());
                        }
                    })
                    .response
                    .on_hover_text("Precision");
                ui.end_row();
                ui.checkbox(&mut pins.checkpointing.pinned, "Pin checkpointing");
                ui.checkbox(&mut pins.checkpointing.value, "gradient checkpointing");
                ui.end_row();
            });
        });
        let planned = match &self.session.plan {
            // A run's own plan, checked by its dry-run, once it has one.
            Some(report)
                if self.session.is_running() || self.session.state == RunState::Finished =>
            {
                ui.small("The run's plan (checked by its dry-run step):");
                Some(Ok((report.plan.clone(), report.breakdown)))
            }
            _ => self.plan(),
        };
        match planned {
            None => {
                ui.horizontal(|ui| {
                    ui.spinner();
                    ui.label("Calibrating on the device (a few real steps)...");
                });
            }
            Some(Err(e)) => {
                ui.colored_label(Color32::from_rgb(220, 60, 60), e);
            }
            Some(Ok((plan, _))) => {
                egui::Grid::new("plan").striped(true).show(ui, |ui| {
                    let rows = [
                        ("micro-batch", plan.micro_batch.to_string()),
                        ("patches", plan.n_patches.to_string()),
                        ("stride", TrainConfig::default().stride.to_string()),
                        ("accumulation", plan.accumulation.to_string()),
                        ("precision", plan.precision.name().to_string()),
                        (
                            "checkpointing",
                            if plan.checkpointing { "on" } else { "off" }.to_string(),
                        ),
                        (
                            "effective batch",
                            format!("{} patches", plan.effective_batch),
                        ),
                        ("predicted peak", human(plan.predicted_peak_bytes)),
                    ];
                    for (k, v) in rows {
                        ui.label(k);
                        ui.label(RichText::new(v).strong());
                        ui.end_row();
                    }
                });
                ui.small(&plan.reason);
            }
        }
    }

    fn memory_panel(&mut self, ui: &mut egui::Ui) {
        ui.heading("Memory");
        let budget = self.budget().ok().map(|(b, _)| b);
        let capacity = self
            .device()
            .and_then(|d| d.total_memory.bytes)
            .or(budget)
            .unwrap_or(1);
        let running = self.session.latest_memory().copied();
        let segments: Vec<Segment> = match (running, self.plan()) {
            (Some(m), _) => {
                let mut s = vec![Segment {
                    label: format!("allocated {}", human(m.allocated)),
                    bytes: m.allocated,
                    color: palette("allocated"),
                }];
                s.push(Segment {
                    label: format!("step peak {}", human(m.peak)),
                    bytes: m.peak.saturating_sub(m.allocated),
                    color: palette("peak"),
                });
                if let Some(r) = m.reserved {
                    s.push(Segment {
                        label: format!("reserved {}", human(r)),
                        bytes: r.saturating_sub(m.peak),
                        color: palette("reserved"),
                    });
                }
                s
            }
            (None, Some(Ok((_, b)))) => breakdown_segments(&b),
            _ => Vec::new(),
        };
        let (title, peak) = match running {
            Some(m) => (
                format!(
                    "Device, measured at step {}: allocated {}, peak {}{}",
                    m.step,
                    human(m.allocated),
                    human(m.peak),
                    m.budget
                        .map(|b| format!(", budget {}", human(b)))
                        .unwrap_or_default()
                ),
                Some(m.peak),
            ),
            None => ("Device, predicted for the plan".to_string(), None),
        };
        ui.label(title);
        let shown_budget = running.and_then(|m| m.budget).or(budget);
        MemoryBar {
            capacity,
            budget: shown_budget,
            segments: &segments,
            peak,
        }
        .show(ui);
        legend(ui, &segments);
        if let Some(b) = shown_budget {
            ui.small(format!(
                "red line: budget {} of {}",
                human(b),
                human(capacity)
            ));
        }
        // The same step at a scale where it can be read: against the plan's prediction.
        let predicted = self
            .session
            .plan
            .as_ref()
            .map(|p| p.plan.predicted_peak_bytes);
        if let (Some(m), Some(predicted)) = (running, predicted) {
            ui.label(format!(
                "This step against the plan: peak {} of {} predicted",
                human(m.peak),
                human(predicted)
            ));
            MemoryBar {
                capacity: (predicted.max(m.peak) as f64 * 1.15) as u64,
                budget: Some(predicted),
                segments: &segments,
                peak: Some(m.peak),
            }
            .show(ui);
            ui.small("red line: the plan's predicted peak");
        }
        let used = self.host.total.saturating_sub(self.host.available);
        ui.label(format!(
            "Host RAM: {} used of {}",
            human(used),
            human(self.host.total)
        ));
        MemoryBar {
            capacity: self.host.total.max(1),
            budget: None,
            segments: &[Segment {
                label: format!("used {}", human(used)),
                bytes: used,
                color: palette("host"),
            }],
            peak: None,
        }
        .show(ui);
    }

    fn training_panel(&mut self, ui: &mut egui::Ui) {
        ui.heading("Training");
        ui.horizontal(|ui| {
            let state = self.session.state;
            let can_start = !self.session.is_running() && self.target().is_some();
            if ui
                .add_enabled(can_start, egui::Button::new("Start"))
                .clicked()
            {
                self.start();
            }
            match state {
                RunState::Paused => {
                    if ui.button("Resume").clicked() {
                        self.pause(false);
                    }
                }
                _ => {
                    if ui
                        .add_enabled(state == RunState::Training, egui::Button::new("Pause"))
                        .clicked()
                    {
                        self.pause(true);
                    }
                }
            }
            if ui
                .add_enabled(
                    self.session.is_running() && state != RunState::Stopping,
                    egui::Button::new("Stop"),
                )
                .clicked()
            {
                self.stop();
            }
            ui.label(format!("{state:?}"));
            ui.label("Steps");
            ui.add_enabled(
                !self.session.is_running(),
                egui::DragValue::new(&mut self.settings.steps).range(1..=1_000_000),
            )
            .on_hover_text("Steps");
        });
        let total = self.session.total_steps();
        if total > 0 {
            let step = self.session.step();
            let eta = self
                .session
                .eta_seconds()
                .map_or("ETA after warm-up".to_string(), |s| format!("ETA {s:.0} s"));
            ui.add(
                egui::ProgressBar::new(step as f32 / total as f32)
                    .text(format!("step {step}/{total} - {eta}")),
            );
        }
        let recoveries = self.session.recoveries.clone();
        ui.columns(2, |columns| {
            egui_plot::Plot::new("loss")
                .height(180.0)
                .legend(egui_plot::Legend::default())
                .x_axis_label("step")
                .show(&mut columns[0], |plot| {
                    plot.line(egui_plot::Line::new(
                        "train loss",
                        self.session.loss.clone(),
                    ));
                    plot.line(egui_plot::Line::new(
                        "validation loss",
                        self.session.validation.clone(),
                    ));
                    for (step, from, to) in &recoveries {
                        plot.vline(egui_plot::VLine::new(
                            format!("out of memory: {from} -> {to}"),
                            *step as f64,
                        ));
                    }
                });
            egui_plot::Plot::new("throughput")
                .height(180.0)
                .legend(egui_plot::Legend::default())
                .x_axis_label("step")
                .show(&mut columns[1], |plot| {
                    plot.line(egui_plot::Line::new(
                        "patches/s",
                        self.session.throughput.clone(),
                    ));
                });
        });
    }

    fn results_panel(&mut self, ui: &mut egui::Ui) {
        ui.heading("Results");
        let Some(report) = &self.session.evaluation else {
            ui.label("The test split is scored when training ends.");
            return;
        };
        egui::Grid::new("results").striped(true).show(ui, |ui| {
            for h in ["machine type", "id", "AUC", "pAUC", "normal", "anomalous"] {
                ui.label(RichText::new(h).strong());
            }
            ui.end_row();
            for m in &report.per_machine {
                ui.label(&m.machine_type);
                ui.label(format!("{:02}", m.machine_id));
                ui.label(format!("{:.3}", m.auc));
                ui.label(format!("{:.3}", m.pauc));
                ui.label(m.normal_clips.to_string());
                ui.label(m.anomalous_clips.to_string());
                ui.end_row();
            }
            ui.label(RichText::new("mean").strong());
            ui.label("");
            ui.label(RichText::new(format!("{:.3}", report.auc)).strong());
            ui.label(RichText::new(format!("{:.3}", report.pauc)).strong());
            ui.end_row();
        });
        if ui.button("Export CSV...").clicked()
            && let Some(path) = rfd::FileDialog::new()
                .set_file_name("results.csv")
                .save_file()
        {
            self.status = match export_csv(report, &path) {
                Ok(()) => format!("Results written to {}", path.display()),
                Err(e) => format!("Cannot write {}: {e}", path.display()),
            };
        }
    }

    fn log_panel(&mut self, ui: &mut egui::Ui) {
        egui::CollapsingHeader::new("Events")
            .default_open(true)
            .show(ui, |ui| {
                egui::ScrollArea::vertical()
                    .max_height(160.0)
                    .stick_to_bottom(true)
                    .show(ui, |ui| {
                        for line in &self.session.log {
                            ui.small(line);
                        }
                    });
            });
    }
}

fn pin_row(
    ui: &mut egui::Ui,
    label: &str,
    pin: &mut Pin<usize>,
    range: std::ops::RangeInclusive<usize>,
) {
    ui.checkbox(&mut pin.pinned, format!("Pin {}", label.to_lowercase()));
    ui.add_enabled(
        pin.pinned,
        egui::DragValue::new(&mut pin.value).range(range),
    )
    .on_hover_text(label);
    ui.end_row();
}

fn breakdown_segments(b: &Breakdown) -> Vec<Segment> {
    [
        ("parameters", b.parameters),
        ("gradients", b.gradients),
        ("optimizer", b.optimizer),
        ("activations", b.activations),
        ("data", b.data),
        ("overhead", b.overhead),
    ]
    .into_iter()
    .map(|(label, bytes)| Segment {
        label: label.into(),
        bytes,
        color: palette(label),
    })
    .collect()
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
