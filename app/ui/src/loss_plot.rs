//! The loss curves as both front-ends draw them: the train loss per step (and each further
//! phase's, for a task of several), the validation losses, and a line at each step redone
//! after running out of memory; on a log axis when the losses span more than a decade, with
//! ticks far enough apart to label each.

use std::ops::RangeInclusive;

use egui::Color32;
use egui_plot::{GridInput, GridMark, HoverPosition};

use crate::session::Session;

/// Train-loss curve colour.
const TRAIN_COLOR: Color32 = Color32::from_rgb(70, 140, 230);
/// Validation losses: points and the line through them, apart from the train curve.
const VALIDATION_COLOR: Color32 = Color32::from_rgb(240, 130, 30);

/// Draws the session's loss curves, `height` points tall.
pub fn show(ui: &mut egui::Ui, session: &Session, height: f32) {
    let mut losses = LossPlot::new(&session.loss, &session.validation);
    // Drawn with a few points a pixel, however many steps (crate::thin).
    let max = crate::thin::budget(ui.available_width());
    losses.train = crate::thin::thin(&losses.train, max);
    let phases: Vec<(&str, Vec<[f64; 2]>)> = session
        .phase_losses
        .iter()
        .map(|(name, points)| {
            (
                name.as_str(),
                crate::thin::thin(&losses.plotted(points), max),
            )
        })
        .collect();
    let log_scale = losses.log_scale;
    let plot = egui_plot::Plot::new("loss")
        .height(height)
        .legend(egui_plot::Legend::default())
        .x_axis_label("step")
        .y_axis_min_width(40.0)
        .label_formatter(move |hover| Some(hover_label(hover, log_scale)));
    let plot = if log_scale {
        plot.y_axis_label("loss (log scale)")
            .y_grid_spacer(log_marks)
            .y_axis_formatter(log_tick_label)
    } else {
        plot.y_axis_label("loss")
            .y_grid_spacer(linear_marks)
            .y_axis_formatter(linear_tick_label)
    };
    plot.show(ui, |plot| {
        plot.line(egui_plot::Line::new("train loss", losses.train).color(TRAIN_COLOR));
        for (name, points) in phases {
            plot.line(egui_plot::Line::new(format!("{name} loss"), points));
        }
        plot.line(
            egui_plot::Line::new("validation loss", losses.validation.clone())
                .color(VALIDATION_COLOR),
        );
        // One validation per epoch: a line alone shows nothing until there are two.
        plot.points(
            egui_plot::Points::new("validation loss", losses.validation)
                .color(VALIDATION_COLOR)
                .radius(4.0)
                .filled(true),
        );
        for (step, from, to) in &session.recoveries {
            plot.vline(egui_plot::VLine::new(
                format!("out of memory: {from} -> {to}"),
                *step as f64,
            ));
        }
    });
}

/// Losses spanning more than this ratio (largest over smallest) are plotted on a log scale.
pub const LOG_SCALE_SPAN: f64 = 10.0;

/// Pixels between labelled ticks of the loss axis, at least.
const TICK_SPACING_PX: f64 = 24.0;

/// egui_plot's default smallest grid spacing in pixels: `GridInput::base_step_size` is one
/// pixel's worth of value times this.
const GRID_SPACING_MIN_PX: f64 = 8.0;

/// The loss curves as the plot draws them: y is the loss, or log10 of the loss on a log
/// scale. Points that cannot be drawn (not finite) are left out.
#[derive(Debug, Clone, PartialEq)]
pub struct LossPlot {
    pub log_scale: bool,
    pub train: Vec<[f64; 2]>,
    pub validation: Vec<[f64; 2]>,
}

impl LossPlot {
    /// From (step, loss) pairs of the train and the validation losses.
    pub fn new(train: &[[f64; 2]], validation: &[[f64; 2]]) -> Self {
        let log_scale = wants_log_scale(train.iter().chain(validation).map(|p| p[1]));
        let mut plot = Self {
            log_scale,
            train: Vec::new(),
            validation: Vec::new(),
        };
        plot.train = plot.plotted(train);
        plot.validation = plot.plotted(validation);
        plot
    }

    /// (step, loss) points as this plot draws them, those that cannot be drawn left out.
    pub fn plotted(&self, points: &[[f64; 2]]) -> Vec<[f64; 2]> {
        points
            .iter()
            .filter(|p| p[0].is_finite() && p[1].is_finite())
            .map(|&[step, loss]| [step, if self.log_scale { loss.log10() } else { loss }])
            .collect()
    }
}

/// Whether losses span more than about a decade (and are all positive): a linear axis then
/// squashes all but the first steps into a flat line, a log axis shows them.
pub fn wants_log_scale(losses: impl IntoIterator<Item = f64>) -> bool {
    let (mut min, mut max) = (f64::INFINITY, 0.0f64);
    for loss in losses.into_iter().filter(|l| l.is_finite()) {
        if loss <= 0.0 {
            return false;
        }
        min = min.min(loss);
        max = max.max(loss);
    }
    min.is_finite() && max / min > LOG_SCALE_SPAN
}

