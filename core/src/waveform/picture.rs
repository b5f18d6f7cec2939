//! What a sashimi run makes, drawn at every validation: a stretch of a validation clip and
//! a clip the network generates, one above the other, each as its waveform's envelope.

use crate::events::Picture;

/// Pixels of one waveform's row: its height, and the gap between rows.
const ROW: u32 = 96;
const GAP: u32 = 8;

/// The clips' waveforms (samples in [-1, 1]), a row each from the top, `width` columns:
/// each column dark from the lowest to the highest sample it spans, on white; a grey line
/// at zero.
pub fn waveforms(clips: &[&[f32]], width: u32) -> Picture {
    let rows = clips.len() as u32;
    let height = rows * ROW + rows.saturating_sub(1) * GAP;
    let mut pixels = vec![255u8; (width * height) as usize];
    let y_of = |top: u32, value: f32| {
        let value = if value.is_finite() {
            value.clamp(-1.0, 1.0)
        } else {
            0.0
        };
        top + ((1.0 - value) * 0.5 * (ROW - 1) as f32).round() as u32
    };
    for (row, clip) in clips.iter().enumerate() {
        let top = row as u32 * (ROW + GAP);
        let middle = y_of(top, 0.0);
        for x in 0..width {
            pixels[(middle * width + x) as usize] = 200;
        }
        if clip.is_empty() {
            continue;
        }
        for x in 0..width {
            let from = x as usize * clip.len() / width as usize;
            let to = ((x as usize + 1) * clip.len() / width as usize).max(from + 1);
            let span = &clip[from.min(clip.len() - 1)..to.min(clip.len())];
            let high = span.iter().copied().fold(f32::MIN, f32::max);
            let low = span.iter().copied().fold(f32::MAX, f32::min);
            for y in y_of(top, high)..=y_of(top, low) {
                pixels[(y * width + x) as usize] = 0;
            }
        }
    }
    Picture {
        width,
        height,
        pixels,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clip_is_drawn_between_its_lowest_and_highest_samples() {
        let loud = [1.0f32, -1.0, 1.0, -1.0];
        let silent = [0.0f32; 4];
        let picture = waveforms(&[&loud, &silent], 2);
        assert_eq!((picture.width, picture.height), (2, 2 * ROW + GAP));
        let dark = |row: u32| {
            (0..ROW)
                .filter(|y| picture.pixels[((row * (ROW + GAP) + y) * 2) as usize] == 0)
                .count()
        };
        assert_eq!(dark(0), ROW as usize, "the loud clip spans its row");
        assert_eq!(dark(1), 1, "silence is one line at zero");
    }
}
