//! `dcase-ae`: the DCASE 2020 Task 2 baseline autoencoder (Koizumi et al., the challenge's
//! `keras_model.py`), the field's reference point for unsupervised machine-sound detection.
//!
//! Input: 5 consecutive frames of a 128-mel log-mel spectrogram (n_fft 1024, hop 512), 640
//! values. Dense 128 + BatchNorm + ReLU four times, Dense 8 + BatchNorm + ReLU (the
//! bottleneck), Dense 128 + BatchNorm + ReLU four times, Dense 640. Loss: MSE of the
//! reconstruction; a clip's anomaly score is the mean reconstruction error over its frame
//! stacks. The baseline trained 100 epochs with batch 512 and Adam at lr 1e-3.
//!
//! 267,928 parameters as PyTorch counts them (Keras reports 269,992: it adds BatchNorm's
//! running means and variances, which are state, not parameters).

use burn::module::Module;
use burn::nn::{BatchNorm, BatchNormConfig, Linear, LinearConfig};
use burn::tensor::activation::relu;
use burn::tensor::{Device, Tensor};
use serde::{Deserialize, Serialize};

use super::{
    AnalyticStep, DefaultBatch, ModelConfig, PatchShape, Patches, SpectrogramModel, StepLoss,
};
use crate::backend::BackendKind;
use crate::precision::Precision;

/// The baseline's shape; the defaults are the challenge's.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DcaseAeConfig {
    /// Mel bands per frame.
    pub mels: usize,
    /// Consecutive frames per input vector.
    pub frames: usize,
    /// Width of the hidden layers.
    pub hidden: usize,
    /// Width of the bottleneck.
    pub bottleneck: usize,
}

impl Default for DcaseAeConfig {
    fn default() -> Self {
        Self {
            mels: 128,
            frames: 5,
            hidden: 128,
            bottleneck: 8,
        }
    }
}

/// A dense layer followed by batch normalisation and a ReLU, as the baseline stacks them.
#[derive(Module, Debug)]
pub struct DenseBlock {
    dense: Linear,
    norm: BatchNorm,
}

impl DenseBlock {
    fn new(inputs: usize, outputs: usize, device: &Device) -> Self {
        Self {
            dense: LinearConfig::new(inputs, outputs).init(device),
            norm: BatchNormConfig::new(outputs).init(device),
        }
    }

    fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        // On flex in training the dense layer's rows split over the threads and the batch
        // norm with its ReLU as one host op (burn's swapped batch and features for its
        // statistics, a copy of each activation each way).
        #[cfg(feature = "flex")]
        {
            use super::cpu_kernels::{batch_norm, linear};
            if let Some(bias) = &self.dense.bias
                && batch_norm::trains_on_host(&self.norm, &x)
            {
                let y = linear::linear(x, self.dense.weight.val(), bias.val(), false);
                return batch_norm::train(&self.norm, y, batch_norm::After::Relu);
            }
        }
        relu(self.norm.forward(self.dense.forward(x)))
    }
}

#[derive(Module, Debug)]
pub struct DcaseAe {
    encoder: Vec<DenseBlock>,
    decoder: Vec<DenseBlock>,
    output: Linear,
}

impl DcaseAe {
    /// The reconstruction of each input vector, `[n, mels x frames]`, and the vectors
    /// themselves.
    fn reconstruct(&self, patches: Tensor<4>) -> (Tensor<2>, Tensor<2>) {
        let [n, _, mels, frames] = patches.dims();
        let x = patches.reshape([n, mels * frames]);
        let mut h = x.clone();
        for block in self.encoder.iter().chain(&self.decoder) {
            h = block.forward(h);
        }
        (self.output_layer(h), x)
    }

    /// The last dense layer; on flex the host linear layer, its rows split over the threads.
    fn output_layer(&self, h: Tensor<2>) -> Tensor<2> {
        #[cfg(feature = "flex")]
        if let Some(bias) = &self.output.bias
            && super::cpu_kernels::take(&h)
        {
            return super::cpu_kernels::linear::linear(
                h,
                self.output.weight.val(),
                bias.val(),
                false,
            );
        }
        self.output.forward(h)
    }
}

impl SpectrogramModel for DcaseAe {
    type Config = DcaseAeConfig;

    fn loss(&self, batch: Patches, _precision: Precision, _warming_up: bool) -> StepLoss {
        let (reconstruction, x) = self.reconstruct(batch.values);
        let mse = (reconstruction - x).square().mean();
        StepLoss {
            total: mse.clone(),
            reported: mse,
        }
    }

