//! The results panel (AUC/pAUC per machine type and ID, or a task's own figures; CSV export)
//! and the event log.

use super::*;

impl HeadroomApp {
    pub(super) fn results_panel(&mut self, ui: &mut egui::Ui) {
        if let Some(report) = &self.session.picture {
            ui.heading("Generated");
            self.picture.show(ui, report, ui.available_width());
        }
        ui.heading("Results");
        let csv = if let Some(report) = &self.session.evaluation {
            headroom_ui::results_table::show(ui, report);
            headroom_core::eval::results_csv(report)
        } else if let Some(results) = &self.session.results {
            headroom_ui::results_table::show_results(ui, results);
            results.csv()
        } else {
            ui.label("The test split is scored when training ends.");
            return;
        };
        if ui.button("Export CSV...").clicked()
            && let Some(path) = rfd::FileDialog::new()
                .set_file_name("results.csv")
                .save_file()
        {
            self.status = match export_csv(&csv, &path) {
                Ok(()) => format!("Results written to {}", path.display()),
                Err(e) => format!("Cannot write {}: {e}", path.display()),
            };
        }
    }

    pub(super) fn log_panel(&mut self, ui: &mut egui::Ui) {
        headroom_ui::event_log::show(ui, &self.session, true);
    }
}