/// The smallest of 1, 2 or 5 times a power of ten that is at least `raw`.
fn nice_step(raw: f64) -> f64 {
    let power = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0]
        .into_iter()
        .map(|m| m * power)
        .find(|&step| step >= raw * (1.0 - 1e-9))
        .unwrap_or(10.0 * power)
}

/// Marks at every multiple of `step` within `bounds`, all alike (all labelled).
fn marks_every(step: f64, (lo, hi): (f64, f64)) -> Vec<GridMark> {
    if !(step > 0.0 && step.is_finite() && lo.is_finite() && hi.is_finite()) {
        return Vec::new();
    }
    // A bound on a tick (up to rounding) keeps its tick.
    let (first, last) = (
        (lo / step - 1e-9).ceil() as i64,
        (hi / step + 1e-9).floor() as i64,
    );
    if last < first || last - first > 1_000 {
        return Vec::new();
    }
    (first..=last)
        .map(|i| GridMark {
            value: i as f64 * step,
            step_size: step,
        })
        .collect()
}

/// Ticks of a linear loss axis: 1, 2 or 5 times a power of ten, far enough apart to label
/// each.
pub fn linear_marks(input: GridInput) -> Vec<GridMark> {
    let per_px = input.base_step_size / GRID_SPACING_MIN_PX;
    if !(per_px > 0.0 && per_px.is_finite()) {
        return Vec::new();
    }
    marks_every(nice_step(per_px * TICK_SPACING_PX), input.bounds)
}

/// Ticks of a log loss axis (values are log10 of the loss): every decade, with 2 and 5
/// between where a decade is tall enough, every few decades where it is short.
pub fn log_marks(input: GridInput) -> Vec<GridMark> {
    let per_px = input.base_step_size / GRID_SPACING_MIN_PX;
    if !(per_px > 0.0 && per_px.is_finite()) {
        return Vec::new();
    }
    let px_per_decade = 1.0 / per_px;
    let every = nice_step(TICK_SPACING_PX / px_per_decade).max(1.0).round();
    let mut marks = marks_every(every, input.bounds);
    // 2 and 5 are 0.3 and 0.4 decades from their neighbours.
    let gap = 2f64.log10();
    if px_per_decade * gap >= TICK_SPACING_PX {
        let (lo, hi) = input.bounds;
        for decade in (lo.floor() as i64)..=(hi.ceil() as i64) {
            for factor in [2f64, 5.0] {
                let value = decade as f64 + factor.log10();
                if (lo..=hi).contains(&value) {
                    marks.push(GridMark {
                        value,
                        step_size: gap,
                    });
                }
            }
        }
        marks.sort_by(|a, b| a.value.total_cmp(&b.value));
    }
    marks
}

/// A log-axis tick's label: the loss it stands for.
pub fn log_tick_label(mark: GridMark, _range: &RangeInclusive<f64>) -> String {
    format_loss(10f64.powf(mark.value))
}

/// A linear-axis tick's label, with as many decimals as its step needs.
pub fn linear_tick_label(mark: GridMark, _range: &RangeInclusive<f64>) -> String {
    let decimals = (-mark.step_size.log10()).ceil().max(0.0) as usize;
    // -0.0 and rounding noise around zero read as 0.
    let value = if mark.value.abs() < mark.step_size * 1e-6 {
        0.0
    } else {
        mark.value
    };
    format!("{value:.decimals$}")
}

/// A loss in a few characters: three significant digits without trailing zeros ("0.25",
/// "1500"), powers of ten below 0.001 and from 100000 up ("2e-5", "1e6").
pub fn format_loss(loss: f64) -> String {
    if !(loss.is_finite() && loss > 0.0) {
        return format!("{loss}");
    }
    let trim = |text: String| -> String {
        if text.contains('.') {
            text.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            text
        }
    };
    let mut exponent = loss.log10().floor() as i32;
    if (-3..5).contains(&exponent) {
        let decimals = (2 - exponent).max(0) as usize;
        return trim(format!("{loss:.decimals$}"));
    }
    let mut mantissa = loss / 10f64.powi(exponent);
    if (mantissa * 100.0).round() >= 1000.0 {
        mantissa /= 10.0;
        exponent += 1;
    }
    format!("{}e{exponent}", trim(format!("{mantissa:.2}")))
}

