//! What egui painted, read back as texts with their places: the page's tests (and a user's
//! script) check the screen by this rather than by pixels.

/// A text egui painted this frame, and where (in points from the canvas' corner).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Painted {
    pub text: String,
    pub x: f32,
    pub y: f32,
    pub w: f32,
    pub h: f32,
}

/// Every text painted so far this frame, as it will be on the screen: what the page shows,
/// read back by its tests (and a user's script) without guessing at pixels.
pub fn painted_texts(ctx: &egui::Context) -> Vec<Painted> {
    let mut layers: Vec<egui::LayerId> = ctx.memory(|m| m.layer_ids().collect());
    // The central panel's layer, before it is in the order (the first frame).
    if !layers.contains(&egui::LayerId::background()) {
        layers.insert(0, egui::LayerId::background());
    }
    let mut found = Vec::new();
    ctx.graphics(|graphics| {
        for layer in &layers {
            if let Some(list) = graphics.get(*layer) {
                for clipped in list.all_entries() {
                    collect(&clipped.shape, clipped.clip_rect, &mut found);
                }
            }
        }
    });
    found
}

fn collect(shape: &egui::Shape, clip: egui::Rect, found: &mut Vec<Painted>) {
    match shape {
        egui::Shape::Text(text) => {
            let rect = text.visual_bounding_rect();
            if !text.galley.text().trim().is_empty() && clip.intersects(rect) {
                found.push(Painted {
                    text: text.galley.text().to_string(),
                    x: rect.min.x,
                    y: rect.min.y,
                    w: rect.width(),
                    h: rect.height(),
                });
            }
        }
        egui::Shape::Vec(shapes) => {
            for shape in shapes {
                collect(shape, clip, found);
            }
        }
        _ => {}
    }
}
