//! The page's rows and panels, top to bottom: what the user sees of the run each frame and
//! the buttons that turn into [`Action`]s for the page to carry out.

use egui::{Color32, RichText};
use headroom_core::memory::MemorySource;
use headroom_ui::memory_bar::{MemoryBar, Segment, legend, palette};
use headroom_ui::session::{RunState, human};
use headroom_ui::{event_log, loss_plot, results_table};

use super::{Action, PageUi};

const ERROR_COLOR: Color32 = Color32::from_rgb(190, 0, 32);

impl PageUi {
    /// Draws the page; returns what the user asked for.
    pub fn show(&mut self, ui: &mut egui::Ui) -> Vec<Action> {
        let mut actions = Vec::new();
        ui.heading("Headroom: training in this page");
        let settings = if self.query.is_empty() {
            "(the defaults; e.g. ?backend=cpu&steps=40&start=1)".into()
        } else {
            format!("?{}", self.query)
        };
        ui.label(RichText::new(format!("Settings: {settings}")).weak());
        self.data_row(ui, &mut actions);
        self.controls(ui, &mut actions);
        if let Some(error) = &self.session.error {
            ui.label(
                RichText::new(format!("Error: {error}"))
                    .color(ERROR_COLOR)
                    .strong(),
            );
        }
        if let Some(backend) = &self.backend {
            ui.label(format!("Backend {backend}"));
        }
        if let Some(plan) = &self.session.plan {
            let plan = &plan.plan;
            ui.label(format!(
                "Plan: {}; {}, checkpointing {}",
                plan.reason,
                plan.precision,
                if plan.checkpointing { "on" } else { "off" }
            ));
        }
        self.memory(ui);
        self.loss_curve(ui);
        if let Some(report) = &self.session.picture {
            self.picture
                .show(ui, report, ui.available_width().min(640.0));
        }
        if let Some(report) = &self.session.evaluation {
            ui.label(format!("Anomaly scores of {} test clips", report.clips));
            results_table::show(ui, report);
        }
        if let Some(results) = &self.session.results {
            results_table::show_results(ui, results);
        }
        self.files_row(ui, &mut actions);
        event_log::show(ui, &self.session, false);
        actions
    }

    fn data_row(&self, ui: &mut egui::Ui, actions: &mut Vec<Action>) {
        ui.horizontal_wrapped(|ui| {
            ui.label(format!("Data: {}.", self.data));
            if ui
                .add_enabled(!self.running, egui::Button::new("Choose a folder..."))
                .clicked()
            {
                actions.push(Action::PickFolder);
            }
            ui.label(
                "or drop one on the page, in the DCASE layout: fan/train/normal_id_00_00000000.wav, \
                 fan/test/anomaly_id_00_00000000.wav (.npy spectrograms too)",
            );
        });
        ui.horizontal_wrapped(|ui| {
            match &self.checkpoint {
                Some(words) => ui.label(format!("Resume from: {words}.")),
                None => ui.label("Start: a new run."),
            };
            if ui
                .add_enabled(!self.running, egui::Button::new("Resume from a checkpoint..."))
                .clicked()
            {
                actions.push(Action::PickCheckpoint);
            }
            if self.checkpoint.is_some() {
                if ui
                    .add_enabled(!self.running, egui::Button::new("New run instead"))
                    .clicked()
                {
                    actions.push(Action::ForgetCheckpoint);
                }
                ui.label(
                    "(the run's model, data and settings are the checkpoint's; steps= is its \
                     new length; pick its data folder again if it trained on yours)",
                );
            } else {
                ui.label("(the three files a run offers: model.safetensors, optimizer.burnpack, state.json)");
            }
        });
    }

