//! `id-classifier`: a small MobileNetV2-style CNN that tells the machine ID from a 64 x 64
//! log-mel patch, trained with cross-entropy; a clip's anomaly score is the mean over its
//! patches of log((1 - p) / p), p the probability of the clip's own ID (the DCASE 2021
//! Task 2 baseline's second method). A sound the network cannot place as its own machine's
//! is anomalous.
//!
//! Layers (MobileNetV2's, narrowed for 64 x 64 inputs): a 3 x 3 stride-2 stem to 16
//! channels, inverted residual blocks (1 x 1 expansion, 3 x 3 depthwise, 1 x 1 projection,
//! each with batch normalisation, ReLU6 after the first two, a residual where the shape
//! stays) of (expansion, channels, stride) (1, 16, 1), (4, 24, 2), (4, 24, 1), (4, 32, 2),
//! (4, 32, 1), (4, 64, 2), a 1 x 1 convolution to 128 channels, global average pooling and a
//! linear layer to one logit per machine.

use burn::module::Module;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::{BatchNorm, BatchNormConfig, Linear, LinearConfig, PaddingConfig2d};
use burn::tensor::activation::{log_softmax, relu6};
use burn::tensor::{Device, Tensor};
use serde::{Deserialize, Serialize};

use super::{
    AnalyticStep, Machine, ModelConfig, ModelError, PatchShape, Patches, SpectrogramModel, StepLoss,
};
use crate::backend::BackendKind;
use crate::precision::Precision;

/// The inverted residual blocks: (expansion, output channels, stride).
const BLOCKS: [(usize, usize, usize); 6] = [
    (1, 16, 1),
    (4, 24, 2),
    (4, 24, 1),
    (4, 32, 2),
    (4, 32, 1),
    (4, 64, 2),
];
const STEM: usize = 16;
const HEAD: usize = 128;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IdClassifierConfig {
    /// The machines it tells apart (set from the dataset's train split).
    pub machines: Vec<Machine>,
}

impl Default for IdClassifierConfig {
    /// Four IDs of one machine type, as the built-in dataset has; a run sets the dataset's.
    fn default() -> Self {
        Self {
            machines: (0..4)
                .map(|id| Machine {
                    machine_type: "synthetic".into(),
                    machine_id: id,
                })
                .collect(),
        }
    }
}

/// A convolution with batch normalisation, and ReLU6 where the block has one.
#[derive(Module, Debug)]
pub struct ConvNorm {
    conv: Conv2d,
    norm: BatchNorm,
    relu: bool,
}

impl ConvNorm {
    fn new(
        [inputs, outputs]: [usize; 2],
        kernel: usize,
        stride: usize,
        groups: usize,
        relu: bool,
        device: &Device,
    ) -> Self {
        let pad = kernel / 2;
        Self {
            conv: Conv2dConfig::new([inputs, outputs], [kernel, kernel])
                .with_stride([stride, stride])
                .with_padding(PaddingConfig2d::Explicit(pad, pad, pad, pad))
                .with_groups(groups)
                .with_bias(false)
                .init(device),
            norm: BatchNormConfig::new(outputs).init(device),
            relu,
        }
    }

    fn forward(&self, x: Tensor<4>) -> Tensor<4> {
        let y = self.convolve(x);
        // On flex one host op with the ReLU6: burn's copied each activation to a
        // channel-first layout for its statistics.
        #[cfg(feature = "flex")]
        {
            use super::cpu_kernels::batch_norm::{self, After};
            if batch_norm::trains_on_host(&self.norm, &y) {
                let after = if self.relu {
                    After::Relu6
                } else {
                    After::Nothing
                };
                return batch_norm::train(&self.norm, y, after);
            }
        }
        let y = self.norm.forward(y);
        if !self.relu {
            return y;
        }
        // On flex one op that keeps only its output (burn's clamp runs as masked fills
        // there: a fifth of this network's step).
        #[cfg(feature = "flex")]
        if super::cpu_kernels::take(&y) {
            return super::cpu_kernels::relu6::relu6(y);
        }
        relu6(y)
    }

