//! The run's events in words, newest last, under a header that folds them away.

use crate::session::Session;

/// `open`: whether the log starts unfolded.
pub fn show(ui: &mut egui::Ui, session: &Session, open: bool) {
    egui::CollapsingHeader::new("Events")
        .default_open(open)
        .show(ui, |ui| {
            egui::ScrollArea::vertical()
                .max_height(160.0)
                .stick_to_bottom(true)
                .show(ui, |ui| {
                    for line in &session.log {
                        ui.small(line);
                    }
                });
        });
}
