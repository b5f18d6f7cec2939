//! The results panel (AUC/pAUC per machine type and ID, CSV export) and the event log.

use super::*;

impl HeadroomApp {
    pub(super) fn results_panel(&mut self, ui: &mut egui::Ui) {
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

    pub(super) fn log_panel(&mut self, ui: &mut egui::Ui) {
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