    /// The convolution; on flex in f32 by Headroom's host kernels: a depthwise layer by
    /// [`depthwise`](super::cpu_kernels::depthwise), the others unfolded (burn's grouped
    /// convolution and its gradients were about 45% of a step there, its 1 x 1 ones' weight
    /// gradients GEMMs of few rows). On a cubecl device a layer of one group as matrix
    /// products ([`gpu_layers`](super::gpu_layers)), where burn's direct kernels computed its
    /// weight gradient with the batch as channels; the depthwise layers stay burn's.
    fn convolve(&self, x: Tensor<4>) -> Tensor<4> {
        #[cfg(feature = "flex")]
        if super::cpu_kernels::take(&x) {
            use super::cpu_kernels::{self, Activation, depthwise::depthwise};
            let conv = &self.conv;
            let [out, per_group, _, _] = conv.weight.dims();
            let stride = conv.stride[0];
            let padding = match conv.padding {
                PaddingConfig2d::Explicit(t, l, b, r) if t == l && t == b && t == r => Some(t),
                _ => None,
            };
            if let Some(padding) = padding.filter(|_| conv.stride[0] == conv.stride[1]) {
                if conv.groups == out && per_group == 1 {
                    return depthwise(x, conv.weight.val(), stride, padding);
                }
                if conv.groups == 1 {
                    let bias = Tensor::zeros([out], &x.device());
                    return cpu_kernels::conv(
                        x,
                        conv.weight.val(),
                        bias,
                        stride,
                        padding,
                        Activation::None,
                    );
                }
            }
        }
        #[cfg(any(feature = "wgpu", feature = "cuda"))]
        if super::gpu_layers::runs_on(&x.device()) {
            let conv = &self.conv;
            let [out, per_group, _, _] = conv.weight.dims();
            if headroom_shaders::conv_gemm::suits(conv.groups, per_group * conv.groups, out) {
                // The layer has no bias: the op's is zeros, its gradient made and dropped.
                let bias = Tensor::zeros([out], &x.device());
                let options = super::layers::conv_options(conv);
                return super::gpu_layers::conv(x, conv.weight.val(), bias, options, false);
            }
        }
        self.conv.forward(x)
    }

    fn parameters([inputs, outputs]: [usize; 2], kernel: usize, groups: usize) -> u64 {
        (inputs / groups * outputs * kernel * kernel + 2 * outputs) as u64
    }
}

/// MobileNetV2's inverted residual block.
#[derive(Module, Debug)]
pub struct InvertedResidual {
    expand: Option<ConvNorm>,
    depthwise: ConvNorm,
    project: ConvNorm,
    residual: bool,
}

impl InvertedResidual {
    fn new(
        inputs: usize,
        (expansion, outputs, stride): (usize, usize, usize),
        device: &Device,
    ) -> Self {
        let hidden = inputs * expansion;
        Self {
            expand: (expansion != 1)
                .then(|| ConvNorm::new([inputs, hidden], 1, 1, 1, true, device)),
            depthwise: ConvNorm::new([hidden, hidden], 3, stride, hidden, true, device),
            project: ConvNorm::new([hidden, outputs], 1, 1, 1, false, device),
            residual: stride == 1 && inputs == outputs,
        }
    }

    fn forward(&self, x: Tensor<4>) -> Tensor<4> {
        let h = match &self.expand {
            Some(expand) => expand.forward(x.clone()),
            None => x.clone(),
        };
        let y = self.project.forward(self.depthwise.forward(h));
        if self.residual { y + x } else { y }
    }

    fn parameters(inputs: usize, (expansion, outputs, _): (usize, usize, usize)) -> u64 {
        let hidden = inputs * expansion;
        let expand = if expansion != 1 {
            ConvNorm::parameters([inputs, hidden], 1, 1)
        } else {
            0
        };
        expand
            + ConvNorm::parameters([hidden, hidden], 3, hidden)
            + ConvNorm::parameters([hidden, outputs], 1, 1)
    }
}

