//! The default model against MODEL.md and against itself in every form of its layers.

use super::*;
use crate::backend::BackendKind;
use crate::model::{ModelConfig, flat_parameters};
use crate::precision::Precision;
use burn::tensor::FloatDType;
use burn::tensor::activation::relu;

/// Loss and every parameter's gradient of one step on `patches`, the layers computed in
/// `compute` precision.
fn loss_and_gradients(
    model: &VqAutoencoder,
    patches: Tensor<4>,
    compute: Option<FloatDType>,
) -> (f32, Vec<Vec<f32>>) {
    struct Collect<'a>(&'a burn::optim::GradientsParams, Vec<Vec<f32>>);
    impl burn::module::ModuleVisitor for Collect<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            let grad = self
                .0
                .get::<D>(param.id)
                .expect("every parameter has a gradient");
            self.1.push(
                grad.into_data()
                    .convert::<f32>()
                    .try_to_vec::<f32>()
                    .unwrap(),
            );
        }
    }
    let output = model.forward_in(patches.clone(), compute);
    // Scaled in half precision as training scales it (`Precision::loss_scale`), or the
    // first layer's f16 gradients underflow to zero.
    let scale = if compute.is_some() { 1024.0 } else { 1.0 };
    let loss = model.losses(patches, &output).total.mul_scalar(scale);
    let value = loss.clone().into_scalar::<f32>();
    let grads = burn::optim::GradientsParams::from_grads(loss.backward(), model);
    let mut collect = Collect(&grads, Vec::new());
    model.visit(&mut collect);
    (value, collect.1)
}

/// The CPU forms and kernels against burn's own convolutions: same loss, same gradient
/// for every parameter, on random patches and a random model, with and without
/// gradient checkpointing.
///
/// Compared as a whole gradient (its norm): the kernels' sums are split as rayon shares
/// them out, so a single value moves in its last bits from run to run, and one of parameter
/// 0's (1.57369e-6 against 1.57325e-6) came past 1e-4 of its largest in a fresh .ci/run
/// of 0c072db on a loaded machine.
#[test]
fn cpu_layers_match_the_plain_path() {
    layers_match_the_plain_path(BackendKind::Flex, None, Within::OfNorm(1e-4));
}

/// The same on wgpu (lavapipe in CI): the output-only layers of `gpu_layers` and the
/// quantizer's nearest-code kernel against burn's layers and the distance matrix.
///
/// Compared as a whole gradient (its norm), not value by value: the decoder's transposed
/// convolutions run forward as matrix products (`conv_gemm`), whose rounding differs from
/// burn's direct kernel, and a ReLU whose input lies within that rounding of zero passes
/// its gradient on one path and not on the other; each such flip moves every gradient
/// upstream of it. Measured 2026-12-07 on lavapipe: 1.1e-4 to 2.0e-4 of each encoder
/// parameter's gradient norm, about 1e-6 with burn's forward kept (the gradients' products
/// alone). Each form is checked value by value against burn's in `gpu_layers::tests`.
#[cfg(feature = "wgpu")]
#[test]
fn gpu_layers_match_the_plain_path() {
    let _alone = crate::wgpu_pool_alone();
    layers_match_the_plain_path(BackendKind::Wgpu, None, Within::OfNorm(1e-3));
}

/// How close each parameter's gradient must come to the plain path's.
#[derive(Debug, Clone, Copy)]
enum Within {
    /// Every value within this share of the gradient's largest value.
    OfLargest(f32),
    /// The difference's norm within this share of the gradient's norm.
    OfNorm(f32),
}

/// The output-only layers in mixed precision (f16 compute) against burn's layers in the
/// same precision; f16's 11-bit mantissa sets the tolerance.
#[cfg(feature = "wgpu")]
#[test]
fn gpu_layers_match_the_plain_path_in_half_precision() {
    let _alone = crate::wgpu_pool_alone();
    let device = BackendKind::Wgpu.device().unwrap();
    if !device.supports_dtype(burn::tensor::DType::F16) {
        eprintln!("this wgpu adapter has no f16: nothing to compare");
        return;
    }
    layers_match_the_plain_path(
        BackendKind::Wgpu,
        Some(FloatDType::F16),
        Within::OfLargest(2e-2),
    );
}

