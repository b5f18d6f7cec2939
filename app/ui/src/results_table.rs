//! The results as both front-ends show them: the anomaly scores (AUC/pAUC per machine type
//! and ID, the means last, with the rows and names of `trainer-cli eval`'s results.csv), or
//! another task's own figures (a row per split, a column per measure).

use egui::RichText;
use headroom_core::events::{EvaluationReport, Results};

/// A task's own figures, whatever the task.
pub fn show_results(ui: &mut egui::Ui, results: &Results) {
    ui.label(&results.about);
    egui::Grid::new("task results")
        .striped(true)
        .show(ui, |ui| {
            ui.label("");
            ui.label(RichText::new("examples").strong());
            for measure in &results.measures {
                ui.label(RichText::new(measure).strong());
            }
            ui.end_row();
            for row in &results.rows {
                ui.label(&row.label);
                ui.label(row.examples.to_string());
                for value in &row.values {
                    ui.label(format!("{value:.4}"));
                }
                ui.end_row();
            }
        });
}

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