#[derive(Module, Debug)]
pub struct IdClassifier {
    stem: ConvNorm,
    blocks: Vec<InvertedResidual>,
    head: ConvNorm,
    classify: Linear,
}

impl IdClassifier {
    /// One logit per machine, `[n, machines]`.
    fn logits(&self, x: Tensor<4>) -> Tensor<2> {
        let mut h = self.stem.forward(x);
        for block in &self.blocks {
            h = block.forward(h);
        }
        let h = self.head.forward(h);
        let [n, c, _, _] = h.dims();
        let pooled = h.mean_dim(3).mean_dim(2).reshape([n, c]);
        self.classify.forward(pooled)
    }

    /// The log-probability of each patch's own machine, `[n]`.
    fn own_log_probability(&self, batch: Patches) -> Tensor<1> {
        let n = batch.len();
        let log_p = log_softmax(self.logits(batch.values), 1);
        log_p.gather(1, batch.classes.reshape([n, 1])).reshape([n])
    }
}

impl SpectrogramModel for IdClassifier {
    type Config = IdClassifierConfig;

    /// Cross-entropy of the machine IDs.
    fn loss(&self, batch: Patches, _precision: Precision, _warming_up: bool) -> StepLoss {
        let loss = self.own_log_probability(batch).mean().neg();
        StepLoss {
            total: loss.clone(),
            reported: loss,
        }
    }

    /// log((1 - p) / p) of the patch's own machine, p kept below 1 so that a certain
    /// prediction scores finitely.
    fn patch_scores(&self, batch: Patches) -> Tensor<1> {
        let log_p = self.own_log_probability(batch);
        let p = log_p.clone().exp().clamp_max(1.0 - 1e-6);
        p.neg().add_scalar(1.0).log() - log_p
    }
}

impl ModelConfig for IdClassifierConfig {
    type Model = IdClassifier;
    const NAME: &'static str = "id-classifier";
    const SUMMARY: &'static str =
        "a MobileNetV2-style CNN that tells the machine ID; anomalous is what it cannot place";

    fn init(&self, device: &Device) -> IdClassifier {
        let mut inputs = STEM;
        let blocks = BLOCKS
            .iter()
            .map(|&block| {
                let b = InvertedResidual::new(inputs, block, device);
                inputs = block.1;
                b
            })
            .collect();
        IdClassifier {
            stem: ConvNorm::new([1, STEM], 3, 2, 1, true, device),
            blocks,
            head: ConvNorm::new([inputs, HEAD], 1, 1, 1, true, device),
            classify: LinearConfig::new(HEAD, self.machines.len().max(1)).init(device),
        }
    }

    fn input(&self) -> PatchShape {
        PatchShape::SQUARE_64
    }

    fn parameter_count(&self) -> u64 {
        let mut inputs = STEM;
        let mut total = ConvNorm::parameters([1, STEM], 3, 1);
        for block in BLOCKS {
            total += InvertedResidual::parameters(inputs, block);
            inputs = block.1;
        }
        let classes = self.machines.len().max(1);
        total + ConvNorm::parameters([inputs, HEAD], 1, 1) + (HEAD * classes + classes) as u64
    }

    fn analytic_step(&self, _: BackendKind, _: Precision, patches: usize) -> AnalyticStep {
        // Per patch, each layer's convolution output, its normalised copy and (where there
        // is one) the ReLU6 output, at the layer's resolution.
        let mut side = 32u64;
        let mut floats = 3 * STEM as u64 * side * side;
        let mut inputs = STEM as u64;
        for (expansion, outputs, stride) in BLOCKS {
            let hidden = inputs * expansion as u64;
            if expansion != 1 {
                floats += 3 * hidden * side * side;
            }
            side /= stride as u64;
            floats += 3 * hidden * side * side + 2 * outputs as u64 * side * side;
            inputs = outputs as u64;
        }
        floats += 3 * HEAD as u64 * side * side;
        AnalyticStep {
            parameters: 4 * self.parameter_count(),
            activations: 4 * patches as u64 * floats,
            data: 4 * patches as u64 * 64 * 64,
        }
    }

