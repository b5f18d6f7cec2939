//! A picture a run draws of what its networks make (a GAN's generated spectrograms): data
//! only, so that every front-end can show it and a run with an output folder writes it as
//! a PNG.

use serde::{Deserialize, Serialize};

/// Grey levels, row by row from the top, one byte a pixel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Picture {
    pub width: u32,
    pub height: u32,
    pub pixels: Vec<u8>,
}

impl Picture {
    /// The picture as a PNG file's bytes.
    pub fn png(&self) -> Result<Vec<u8>, png::EncodingError> {
        let mut bytes = Vec::new();
        let mut encoder = png::Encoder::new(&mut bytes, self.width, self.height);
        encoder.set_color(png::ColorType::Grayscale);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder.write_header()?;
        writer.write_image_data(&self.pixels)?;
        writer.finish()?;
        Ok(bytes)
    }
}

/// A picture drawn at a step, where it was written, and what it shows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PictureReport {
    pub step: u64,
    /// What the picture shows ("generated log-mel patches, a row per machine").
    pub about: String,
    /// The PNG file, where the run has an output folder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    pub picture: Picture,
}
