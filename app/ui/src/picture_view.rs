//! The picture a run draws of what its networks make (a GAN's generated spectrograms per
//! class), as both front-ends show it: uploaded to the GPU once per new picture.

use headroom_core::events::PictureReport;

/// The picture on screen, and the step it was drawn at.
#[derive(Default)]
pub struct PictureView {
    texture: Option<(u64, egui::TextureHandle)>,
}

impl std::fmt::Debug for PictureView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PictureView")
            .field("step", &self.texture.as_ref().map(|(step, _)| step))
            .finish()
    }
}

impl PictureView {
    /// Draws `report`, scaled up to fill at most `max_width` points while staying sharp.
    pub fn show(&mut self, ui: &mut egui::Ui, report: &PictureReport, max_width: f32) {
        let picture = &report.picture;
        let size = [picture.width as usize, picture.height as usize];
        if picture.pixels.len() != size[0] * size[1] {
            return;
        }
        let texture = match &self.texture {
            Some((step, texture)) if *step == report.step => texture.clone(),
            _ => {
                let image = egui::ColorImage::from_gray(size, &picture.pixels);
                let texture =
                    ui.ctx()
                        .load_texture("run picture", image, egui::TextureOptions::NEAREST);
                self.texture = Some((report.step, texture.clone()));
                texture
            }
        };
        ui.label(format!("Step {}: {}", report.step, report.about));
        let scale = (max_width / picture.width.max(1) as f32)
            .clamp(1.0, 4.0)
            .floor();
        let shown = egui::vec2(picture.width as f32, picture.height as f32) * scale;
        ui.image((texture.id(), shown));
        if let Some(path) = &report.path {
            ui.label(egui::RichText::new(path).weak());
        }
    }
}