    /// Learns the train split's machines, and refuses a dataset where some machine type has
    /// a single ID: there would be nothing to tell apart, and every score would be the same.
    fn for_machines(mut self, machines: &[Machine]) -> Result<Self, ModelError> {
        let mut per_type: std::collections::BTreeMap<&str, usize> = Default::default();
        for m in machines {
            *per_type.entry(m.machine_type.as_str()).or_default() += 1;
        }
        let alone: Vec<&str> = per_type
            .iter()
            .filter(|(_, ids)| **ids < 2)
            .map(|(t, _)| *t)
            .collect();
        if machines.is_empty() || !alone.is_empty() {
            return Err(ModelError::OneId {
                model: Self::NAME,
                alone: if alone.is_empty() {
                    "the dataset".to_string()
                } else {
                    alone.join(", ")
                },
            });
        }
        self.machines = machines.to_vec();
        Ok(self)
    }

    fn classes(&self) -> usize {
        self.machines.len().max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::{Distribution, TensorData};

    /// The layer (on flex Headroom's convolution, batch norm and ReLU6) is burn's: the
    /// same outputs and the same gradients, over inputs on both sides of 0 and 6.
    #[test]
    fn the_layers_relu6_is_burns() {
        let device = BackendKind::Flex.device().unwrap().autodiff();
        device.seed(5);
        let mut layer = ConvNorm::new([3, 4], 3, 1, 1, true, &device);
        // Scaled by 4 after normalising, so that the values pass 6 as well as 0.
        layer.norm.gamma = burn::module::Param::from_tensor(Tensor::full([4], 4.0, &device));
        let x: Tensor<4> = Tensor::random([2, 3, 8, 8], Distribution::Normal(0.0, 1.0), &device);
        let pass = |layers: bool| {
            let y = if layers {
                layer.forward(x.clone())
            } else {
                relu6(layer.norm.forward(layer.conv.forward(x.clone())))
            };
            let grads = (y.clone() * y.clone()).sum().backward();
            let dw = layer.conv.weight.grad(&grads).unwrap();
            let flat = |data: TensorData| data.convert::<f32>().as_slice::<f32>().unwrap().to_vec();
            (flat(y.into_data()), flat(dw.into_data()))
        };
        let (ours, our_dw) = pass(true);
        let (burns, burn_dw) = pass(false);
        assert!(ours.contains(&0.0) && ours.iter().any(|&v| (v - 6.0).abs() < 1e-5));
        assert!(ours.iter().any(|&v| v > 0.0 && v < 6.0));
        let apart = crate::model::largest_difference(&ours, &burns);
        assert!(apart <= 1e-5, "outputs {apart} apart");
        // Relative: the weight gradients here are in the hundreds, summed in another order.
        let scale = burn_dw.iter().fold(1.0f32, |m, v| m.max(v.abs()));
        let apart = crate::model::largest_difference(&our_dw, &burn_dw);
        assert!(
            apart <= 1e-6 * scale,
            "weight gradients {apart} apart (largest {scale})"
        );
    }

    /// On a cubecl device (lavapipe in the tests) a layer of one group runs as matrix
    /// products: its output and its input's and weight's gradients are burn's convolution's;
    /// a depthwise layer is burn's own.
    #[cfg(feature = "wgpu")]
    #[test]
    fn the_layers_products_on_wgpu_are_burns_convolution() {
        let device = BackendKind::Wgpu.device().unwrap().autodiff();
        device.seed(7);
        for (channels, kernel, stride, groups) in [
            ([16, 24], 1, 1, 1),
            ([8, 16], 3, 2, 1),
            ([16, 16], 3, 1, 16),
        ] {
            let layer = ConvNorm::new(channels, kernel, stride, groups, false, &device);
            let normal = Distribution::Normal(0.0, 1.0);
            let x: Tensor<4> = Tensor::random([3, channels[0], 9, 7], normal, &device);
            let shape = layer.conv.forward(x.clone()).dims();
            let probe: Tensor<4> = Tensor::random(shape, normal, &device);
            let pass = |ours: bool| {
                let x = x.clone().require_grad();
                let y = if ours {
                    layer.convolve(x.clone())
                } else {
                    layer.conv.forward(x.clone())
                };
                let grads = (y.clone() * probe.clone()).sum().backward();
                let flat = |data: TensorData| data.convert::<f32>().try_to_vec::<f32>().unwrap();
                [
                    flat(y.into_data()),
                    flat(x.grad(&grads).unwrap().into_data()),
                    flat(layer.conv.weight.grad(&grads).unwrap().into_data()),
                ]
            };
            let (ours, burns) = (pass(true), pass(false));
            for (what, (a, b)) in ["output", "input's gradient", "weight's gradient"]
                .iter()
                .zip(ours.iter().zip(&burns))
            {
                let scale = b.iter().fold(1.0f32, |m, v| m.max(v.abs()));
                let apart = crate::model::largest_difference(a, b);
                assert!(
                    apart <= 1e-5 * scale,
                    "{channels:?} x {kernel}, groups {groups}: {what} {apart} apart (largest {scale})"
                );
            }
        }
    }

    #[test]
    fn the_analytic_count_matches_the_built_model() {
        let device = BackendKind::Flex.device().unwrap();
        let config = IdClassifierConfig::default();
        // burn also counts BatchNorm's running means and variances: two per channel of
        // each normalised layer (stem 16, blocks 32 + 152 + 216 + 224 + 288 + 320, head 128).
        let running = 2 * (16 + 32 + 152 + 216 + 224 + 288 + 320 + 128);
        assert_eq!(
            config.init(&device).num_params() as u64,
            config.parameter_count() + running
        );
    }

    #[test]
    fn a_dataset_with_one_id_per_machine_type_is_refused_with_the_reason() {
        let machine = |t: &str, id| Machine {
            machine_type: t.into(),
            machine_id: id,
        };
        let error = IdClassifierConfig::default()
            .for_machines(&[machine("fan", 0), machine("pump", 0), machine("pump", 2)])
            .unwrap_err()
            .to_string();
        assert!(error.contains("fan has only one ID"), "{error}");
        let two = [machine("fan", 0), machine("fan", 4)];
        assert_eq!(
            IdClassifierConfig::default()
                .for_machines(&two)
                .unwrap()
                .classes(),
            2
        );
    }

    /// The score is log((1 - p) / p) of the own class: high where the network places the
    /// patch elsewhere.
    #[test]
    fn a_patch_placed_as_another_machine_scores_higher() {
        let device = BackendKind::Flex.device().unwrap();
        let model = IdClassifierConfig::default().init(&device);
        let values = Tensor::<4>::random([2, 1, 64, 64], Distribution::Normal(0.0, 1.0), &device);
        let logits = model.logits(values.clone());
        let best: Vec<i64> = logits
            .clone()
            .argmax(1)
            .into_data()
            .convert::<i64>()
            .try_to_vec::<i64>()
            .unwrap();
        let worst: Vec<i64> = logits
            .argmin(1)
            .into_data()
            .convert::<i64>()
            .try_to_vec::<i64>()
            .unwrap();
        let scores = |classes: Vec<i64>| -> Vec<f32> {
            let batch = Patches {
                values: values.clone(),
                classes: Tensor::from_data(TensorData::new(classes, [2]), &device),
            };
            model
                .patch_scores(batch)
                .into_data()
                .try_to_vec::<f32>()
                .unwrap()
        };
        let (placed, misplaced) = (scores(best), scores(worst));
        for i in 0..2 {
            assert!(misplaced[i] > placed[i], "{misplaced:?} against {placed:?}");
        }
    }
}