/// What hovering the loss plot says: the step and the loss, as a loss even on a log scale.
fn hover_label(hover: &HoverPosition<'_>, log_scale: bool) -> String {
    let loss = |y: f64| format_loss(if log_scale { 10f64.powf(y) } else { y });
    match hover {
        HoverPosition::NearDataPoint {
            plot_name,
            position,
            ..
        } => format!("{plot_name}\nstep {:.0}: {}", position.x, loss(position.y)),
        HoverPosition::Elsewhere { position } => {
            format!("step {:.0}, loss {}", position.x, loss(position.y))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(value: f64, step_size: f64) -> GridMark {
        GridMark { value, step_size }
    }

    #[test]
    fn losses_spanning_decades_are_plotted_on_a_log_scale() {
        // A typical run: a large first loss, then a long tail near 0.05.
        assert!(wants_log_scale([120.0, 3.0, 0.4, 0.05]));
        assert!(wants_log_scale([1.0, 0.09]));
        // Within a decade, and anything with a loss that has no logarithm, stay linear.
        assert!(!wants_log_scale([0.9, 0.5, 0.12]));
        assert!(!wants_log_scale([100.0, 0.0, 0.01]));
        assert!(!wants_log_scale([]));
        assert!(!wants_log_scale([f64::NAN, 5.0, 1.0]));
    }

    #[test]
    fn the_plot_holds_the_validation_points_on_the_same_scale() {
        let train = [[1.0, 100.0], [2.0, 10.0], [3.0, 1.0], [4.0, f64::NAN]];
        let validation = [[2.0, 8.0], [4.0, 0.5]];
        let plot = LossPlot::new(&train, &validation);
        assert!(plot.log_scale);
        assert_eq!(plot.train, vec![[1.0, 2.0], [2.0, 1.0], [3.0, 0.0]]);
        assert_eq!(plot.validation.len(), 2);
        assert!((plot.validation[0][1] - 8f64.log10()).abs() < 1e-12);
        assert!((plot.validation[1][1] - 0.5f64.log10()).abs() < 1e-12);

        let linear = LossPlot::new(&[[1.0, 0.9], [2.0, 0.5]], &[[2.0, 0.6]]);
        assert!(!linear.log_scale);
        assert_eq!(linear.validation, vec![[2.0, 0.6]]);
    }

    #[test]
    fn log_ticks_read_as_losses() {
        let label = |value: f64| log_tick_label(mark(value, 1.0), &(0.0..=1.0));
        assert_eq!(label(0.0), "1");
        assert_eq!(label(1.0), "10");
        assert_eq!(label(3.0), "1000");
        assert_eq!(label(-1.0), "0.1");
        assert_eq!(label(-2.0), "0.01");
        assert_eq!(label(-3.0), "0.001");
        assert_eq!(label(-4.0), "1e-4");
        assert_eq!(label(6.0), "1e6");
        assert_eq!(label(2f64.log10() - 1.0), "0.2");
        assert_eq!(label(5f64.log10() + 1.0), "50");
        assert_eq!(format_loss(0.1234), "0.123");
        assert_eq!(format_loss(0.00002), "2e-5");
    }

    #[test]
    fn linear_ticks_have_the_decimals_their_step_needs() {
        let range = 0.0..=1.0;
        assert_eq!(linear_tick_label(mark(0.4, 0.2), &range), "0.4");
        assert_eq!(linear_tick_label(mark(1.0, 0.2), &range), "1.0");
        assert_eq!(linear_tick_label(mark(0.05, 0.05), &range), "0.05");
        assert_eq!(linear_tick_label(mark(-1e-17, 0.05), &range), "0.00");
        assert_eq!(linear_tick_label(mark(20.0, 10.0), &range), "20");
    }

    #[test]
    fn a_short_plot_gets_several_labelled_ticks() {
        // 0.4 to 1.4 over 130 pixels: the case that showed only "1".
        let per_px = 1.0 / 130.0;
        let input = || GridInput {
            bounds: (0.4, 1.4),
            base_step_size: per_px * GRID_SPACING_MIN_PX,
        };
        let marks = linear_marks(input());
        let values: Vec<String> = marks
            .iter()
            .map(|m| linear_tick_label(*m, &(0.4..=1.4)))
            .collect();
        assert_eq!(values, ["0.4", "0.6", "0.8", "1.0", "1.2", "1.4"]);
        assert!(
            marks
                .iter()
                .all(|m| m.step_size / per_px >= TICK_SPACING_PX)
        );

        // The labelled log ticks between two powers of ten over 130 pixels.
        let log_labels = |low: f64, high: f64| -> Vec<String> {
            log_marks(GridInput {
                bounds: (low, high),
                base_step_size: (high - low) / 130.0 * GRID_SPACING_MIN_PX,
            })
            .iter()
            .map(|m| log_tick_label(*m, &(low..=high)))
            .collect()
        };
        // Four decades (100 down to 0.01): every decade, labelled.
        assert_eq!(log_labels(-2.0, 2.0), ["0.01", "0.1", "1", "10", "100"]);
        // One decade: 2 and 5 between.
        assert_eq!(log_labels(-1.0, 0.0), ["0.1", "0.2", "0.5", "1"]);
    }
}
