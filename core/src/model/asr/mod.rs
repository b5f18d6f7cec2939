//! The built-in speech recogniser: an encoder-decoder transformer on log-mel
//! frames, as ESPnet's hybrid CTC/attention systems and seed 002's are. Two convolutions
//! of stride 2 subsample the frames four times; a transformer encoder reads them; a CTC head
//! on the encoder and an attention decoder over the characters are trained jointly (the
//! loss is `ctc_weight` x CTC + the rest x the decoder's cross-entropy).
//!
//! The presets are the seed's sizes: `large` (d_model 256, 12 encoder and 6 decoder layers),
//! `medium` (192 / 8 / 4), `small` (128 / 6 / 3); `tiny` is for tests and a CPU's first
//! minutes. The seed gives no feed-forward width; ESPnet's LibriSpeech default (2048 for
//! `large`, 8 x d_model) is used, which makes `large` 27.1 M parameters on 80 mel bands with a
//! character set, against the seed's "about 24.7 M" (its count is approximate, and its
//! tokens are not said).

mod network;
pub(crate) mod transformer;

use serde::{Deserialize, Serialize};

pub use network::{AsrNetworks, Utterances};

/// The recogniser's sizes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AsrShape {
    pub d_model: usize,
    pub heads: usize,
    pub encoder_layers: usize,
    pub decoder_layers: usize,
    /// Width of each layer's feed-forward block.
    pub feed_forward: usize,
    /// Channels of the subsampling convolutions.
    pub conv_channels: usize,
}

impl AsrShape {
    /// d_model 256, 4 heads, 12 encoder and 6 decoder layers, feed-forward 2048: seed 002's
    /// recogniser, with ESPnet's feed-forward width.
    pub const LARGE: Self = Self {
        d_model: 256,
        heads: 4,
        encoder_layers: 12,
        decoder_layers: 6,
        feed_forward: 2048,
        conv_channels: 256,
    };
    /// 192 / 8 / 4: the seed's first cut.
    pub const MEDIUM: Self = Self {
        d_model: 192,
        heads: 4,
        encoder_layers: 8,
        decoder_layers: 4,
        feed_forward: 1536,
        conv_channels: 192,
    };
    /// 128 / 6 / 3: the seed's smallest.
    pub const SMALL: Self = Self {
        d_model: 128,
        heads: 4,
        encoder_layers: 6,
        decoder_layers: 3,
        feed_forward: 1024,
        conv_channels: 128,
    };
    /// A few hundred thousand parameters: tests, and training on a CPU in minutes.
    pub const TINY: Self = Self {
        d_model: 64,
        heads: 2,
        encoder_layers: 2,
        decoder_layers: 1,
        feed_forward: 256,
        conv_channels: 32,
    };

    /// The fewest frames (or bands) the two stride-2 convolutions (3 x 3, no padding) make
    /// one of.
    pub const MIN_SUBSAMPLED: usize = 7;

    /// Mel bands after the two stride-2 convolutions (3 x 3, no padding).
    pub fn subsampled(length: usize) -> usize {
        let once = |n: usize| n.saturating_sub(3) / 2 + 1;
        if length < Self::MIN_SUBSAMPLED {
            0
        } else {
            once(once(length))
        }
    }

    /// Trainable values, as PyTorch counts them, for `mels` input bands and `vocabulary`
    /// tokens.
    pub fn parameters(&self, mels: usize, vocabulary: usize) -> u64 {
        let (d, ff, c, v) = (
            self.d_model as u64,
            self.feed_forward as u64,
            self.conv_channels as u64,
            vocabulary as u64,
        );
        let linear = |i: u64, o: u64| i * o + o;
        let attention = 4 * linear(d, d);
        let norm = 2 * d;
        let feed_forward = linear(d, ff) + linear(ff, d);
        let encoder_layer = attention + feed_forward + 2 * norm;
        let decoder_layer = 2 * attention + feed_forward + 3 * norm;
        let subsampling =
            (9 * c + c) + (9 * c * c + c) + linear(c * Self::subsampled(mels) as u64, d);
        subsampling
            + self.encoder_layers as u64 * encoder_layer
            + norm // after the encoder
            + self.decoder_layers as u64 * decoder_layer
            + norm // after the decoder
            + linear(d, v) // CTC head
            + v * d // character embedding
            + linear(d, v) // decoder output
    }
}

/// Input frames per output frame of the encoder.
pub const SUBSAMPLING: usize = 4;

#[cfg(test)]
mod tests;
