//! Raw audio as a kind of training: the SaShiMi-style network of [`crate::model::sashimi`]
//! trained autoregressively on 8-bit levels of waveforms (seed 004's system), each example a
//! crop of `sample_len` samples, measured by its negative log-likelihood in bits per sample.
//! Its data is the built-in spoken digits (`headroom_datasets::waveform::digits`, SC09's
//! kind) or a user's folder of WAV and FLAC files ([`source`]), each split's clips end to
//! end cut into crops ([`data`]).
//!
//! A crop is one example: the planner moves the crops per micro-batch and the accumulation
//! as for any other task, and a step's memory grows with the crop's length.

mod data;
#[cfg(not(target_arch = "wasm32"))]
pub mod generate;
mod picture;
mod sampling;
mod source;
#[cfg(test)]
mod tests;

use burn::tensor::{Device, Int, Tensor, TensorData};
use headroom_datasets::waveform::{DigitsConfig, Quantizer};
use serde::{Deserialize, Serialize};

use crate::backend::BackendKind;
use crate::config::TrainConfig;
use crate::model::StepLoss;
use crate::model::sashimi::{LEVELS, Sashimi, SashimiShape};
use crate::model::{AnalyticStep, DefaultBatch, ModelInfo, ModelSpec, NamedConfig, PatchShape};
use crate::precision::Precision;
use crate::task::{Crop, StepContext, TrainingTask};
use crate::train::BuiltIn;

pub use data::WaveformData;
pub use source::WaveformFolder;

/// The network's presets by name: `seed` is seed 004's d_model 64, 8 layers, pool [4, 4]
/// (SaShiMi's SC09 model), `small` the CPU default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SashimiSize {
    Small,
    Seed,
}

impl SashimiSize {
    pub fn shape(self) -> SashimiShape {
        match self {
            SashimiSize::Small => SashimiShape::small(),
            SashimiSize::Seed => SashimiShape::seed(),
        }
    }
}

/// A SaShiMi run: the network's sizes, the crop, how samples become levels, and the data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SashimiConfig {
    pub shape: SashimiShape,
    /// Samples in one example: a multiple of the poolings' product
    /// ([`SashimiShape::length_multiple`]).
    pub sample_len: usize,
    pub quantizer: Quantizer,
    /// The built-in spoken digits, the data where no folder is given.
    pub digits: DigitsConfig,
    /// A user's folder of recordings instead of the built-in digits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub folder: Option<WaveformFolder>,
}

impl Default for SashimiConfig {
    fn default() -> Self {
        Self {
            shape: SashimiShape::small(),
            sample_len: DEFAULT_SAMPLE_LEN,
            quantizer: Quantizer::MuLaw,
            digits: DigitsConfig::default(),
            folder: None,
        }
    }
}

/// A second of audio at 16 kHz, SC09's clip and the seed's shortest `sample_len`.
pub const DEFAULT_SAMPLE_LEN: usize = 16_000;

impl NamedConfig for SashimiConfig {
    const NAME: &'static str = "sashimi";
}

impl SashimiConfig {
    /// The rate of the run's samples: its folder's, else the built-in digits'.
    pub fn sample_rate(&self) -> u32 {
        match &self.folder {
            Some(folder) => folder.sample_rate,
            None => self.digits.sample_rate,
        }
    }

    /// Refuses a crop the network cannot pool exactly, naming the nearest lengths it can.
    pub fn check_sample_len(&self) -> Result<(), String> {
        let multiple = self.shape.length_multiple();
        let len = self.sample_len;
        if len >= multiple && len.is_multiple_of(multiple) {
            return Ok(());
        }
        let below = len / multiple * multiple;
        let above = below + multiple;
        Err(format!(
            "a crop of {len} samples cannot be pooled by factors {:?}: its length must be a \
             multiple of {multiple} (the nearest are {}{above})",
            self.shape.pool,
            if below > 0 {
                format!("{below} and ")
            } else {
                String::new()
            },
        ))
    }
}

/// Levels as the network takes them, `[crops, sample_len]`, from crops of 8-bit levels laid
/// end to end.
pub(crate) fn levels_tensor(levels: &[u8], crops: usize, device: &Device) -> Tensor<2, Int> {
    let values: Vec<i64> = levels.iter().map(|&l| i64::from(l)).collect();
    let len = values.len() / crops.max(1);
    Tensor::from_data(TensorData::new(values, [crops, len]), device)
}

impl TrainingTask for SashimiConfig {
    type Networks = Sashimi;
    type Batch = Tensor<2, Int>;