fn layers_match_the_plain_path(backend: BackendKind, compute: Option<FloatDType>, within: Within) {
    for checkpointing in [false, true] {
        let device = backend.training_device(None, checkpointing).unwrap();
        device.seed(7);
        let fast = VqAutoencoderConfig::default().init(&device);
        assert_eq!(fast.forms(), LayerForms::Auto);
        // Codes drawn near the latents, as training starts, so that the quantizer picks
        // many codes and every parameter gets a gradient.
        let x = Tensor::<4>::random([5, 1, 64, 64], Distribution::Normal(0.0, 1.0), &device);
        let latent = fast.encode(x.clone()).detach();
        // Near the latents, not on them: a code equal to its latent has no gradient.
        let from_latents = latent.permute([0, 2, 3, 1]).reshape([5 * 64, 64])
            + Tensor::random([5 * 64, 64], Distribution::Normal(0.0, 0.01), &device);
        let others = Tensor::random([512 - 5 * 64, 64], Distribution::Normal(0.0, 0.1), &device);
        let codes = Tensor::cat(vec![from_latents, others], 0);
        let fast = fast.set_codebook(codes);
        let plain = fast.clone().with_forms(LayerForms::Plain);
        let (fast_loss, fast_grads) = loss_and_gradients(&fast, x.clone(), compute);
        let (plain_loss, plain_grads) = loss_and_gradients(&plain, x, compute);
        let loss_tolerance = match within {
            Within::OfLargest(share) | Within::OfNorm(share) => share / 10.0,
        };
        assert!(
            (fast_loss - plain_loss).abs() <= loss_tolerance * plain_loss.abs(),
            "{fast_loss} against {plain_loss}"
        );
        assert_eq!(fast_grads.len(), plain_grads.len());
        for (i, (f, p)) in fast_grads.iter().zip(&plain_grads).enumerate() {
            let scale = p.iter().fold(0f32, |m, v| m.max(v.abs()));
            assert!(scale > 0.0, "parameter {i} has no gradient");
            match within {
                Within::OfLargest(share) => {
                    for (a, b) in f.iter().zip(p) {
                        assert!(
                            (a - b).abs() <= share * scale,
                            "parameter {i} (checkpointing {checkpointing}): {a} against {b}"
                        );
                    }
                }
                Within::OfNorm(share) => {
                    let norm = p.iter().map(|v| v * v).sum::<f32>().sqrt();
                    let off = f.iter().zip(p).map(|(a, b)| (a - b) * (a - b)).sum::<f32>();
                    assert!(
                        off.sqrt() <= share * norm,
                        "parameter {i} (checkpointing {checkpointing}): off by {:.2e} of its \
                         gradient's norm",
                        off.sqrt() / norm
                    );
                }
            }
        }
    }
}

#[test]
fn parameter_count_matches_pytorch() {
    let device = BackendKind::Flex.device().unwrap();
    let model = VqAutoencoderConfig::default().init(&device);
    assert_eq!(model.num_params(), 392_193);
    assert_eq!(flat_parameters(&model).len(), 392_193);
}