    fn patch_scores(&self, batch: Patches) -> Tensor<1> {
        let (reconstruction, x) = self.reconstruct(batch.values);
        let n = x.dims()[0];
        (reconstruction - x).square().mean_dim(1).reshape([n])
    }
}

impl ModelConfig for DcaseAeConfig {
    type Model = DcaseAe;
    const NAME: &'static str = "dcase-ae";
    const SUMMARY: &'static str =
        "the DCASE 2020 Task 2 baseline: a dense autoencoder of 5-frame stacks";

    fn init(&self, device: &Device) -> DcaseAe {
        let inputs = self.mels * self.frames;
        let h = self.hidden;
        let encoder = vec![
            DenseBlock::new(inputs, h, device),
            DenseBlock::new(h, h, device),
            DenseBlock::new(h, h, device),
            DenseBlock::new(h, h, device),
            DenseBlock::new(h, self.bottleneck, device),
        ];
        let decoder = vec![
            DenseBlock::new(self.bottleneck, h, device),
            DenseBlock::new(h, h, device),
            DenseBlock::new(h, h, device),
            DenseBlock::new(h, h, device),
        ];
        DcaseAe {
            encoder,
            decoder,
            output: LinearConfig::new(h, inputs).init(device),
        }
    }

    fn input(&self) -> PatchShape {
        PatchShape {
            mels: self.mels,
            frames: self.frames,
        }
    }

    /// Stacks 8 frames apart: 32 of them span most of a 10-second clip.
    fn training_stride(&self) -> usize {
        8
    }

    /// Every frame stack, as the baseline scores a clip.
    fn scoring_stride(&self) -> usize {
        1
    }

    fn parameter_count(&self) -> u64 {
        let dense = |i: usize, o: usize| (i * o + o) as u64;
        let norm = |o: usize| 2 * o as u64;
        let (inputs, h, b) = (self.mels * self.frames, self.hidden, self.bottleneck);
        dense(inputs, h)
            + 3 * dense(h, h)
            + dense(h, b)
            + dense(b, h)
            + 3 * dense(h, h)
            + dense(h, inputs)
            + 8 * norm(h)
            + norm(b)
    }

    /// The baseline's batch of 512 frame stacks: 32 from each of 16 clips.
    fn default_batch(&self) -> DefaultBatch {
        DefaultBatch {
            spectrograms: 16,
            patches: 32,
        }
    }

    fn analytic_step(
        &self,
        _backend: BackendKind,
        _precision: Precision,
        patches: usize,
    ) -> AnalyticStep {
        let inputs = (self.mels * self.frames) as u64;
        let (h, b) = (self.hidden as u64, self.bottleneck as u64);
        // Per vector, autodiff keeps each dense output, its normalised copy and the ReLU's
        // output (8 hidden layers and the bottleneck), the reconstruction and its error.
        let per_patch = 3 * (8 * h + b) + 2 * inputs;
        AnalyticStep {
            parameters: self.parameter_count() * 4,
            activations: patches as u64 * per_patch * 4,
            data: patches as u64 * inputs * 4,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::BackendKind;
    use burn::tensor::Distribution;

    #[test]
    fn parameter_count_matches_pytorch() {
        let device = BackendKind::Flex.device().unwrap();
        let config = DcaseAeConfig::default();
        let model = config.init(&device);
        assert_eq!(config.parameter_count(), 267_928);
        // burn counts BatchNorm's running means and variances too, as Keras does.
        assert_eq!(model.num_params() as u64, 269_992);
    }

    #[test]
    fn a_patch_is_scored_by_its_reconstruction_error() {
        let device = BackendKind::Flex.device().unwrap();
        let model = DcaseAeConfig::default().init(&device);
        let values = Tensor::<4>::random([6, 1, 128, 5], Distribution::Normal(0.0, 1.0), &device);
        let batch = Patches::unlabelled(values);
        let scores = model.patch_scores(batch.clone());
        assert_eq!(scores.dims(), [6]);
        let mean_score = scores.mean().into_scalar::<f32>();
        let loss = model
            .loss(batch, Precision::F32, false)
            .total
            .into_scalar::<f32>();
        assert!(
            (mean_score - loss).abs() <= 1e-5 * loss.abs(),
            "the loss is the mean of the patches' errors: {mean_score} against {loss}"
        );
    }
}
