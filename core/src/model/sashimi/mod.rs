//! A SaShiMi-style network (Goel et al. 2022, "It's Raw! Audio Generation with State-Space
//! Models"): an autoregressive model of raw audio quantised to 256 levels, as seed 004's
//! system trains it. Pre-norm residual blocks of an [`S4d`] layer and of a feed-forward
//! layer at each resolution of a pooling U-Net: the sequence is pooled by `pool` factors
//! (a reshape and a linear layer, the channels multiplied by `expand`), processed at the
//! coarsest resolution, then pooled up again with the skip of each resolution added; the
//! up-pooling shifts its output one pooled step late, so that no position sees a sample
//! at or after its own. An embedding of the levels in; out, a 256-way categorical head or
//! a discretized mixture of logistics ([`mixture`]), as seed 004's system trains.
//!
//! The network; `crate::waveform` trains it as the `sashimi` model.

pub mod mixture;
mod recurrent;
pub mod s4d;
#[cfg(test)]
mod tests;

use burn::module::Module;
use burn::nn::{Embedding, EmbeddingConfig, LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::tensor::activation::{gelu, log_softmax};
use burn::tensor::{Device, Int, Tensor};
use serde::{Deserialize, Serialize};

pub use recurrent::Stepper;
pub use s4d::S4d;

/// The quantisation levels of the samples (8 bits).
pub use headroom_datasets::waveform::LEVELS;

/// The level fed before the first sample: the middle one, silence in mu-law.
pub const START_LEVEL: i64 = (LEVELS / 2) as i64;

/// The network's sizes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SashimiShape {
    /// Channels at the finest resolution.
    pub d_model: usize,
    /// Residual pairs (an S4D block and a feed-forward block) at each resolution.
    pub n_layers: usize,
    /// Pooling factors, finest first.
    pub pool: Vec<usize>,
    /// Channels multiply by this at each pooling.
    pub expand: usize,
    /// S4D's state size (half as many complex modes).
    pub d_state: usize,
    /// Components of the discretized mixture of logistics head; 0 for the 256-way
    /// categorical head.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub mixtures: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl SashimiShape {
    /// Small enough to train in a minute on the CPU.
    pub fn small() -> Self {
        Self {
            d_model: 32,
            n_layers: 2,
            pool: vec![4, 4],
            expand: 2,
            d_state: 32,
            mixtures: 0,
        }
    }

    /// Seed 004's: d_model 64, 8 layers, pool [4, 4] (SaShiMi's SC09 configuration).
    pub fn seed() -> Self {
        Self {
            d_model: 64,
            n_layers: 8,
            pool: vec![4, 4],
            expand: 2,
            d_state: 64,
            mixtures: 0,
        }
    }

    /// Outputs of the head at each position.
    pub fn head_width(&self) -> usize {
        match self.mixtures {
            0 => LEVELS,
            n => mixture::width(n),
        }
    }

    /// A crop's length must be a multiple of this (every pooling divides it exactly).
    pub fn length_multiple(&self) -> usize {
        self.pool.iter().product()
    }

    /// Trainable values, as [`Sashimi`]'s modules hold them: what a plan counts without
    /// building the network.
    pub fn parameters(&self) -> u64 {
        let linear = |i: usize, o: usize| (i * o + o) as u64;
        let norm = |h: usize| 2 * h as u64;
        let modes = (self.d_state / 2).max(1);
        let blocks = |h: usize| {
            let s4 = norm(h) + (h * (2 + 4 * modes)) as u64 + linear(h, h);
            let feed_forward = norm(h) + linear(h, h * self.expand) + linear(h * self.expand, h);
            self.n_layers as u64 * (s4 + feed_forward)
        };
        let mut total = (LEVELS * self.d_model) as u64 + norm(self.d_model);
        total += linear(self.d_model, self.head_width()) + blocks(self.d_model);
        let mut h = self.d_model;
        for &factor in &self.pool {
            total += linear(h * factor, h * self.expand);
            h *= self.expand;
            total += linear(h, h / self.expand * factor);
            // Each resolution has one set of blocks: the coarsest the centre's, the others
            // an up stage's.
            total += blocks(h);
        }
        total
    }

    pub fn init(&self, device: &Device) -> Sashimi {
        let blocks = |channels: usize| -> Vec<Residual> {
            (0..self.n_layers)
                .flat_map(|_| {
                    [
                        Residual::s4(channels, self.d_state, device),
                        Residual::feed_forward(channels, self.expand, device),
                    ]
                })
                .collect()
        };
        let mut channels = self.d_model;
        let mut down = Vec::new();
        for &factor in &self.pool {
            down.push(DownPool::new(channels, self.expand, factor, device));
            channels *= self.expand;
        }
        let center = blocks(channels);
        let mut up = Vec::new();
        for &factor in self.pool.iter().rev() {
            let pool = UpPool::new(channels, self.expand, factor, device);
            channels /= self.expand;
            up.push(UpStage {
                pool,
                blocks: blocks(channels),
            });
        }
        Sashimi {
            embedding: EmbeddingConfig::new(LEVELS, self.d_model).init(device),
            down,
            center,
            up,
            norm: LayerNormConfig::new(self.d_model).init(device),
            head: LinearConfig::new(self.d_model, self.head_width()).init(device),
            mixtures: self.mixtures,
        }
    }
}

/// A pre-norm residual block: `x + f(norm(x))`, `f` an S4D layer with its activation and
/// output projection, or a feed-forward layer.
#[derive(Module, Debug)]
pub struct Residual {
    norm: LayerNorm,
    s4: Option<S4d>,
    inner: Option<Linear>,
    output: Linear,
}