    fn phases(&self) -> &'static [&'static str] {
        &["sashimi"]
    }

    fn cut_into_patches(&self) -> bool {
        false
    }

    /// f32 throughout: the network does not compute in half precision yet.
    fn mixed_precision(&self) -> bool {
        false
    }

    fn crop(&self) -> Option<Crop> {
        Some(Crop {
            len: self.sample_len,
            multiple: self.shape.length_multiple(),
        })
    }

    fn at_crop(&self, len: usize) -> Option<Self> {
        Some(Self {
            sample_len: len,
            ..self.clone()
        })
    }

    /// One crop of seed 004's size at 16,000 samples holds about 1.1 GB in a step: the
    /// planner's 16 would not fit the devices it plans for.
    fn calibration_examples(&self) -> Option<[usize; 2]> {
        Some([1, 2])
    }

    fn networks(&self, device: &Device) -> Sashimi {
        self.shape.init(device)
    }

    fn examples_in(&self, batch: &Tensor<2, Int>) -> usize {
        batch.dims()[0]
    }

    /// Random levels: a step's memory does not depend on them.
    fn measuring_batch(&self, examples: usize, device: &Device) -> Tensor<2, Int> {
        use rand::{RngCore, SeedableRng};
        let mut levels = vec![0u8; examples * self.sample_len];
        rand::rngs::SmallRng::seed_from_u64(examples as u64).fill_bytes(&mut levels);
        levels_tensor(&levels, examples, device)
    }

    /// Bits per sample, the field's measure, differentiated and reported: the validation
    /// and test figures are in the same unit.
    fn loss(&self, network: &Sashimi, _: usize, batch: Tensor<2, Int>, _: StepContext) -> StepLoss {
        let bits = network.nll(batch).div_scalar(std::f64::consts::LN_2);
        StepLoss {
            reported: bits.clone(),
            total: bits,
        }
    }

    fn parameters(&self) -> u64 {
        self.shape.parameters()
    }

    /// Per sample of a crop: at each resolution, what a residual pair keeps (the norm's
    /// output, the S4D layer's FFT buffers at twice the length, the feed-forward's widened
    /// activations), and at the head the logits and their log-softmax. A rough account for
    /// the plan's breakdown; calibration measures the real one.
    fn step_memory(&self, _: BackendKind, _: Precision, examples: usize) -> AnalyticStep {
        let shape = &self.shape;
        // Values kept per channel and position by one residual pair: about 14 for the S4D
        // block (its FFT's padded input, spectra and product among them), 3 + 2 x expand
        // for the feed-forward one.
        let pair = (17 + 2 * shape.expand) as f64;
        let (mut channels, mut positions) = (shape.d_model as f64, 1.0f64);
        let mut per_sample = 0.0;
        for level in 0..=shape.pool.len() {
            per_sample += shape.n_layers as f64 * pair * channels * positions;
            if let Some(&factor) = shape.pool.get(level) {
                positions /= factor as f64;
                channels *= shape.expand as f64;
            }
        }
        let per_sample = per_sample.ceil() as u64;
        // The logits and their log-softmax and gradient; or about 20 values per mixture
        // component, the mixture loss's intermediates.
        let head = match shape.mixtures {
            0 => 3 * LEVELS as u64,
            n => 20 * n as u64,
        };
        AnalyticStep {
            parameters: 4 * self.parameters(),
            activations: examples as u64 * self.sample_len as u64 * 4 * (per_sample + head),
            data: examples as u64 * self.sample_len as u64 * 8,
        }
    }
}

impl BuiltIn for SashimiConfig {
    fn info(&self) -> ModelInfo {
        ModelInfo {
            name: Self::NAME,
            summary: "SaShiMi-style autoregressive model of raw 8-bit audio (S4D layers in a \
                      pooling U-Net), on crops of the waveform, scored by NLL in bits per sample",
            parameters: self.parameters(),
            // One channel of samples, a crop long.
            input: PatchShape {
                mels: 1,
                frames: self.sample_len,
            },
            default_batch: self.default_batch(),
        }
    }

    fn default_batch(&self) -> DefaultBatch {
        DefaultBatch {
            spectrograms: 4,
            patches: 1,
        }
    }

    fn configure(&self, config: &mut TrainConfig) {
        config.micro_batch = 4;
        config.n_patches = 1;
        config.accumulation = 1;
        config.step_clips = None;
        config.model = ModelSpec::of(self);
    }
}
