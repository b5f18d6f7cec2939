//! The anomaly scores as both front-ends show them: AUC/pAUC per machine type and ID, the
//! means last, with the rows and names of `trainer-cli eval`'s results.csv.

use egui::RichText;
use headroom_core::events::EvaluationReport;

pub fn show(ui: &mut egui::Ui, report: &EvaluationReport) {
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
        ui.label(RichText::new("all").strong());
        ui.label(RichText::new("mean").strong());
        ui.label(RichText::new(format!("{:.3}", report.auc)).strong());
        ui.label(RichText::new(format!("{:.3}", report.pauc)).strong());
        ui.end_row();
    });
}
