//! The default model through the engine's two traits: the step loss with its warm-up, the
//! codebook drawn from the encoder when the warm-up ends, and what the planner and the model
//! list read from its configuration.

use burn::module::Module;
use burn::tensor::{Device, Tensor, TensorData};
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

use super::sizes::{StepForms, parameter_count};
use super::{VqAutoencoder, VqAutoencoderConfig};
use crate::backend::BackendKind;
use crate::model::layers::LayerForms;
use crate::model::{AnalyticStep, ModelConfig, PatchShape, Patches, SpectrogramModel, StepLoss};
use crate::precision::Precision;

/// How much of the train split's latents the codebook is drawn from: four latent vectors per
/// code, so that each code starts at a distinct position.
const LATENTS_PER_CODE: usize = 4;

impl SpectrogramModel for VqAutoencoder {
    type Config = VqAutoencoderConfig;

    /// MODEL.md's three-term loss through the quantizer; in the warm-up, the reconstruction
    /// through encoder and decoder alone, which gives the codebook informative latents to
    /// start from.
    fn loss(&self, batch: Patches, precision: Precision, warming_up: bool) -> StepLoss {
        let patches = batch.values;
        let compute = precision.compute_dtype();
        if warming_up {
            let latent = self.encode_in(patches.clone(), compute);
            let reconstruction = self.decode_in(latent, compute);
            let loss = (reconstruction - patches).square().mean();
            return StepLoss {
                total: loss.clone(),
                reported: loss,
            };
        }
        let output = self.forward_in(patches.clone(), compute);
        let loss = self.losses(patches, &output);
        StepLoss {
            total: loss.total,
            reported: loss.reconstruction,
        }
    }

    fn patch_scores(&self, batch: Patches) -> Tensor<1> {
        self.patch_errors(batch.values)
    }

    /// Draws the initial codebook from the encoder's outputs on train patches (see
    /// [`VqAutoencoder::set_codebook`]): one latent vector per code, from distinct positions.
    async fn end_warm_up(
        self,
        train: &mut dyn Iterator<Item = Patches>,
        seed: u64,
    ) -> Result<Self, crate::readback::ReadbackError> {
        let [codes, channels] = self.codebook.val().dims();
        let device = self.codebook.val().device();
        let encoder = self.valid();
        let mut latents: Vec<f32> = Vec::new();
        for batch in train {
            let z = encoder.encode(batch.values).permute([0, 2, 3, 1]);
            latents.extend(crate::readback::floats(z).await?);
            if latents.len() >= LATENTS_PER_CODE * codes * channels {
                break;
            }
        }
        let positions = latents.len() / channels;
        if positions == 0 {
            return Ok(self);
        }
        let mut order: Vec<usize> = (0..positions).collect();
        order.shuffle(&mut ChaCha8Rng::seed_from_u64(seed ^ 0xc0de_b00c));
        let mut chosen = Vec::with_capacity(codes * channels);
        for i in 0..codes {
            let p = order[i % positions];
            chosen.extend_from_slice(&latents[p * channels..(p + 1) * channels]);
        }
        let codebook = Tensor::from_data(TensorData::new(chosen, [codes, channels]), &device);
        Ok(self.set_codebook(codebook))
    }
}

impl ModelConfig for VqAutoencoderConfig {
    type Model = VqAutoencoder;
    const NAME: &'static str = "vq-patch-ae";
    const SUMMARY: &'static str =
        "the default: a VQ autoencoder of 64 x 64 log-mel patches (shared/MODEL.md)";

    fn init(&self, device: &Device) -> VqAutoencoder {
        VqAutoencoderConfig::init(self, device)
    }

    fn input(&self) -> PatchShape {
        PatchShape {
            mels: 64,
            frames: 64,
        }
    }

    fn parameter_count(&self) -> u64 {
        parameter_count(self)
    }

    fn analytic_step(
        &self,
        backend: BackendKind,
        precision: Precision,
        patches: usize,
    ) -> AnalyticStep {
        let forms = match self.forms {
            LayerForms::Auto => StepForms::of(backend, precision),
            LayerForms::Plain => StepForms::Plain,
        };
        self.analytic_with(forms, patches)
    }

    /// A tenth of the run: started cold, this model's codes collapse and the commitment term
    /// diverges (measured in PyTorch and here; docs/TRAINING.md).
    fn default_warm_up_steps(&self, total_steps: u64) -> u64 {
        total_steps / 10
    }
}
