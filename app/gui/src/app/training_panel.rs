//! The training panel: start, pause, resume, stop, progress, and the curves.

use super::*;

impl HeadroomApp {
    pub(super) fn training_panel(&mut self, ui: &mut egui::Ui) {
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
            let steps = ui
                .add_enabled(
                    !self.session.is_running(),
                    egui::DragValue::new(&mut self.settings.steps).range(1..=1_000_000),
                )
                .on_hover_text("Steps");
            if steps.changed() {
                // Steps set here replace a run file's epochs.
                self.base.length = None;
            }
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
        if self.session.state == RunState::Training
            && let Some(line) = self.draw_cost.line()
        {
            ui.label(RichText::new(line).color(Color32::from_rgb(200, 140, 0)));
        }
        ui.columns(2, |columns| {
            headroom_ui::loss_plot::show(&mut columns[0], &self.session, 180.0);
            let max = headroom_ui::thin::budget(columns[1].available_width());
            let throughput = headroom_ui::thin::thin(&self.session.throughput, max);
            egui_plot::Plot::new("throughput")
                .height(180.0)
                .legend(egui_plot::Legend::default())
                .x_axis_label("step")
                .show(&mut columns[1], |plot| {
                    plot.line(egui_plot::Line::new("patches/s", throughput));
                });
        });
    }
}
