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
        if self.speech_reader() {
            self.recordings_row(ui);
        }
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

    /// Whether the chosen model reads speech recordings rather than machine sounds.
    pub(super) fn speech_reader(&self) -> bool {
        self.model == <headroom_core::speech::AsrConfig as headroom_core::model::NamedConfig>::NAME
    }

    /// The recogniser's recordings: a manifest (TSV or JSON lines of audio path and
    /// transcript) or a LibriSpeech-layout folder, or the generated corpus.
    fn recordings_row(&mut self, ui: &mut egui::Ui) {
        let idle = !self.session.is_running();
        ui.horizontal(|ui| {
            if ui
                .add_enabled(idle, egui::Button::new("Open manifest..."))
                .clicked()
                && let Some(file) = rfd::FileDialog::new()
                    .add_filter("manifest", &["tsv", "jsonl"])
                    .pick_file()
            {
                self.recordings = Some(file);
            }
            if ui
                .add_enabled(idle, egui::Button::new("Open LibriSpeech folder..."))
                .clicked()
                && let Some(folder) = rfd::FileDialog::new().pick_folder()
            {
                self.recordings = Some(folder);
            }
            if ui
                .add_enabled(
                    idle && self.recordings.is_some(),
                    egui::Button::new("Generated corpus"),
                )
                .clicked()
            {
                self.recordings = None;
            }
        });
        ui.label(match &self.recordings {
            Some(path) => format!(
                "Speech recordings: {} (every 10th held out for validation)",
                path.display()
            ),
            None => "Speech recordings: the generated corpus".to_string(),
        });
    }
}
