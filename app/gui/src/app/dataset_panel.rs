//! The dataset panel: what is open, its machine types, IDs and clips, and its bad files.

use super::*;

impl HeadroomApp {
    pub(super) fn dataset_panel(&mut self, ui: &mut egui::Ui) {
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
}