impl Residual {
    fn s4(channels: usize, state: usize, device: &Device) -> Self {
        Self {
            norm: LayerNormConfig::new(channels).init(device),
            s4: Some(S4d::new(channels, state, device)),
            inner: None,
            output: LinearConfig::new(channels, channels).init(device),
        }
    }

    fn feed_forward(channels: usize, expand: usize, device: &Device) -> Self {
        Self {
            norm: LayerNormConfig::new(channels).init(device),
            s4: None,
            inner: Some(LinearConfig::new(channels, channels * expand).init(device)),
            output: LinearConfig::new(channels * expand, channels).init(device),
        }
    }

    /// `x`: `[batch, length, channels]`.
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let z = self.norm.forward(x.clone());
        let z = match (&self.s4, &self.inner) {
            (Some(s4), _) => s4.forward(z.swap_dims(1, 2)).swap_dims(1, 2),
            (None, Some(inner)) => inner.forward(z),
            (None, None) => z,
        };
        x + self.output.forward(gelu(z))
    }
}

/// Pools `factor` steps into one: `[b, l, h]` read as `[b, l / factor, h * factor]`, then
/// a linear layer to `h * expand` channels.
#[derive(Module, Debug)]
pub struct DownPool {
    factor: usize,
    linear: Linear,
}

impl DownPool {
    fn new(channels: usize, expand: usize, factor: usize, device: &Device) -> Self {
        Self {
            factor,
            linear: LinearConfig::new(channels * factor, channels * expand).init(device),
        }
    }

    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let [batch, length, channels] = x.dims();
        self.linear
            .forward(x.reshape([batch, length / self.factor, channels * self.factor]))
    }
}

/// The inverse: a linear layer to `factor` steps of `h / expand` channels each, shifted one
/// pooled step late (zeros first, the last pooled step dropped), so that the steps a pooled
/// step expands to see only what came before them.
#[derive(Module, Debug)]
pub struct UpPool {
    factor: usize,
    linear: Linear,
}

impl UpPool {
    fn new(channels: usize, expand: usize, factor: usize, device: &Device) -> Self {
        Self {
            factor,
            linear: LinearConfig::new(channels, channels / expand * factor).init(device),
        }
    }

    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let [batch, pooled, _] = x.dims();
        let y = self.linear.forward(x);
        let width = y.dims()[2];
        let shifted = Tensor::cat(
            vec![
                Tensor::zeros([batch, 1, width], &y.device()),
                y.slice([0..batch, 0..pooled - 1, 0..width]),
            ],
            1,
        );
        shifted.reshape([batch, pooled * self.factor, width / self.factor])
    }
}

/// An up-pooling and the blocks after it.
#[derive(Module, Debug)]
pub struct UpStage {
    pool: UpPool,
    blocks: Vec<Residual>,
}

#[derive(Module, Debug)]
pub struct Sashimi {
    embedding: Embedding,
    down: Vec<DownPool>,
    center: Vec<Residual>,
    up: Vec<UpStage>,
    norm: LayerNorm,
    head: Linear,
    /// As [`SashimiShape::mixtures`].
    mixtures: usize,
}

impl Sashimi {
    /// The head's outputs at each position, `[batch, length, head width]` (the logits of the
    /// next level, or its mixture's parameters), from the levels fed (`[batch, length]`; the first a start level, then the samples before each
    /// position's own).
    pub fn forward(&self, inputs: Tensor<2, Int>) -> Tensor<3> {
        let mut x = self.embedding.forward(inputs);
        let mut skips = vec![x.clone()];
        for pool in &self.down {
            x = pool.forward(x);
            skips.push(x.clone());
        }
        for block in &self.center {
            x = block.forward(x);
        }
        // As SaShiMi's reference (state-spaces/s4, `sashimi.py`, without `unet`): the
        // coarsest skip before pooling up, each finer one right after its up-pooling, and
        // around each stage's blocks the stage's input again.
        x = x + skips.pop().expect("one skip per pooling");
        for stage in &self.up {
            x = stage.pool.forward(x) + skips.pop().expect("one skip per resolution");
            let stage_input = x.clone();
            for block in &stage.blocks {
                x = block.forward(x);
            }
            x = x + stage_input;
        }
        self.head.forward(self.norm.forward(x))
    }

    /// The mean negative log-likelihood (nats per sample) of `levels` (`[batch, length]`):
    /// each sample predicted from the ones before it.
    pub fn nll(&self, levels: Tensor<2, Int>) -> Tensor<1> {
        let [batch, length] = levels.dims();
        let outputs = self.forward(shifted_inputs(levels.clone()));
        if self.mixtures > 0 {
            return mixture::log_likelihood(outputs, levels).mean().neg();
        }
        let log_probs = log_softmax(outputs, 2);
        let picked = log_probs.gather(2, levels.reshape([batch, length, 1]));
        picked.mean().neg()
    }

    /// Each row's probability of every level, `[rows, LEVELS]`, from the head's outputs at
    /// one position (`[rows, head width]`).
    pub fn level_probabilities(&self, outputs: Tensor<2>) -> Tensor<2> {
        if self.mixtures > 0 {
            return mixture::level_log_probs(outputs).exp();
        }
        burn::tensor::activation::softmax(outputs, 1)
    }
}

/// The levels fed for `levels`: the start level, then every level but the last.
pub fn shifted_inputs(levels: Tensor<2, Int>) -> Tensor<2, Int> {
    let [batch, length] = levels.dims();
    let start = Tensor::<2, Int>::full([batch, 1], START_LEVEL, &levels.device());
    Tensor::cat(vec![start, levels.slice([0..batch, 0..length - 1])], 1)
}