#[test]
fn every_stage_has_the_documented_shape() {
    let device = BackendKind::Flex.device().unwrap();
    let model = VqAutoencoderConfig::default().init(&device);
    let x = Tensor::<4>::random([3, 1, 64, 64], Distribution::Normal(0.0, 1.0), &device);
    let e1 = relu(model.enc1.forward(x.clone()));
    assert_eq!(e1.dims(), [3, 32, 32, 32]);
    let e2 = relu(model.enc2.forward(e1));
    assert_eq!(e2.dims(), [3, 64, 16, 16]);
    let e3 = relu(model.enc3.forward(e2));
    assert_eq!(e3.dims(), [3, 96, 8, 8]);
    let z = model.latent.forward(e3);
    assert_eq!(z.dims(), [3, 64, 8, 8]);
    let (q, codes) = model.quantize(&z);
    assert_eq!(q.dims(), [3, 64, 8, 8]);
    assert_eq!(codes.dims(), [3 * 64]);
    let d1 = relu(model.dec1.forward(q));
    assert_eq!(d1.dims(), [3, 96, 16, 16]);
    let d2 = relu(model.dec2.forward(d1));
    assert_eq!(d2.dims(), [3, 64, 32, 32]);
    let d3 = relu(model.dec3.forward(d2));
    assert_eq!(d3.dims(), [3, 32, 64, 64]);
    assert_eq!(model.out.forward(d3).dims(), [3, 1, 64, 64]);
    assert_eq!(model.patch_errors(x).dims(), [3]);
}

#[test]
fn quantizer_picks_the_nearest_code() {
    let device = BackendKind::Flex.device().unwrap();
    let model = VqAutoencoderConfig::default().init(&device);
    let latent = Tensor::<4>::random([2, 64, 8, 8], Distribution::Normal(0.0, 0.01), &device);
    let (quantized, codes) = model.quantize(&latent);
    let codebook: Vec<f32> = model
        .codebook
        .val()
        .into_data()
        .try_to_vec::<f32>()
        .unwrap();
    let z: Vec<f32> = latent
        .permute([0, 2, 3, 1])
        .into_data()
        .try_to_vec::<f32>()
        .unwrap();
    let codes: Vec<i64> = codes
        .into_data()
        .convert::<i64>()
        .try_to_vec::<i64>()
        .unwrap();
    let q: Vec<f32> = quantized
        .permute([0, 2, 3, 1])
        .into_data()
        .try_to_vec::<f32>()
        .unwrap();
    for (pos, &code) in codes.iter().enumerate() {
        let zpos = &z[pos * 64..(pos + 1) * 64];
        let dist = |c: usize| -> f32 {
            zpos.iter()
                .zip(&codebook[c * 64..(c + 1) * 64])
                .map(|(a, b)| (a - b).powi(2))
                .sum()
        };
        let best = (0..512)
            .min_by(|&a, &b| dist(a).total_cmp(&dist(b)))
            .unwrap();
        assert!(
            dist(code as usize) <= dist(best) * (1.0 + 1e-4) + 1e-9,
            "position {pos}"
        );
        assert_eq!(
            &q[pos * 64..(pos + 1) * 64],
            &codebook[code as usize * 64..(code as usize + 1) * 64]
        );
    }
}

#[test]
fn the_analytic_count_matches_the_built_model() {
    assert_eq!(VqAutoencoderConfig::default().parameter_count(), 392_193);
}

/// burn's layers keep each hidden activation twice; the output-only forms once; the
/// nearest-code kernel drops the distance matrix.
#[test]
fn the_forms_change_what_a_patch_keeps() {
    let model = VqAutoencoderConfig::default();
    let hidden_once =
        32 * 32 * 32 + 64 * 16 * 16 + 96 * 8 * 8 + 96 * 16 * 16 + 64 * 32 * 32 + 32 * 64 * 64;
    let plain = activation_floats_per_patch(&model, StepForms::Plain);
    let cube = StepForms::of(BackendKind::Wgpu, Precision::F32);
    assert_eq!(
        plain - activation_floats_per_patch(&model, cube),
        hidden_once
    );
    let flex =
        activation_floats_per_patch(&model, StepForms::of(BackendKind::Flex, Precision::F32));
    // flex's kernels, the first layer's included (its planes), keep each output once too.
    assert_eq!(plain - flex, hidden_once);
    assert_eq!(
        StepForms::of(BackendKind::Flex, Precision::F16),
        StepForms::Plain
    );
    assert_eq!(StepForms::of(BackendKind::Wgpu, Precision::F16), cube);
    let with = model.analytic_with(StepForms::Plain, 10);
    let without = model.analytic_with(cube, 10);
    assert_eq!(with.data - without.data, 10 * 64 * 512 * 4);
}
