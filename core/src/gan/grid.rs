//! The GAN's picture: a row per class, a real patch of the class first, then generated ones
//! from the same held-out noise at every validation, so that successive pictures show the
//! generator learning. Low mel bands at the bottom, as spectrograms are drawn; grey levels
//! over a fixed range of the standardised log-mel (-3 to 3), so pictures compare across
//! steps.

use crate::events::Picture;

/// Generated patches per class in the picture.
pub const SAMPLES: usize = 6;
/// Pixels between patches.
const GAP: usize = 2;

/// A grid of `rows` rows of patches (`mels x frames` values each, band by band; `None` a
/// blank cell).
pub fn draw(rows: &[Vec<Option<&[f32]>>], mels: usize, frames: usize) -> Picture {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let width = columns * (frames + GAP) + GAP;
    let height = rows.len() * (mels + GAP) + GAP;
    let mut pixels = vec![255u8; width * height];
    for (r, row) in rows.iter().enumerate() {
        for (c, cell) in row.iter().enumerate() {
            let Some(patch) = cell else { continue };
            let (top, left) = (GAP + r * (mels + GAP), GAP + c * (frames + GAP));
            for band in 0..mels {
                // Band 0 (the lowest) on the cell's bottom line.
                let y = top + mels - 1 - band;
                for frame in 0..frames {
                    let v = patch.get(band * frames + frame).copied().unwrap_or(0.0);
                    let level = ((v + 3.0) / 6.0).clamp(0.0, 1.0);
                    pixels[y * width + left + frame] = (level * 255.0).round() as u8;
                }
            }
        }
    }
    Picture {
        width: width as u32,
        height: height as u32,
        pixels,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_patch_is_drawn_low_bands_at_the_bottom_and_written_as_png() {
        // Two bands of three frames: the low band at -3 (black), the high one at 3 (white).
        let patch = [-3.0, -3.0, -3.0, 3.0, 3.0, 3.0];
        let picture = draw(&[vec![Some(&patch[..]), None]], 2, 3);
        assert_eq!((picture.width, picture.height), (12, 6));
        let at = |x: usize, y: usize| picture.pixels[y * 12 + x];
        // The cell's top line (y 2) is the high band, its bottom (y 3) the low one.
        assert_eq!((at(2, 2), at(4, 2)), (255, 255));
        assert_eq!((at(2, 3), at(4, 3)), (0, 0));
        // Gaps and the blank cell stay white.
        assert_eq!((at(0, 0), at(7, 3)), (255, 255));
        let bytes = picture.png().unwrap();
        assert_eq!(&bytes[1..4], b"PNG");
        let decoder = png::Decoder::new(std::io::Cursor::new(bytes));
        let mut reader = decoder.read_info().unwrap();
        let mut back = vec![0; reader.output_buffer_size().unwrap()];
        reader.next_frame(&mut back).unwrap();
        assert_eq!(back, picture.pixels);
    }
}
