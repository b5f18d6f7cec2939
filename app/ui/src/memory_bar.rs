//! A device-memory bar: segments filled left to right over the device's capacity, with the
//! budget drawn as a line across it, so "under the line" can be seen at a glance.

use egui::{self, Color32, CornerRadius, Rect, Sense, Stroke, StrokeKind, Vec2};

/// One part of the bar.
pub struct Segment {
    pub label: String,
    pub bytes: u64,
    pub color: Color32,
}

pub struct MemoryBar<'a> {
    /// What the bar spans: the device's memory, or the budget when the total is unknown.
    pub capacity: u64,
    pub budget: Option<u64>,
    pub segments: &'a [Segment],
    /// A mark for a high-water reading (the step's peak), drawn as a tick.
    pub peak: Option<u64>,
}

pub const BAR_HEIGHT: f32 = 22.0;

impl MemoryBar<'_> {
    pub fn show(&self, ui: &mut egui::Ui) -> egui::Response {
        let width = ui.available_width().max(120.0);
        let (rect, response) = ui.allocate_exact_size(Vec2::new(width, BAR_HEIGHT), Sense::hover());
        let painter = ui.painter_at(rect);
        let visuals = ui.visuals();
        painter.rect_filled(rect, CornerRadius::same(3), visuals.extreme_bg_color);
        let capacity = self.capacity.max(1) as f64;
        let x_of =
            |bytes: u64| rect.left() + (bytes as f64 / capacity).min(1.0) as f32 * rect.width();
        let mut start = 0u64;
        for segment in self.segments {
            let end = start.saturating_add(segment.bytes);
            let part = Rect::from_min_max(
                egui::pos2(x_of(start), rect.top()),
                egui::pos2(x_of(end), rect.bottom()),
            );
            painter.rect_filled(part, CornerRadius::ZERO, segment.color);
            start = end;
        }
        if let Some(peak) = self.peak {
            let x = x_of(peak);
            painter.line_segment(
                [egui::pos2(x, rect.top()), egui::pos2(x, rect.bottom())],
                Stroke::new(2.0, visuals.strong_text_color()),
            );
        }
        if let Some(budget) = self.budget {
            let x = x_of(budget);
            painter.line_segment(
                [
                    egui::pos2(x, rect.top() - 3.0),
                    egui::pos2(x, rect.bottom() + 3.0),
                ],
                Stroke::new(2.5, Color32::from_rgb(220, 60, 60)),
            );
        }
        painter.rect_stroke(
            rect,
            CornerRadius::same(3),
            Stroke::new(1.0, visuals.widgets.noninteractive.bg_stroke.color),
            StrokeKind::Inside,
        );
        response
    }
}

/// The colour of each part of a breakdown, fixed so that bars and legends agree.
pub fn palette(part: &str) -> Color32 {
    match part {
        "parameters" => Color32::from_rgb(86, 140, 200),
        "gradients" => Color32::from_rgb(110, 170, 220),
        "optimizer" => Color32::from_rgb(140, 110, 200),
        "activations" => Color32::from_rgb(230, 160, 60),
        "data" => Color32::from_rgb(120, 190, 120),
        "overhead" => Color32::from_rgb(160, 160, 160),
        "resident" => Color32::from_rgb(100, 100, 120),
        "allocated" => Color32::from_rgb(86, 140, 200),
        "peak" => Color32::from_rgb(230, 160, 60),
        "reserved" => Color32::from_rgb(170, 170, 190),
        "host" => Color32::from_rgb(120, 190, 120),
        _ => Color32::GRAY,
    }
}

/// A legend row: a swatch per segment with its size.
pub fn legend(ui: &mut egui::Ui, segments: &[Segment]) {
    ui.horizontal_wrapped(|ui| {
        for s in segments {
            let (rect, _) = ui.allocate_exact_size(Vec2::splat(10.0), Sense::hover());
            ui.painter()
                .rect_filled(rect, CornerRadius::same(2), s.color);
            ui.label(&s.label);
            ui.add_space(6.0);
        }
    });
}