    fn controls(&mut self, ui: &mut egui::Ui, actions: &mut Vec<Action>) {
        ui.horizontal(|ui| {
            ui.label("Memory budget:");
            ui.add_enabled(
                !self.running,
                egui::TextEdit::singleline(&mut self.budget)
                    .hint_text("from the device")
                    .desired_width(110.0),
            );
            if ui
                .add_enabled(!self.running, egui::Button::new("Start"))
                .clicked()
            {
                match self.start_query() {
                    Ok(query) => actions.push(Action::Start(query)),
                    Err(error) => self.session.fail(error),
                }
            }
            let state = self.session.state;
            let paused = state == RunState::Paused;
            let can_pause = self.running
                && self.ended.is_none()
                && matches!(
                    state,
                    RunState::Preparing | RunState::Training | RunState::Paused
                );
            let pause = if paused { "Resume" } else { "Pause" };
            if ui
                .add_enabled(can_pause, egui::Button::new(pause))
                .clicked()
            {
                self.session.state = if paused {
                    RunState::Training
                } else {
                    RunState::Paused
                };
                actions.push(Action::Pause(!paused));
            }
            if ui
                .add_enabled(can_pause, egui::Button::new("Stop"))
                .clicked()
            {
                self.session.state = RunState::Stopping;
                actions.push(Action::Stop);
                // A paused run must go on to reach the boundary where it stops.
                if paused {
                    actions.push(Action::Pause(false));
                }
            }
            ui.label(self.status());
        });
    }

    fn memory(&self, ui: &mut egui::Ui) {
        let source = match self.session.info.as_ref().map(|info| info.memory_source) {
            Some(MemorySource::HostAllocator) => "the page's heap, counted",
            Some(MemorySource::DevicePool) => "the WebGPU device pool",
            Some(MemorySource::Unmeasured) => "not measured",
            None => "-",
        };
        let Some(latest) = self.session.latest_memory() else {
            ui.label(format!("Memory ({source}): -"));
            return;
        };
        let budget = latest.budget.or(self.session.budget);
        let mut words = format!(
            "Memory ({source}): in use {}, step peak {}",
            human(latest.allocated),
            human(latest.peak)
        );
        if let Some(reserved) = latest.reserved {
            words += &format!(", pool {}", human(reserved));
        }
        if let Some(budget) = budget {
            words += &format!(", budget {}", human(budget));
        }
        ui.label(words);
        let mut segments = vec![
            Segment {
                label: format!("in use {}", human(latest.allocated)),
                bytes: latest.allocated,
                color: palette("allocated"),
            },
            Segment {
                label: format!("up to the step's peak, {}", human(latest.peak)),
                bytes: latest.peak.saturating_sub(latest.allocated),
                color: palette("peak"),
            },
        ];
        // A device pool keeps what it once allocated: what the device has given the run.
        let reserved = latest.reserved.unwrap_or(0);
        if reserved > latest.peak {
            segments.push(Segment {
                label: format!("held by the pool, {}", human(reserved)),
                bytes: reserved - latest.peak,
                color: palette("reserved"),
            });
        }
        MemoryBar {
            capacity: budget.unwrap_or(0).max(latest.peak).max(reserved),
            budget,
            segments: &segments,
            peak: Some(latest.peak),
        }
        .show(ui);
        legend(ui, &segments);
        if let Some(source) = &self.budget_source {
            ui.label(RichText::new(format!("budget: {source}")).weak());
        }
    }

    fn loss_curve(&self, ui: &mut egui::Ui) {
        ui.label("Loss per step");
        loss_plot::show(ui, &self.session, 180.0);
    }

    fn files_row(&self, ui: &mut egui::Ui, actions: &mut Vec<Action>) {
        ui.horizontal_wrapped(|ui| {
            ui.label("Files of the run:");
            if self.files.is_empty() {
                ui.label("none yet");
            }
            for name in &self.files {
                if ui.button(name).clicked() {
                    actions.push(Action::Download(name.clone()));
                }
            }
        });
        if let Some(note) = &self.note {
            ui.label(RichText::new(note).weak());
        }
    }
}
