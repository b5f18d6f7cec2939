//! The output-only layers' matrix products (`headroom_shaders::conv_gemm`) against burn's
//! own convolution and activation on wgpu (lavapipe in CI): output, and the input's,
//! weight's and bias's gradients, at odd shapes, strides, paddings and dilations, in chunks
//! of the size a layer's activations set and of one or a few samples.

use super::*;
use crate::backend::BackendKind;
use burn::tensor::activation::{leaky_relu, relu};
use burn::tensor::module::{conv_transpose2d, conv2d};
use burn::tensor::{Distribution, TensorData};

fn values<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.into_data().convert::<f32>().try_to_vec::<f32>().unwrap()
}

fn assert_close(ours: &[f32], theirs: &[f32], what: &str) {
    assert_eq!(ours.len(), theirs.len(), "{what}: lengths");
    let scale = theirs.iter().fold(0f32, |m, v| m.max(v.abs()));
    assert!(scale > 0.0, "{what}: all zero, nothing compared");
    for (i, (a, b)) in ours.iter().zip(theirs).enumerate() {
        assert!(
            (a - b).abs() <= 1e-5 * scale.max(1.0),
            "{what}: value {i}: {a} against burn's {b}"
        );
    }
}

/// burn's activation after its layer.
fn activate(y: Tensor<4>, activation: Activation) -> Tensor<4> {
    match activation {
        Activation::None => y,
        Activation::Relu => relu(y),
        Activation::Leaky(slope) => leaky_relu(y, slope.into()),
    }
}

/// Output and gradients (input's where `input_grad`, weight's, bias's) of `sum(y * probe)`
/// through the output-only layer (`ours`) or burn's layer then the activation.
fn run(
    layer: &Layer,
    x: &Tensor<4>,
    weight: &Tensor<4>,
    bias: &Tensor<1>,
    activation: Activation,
    input_grad: bool,
    ours: bool,
) -> Vec<Vec<f32>> {
    let x = if input_grad {
        x.clone().require_grad()
    } else {
        x.clone()
    };
    let (weight, bias) = (weight.clone().require_grad(), bias.clone().require_grad());
    let relu_after = activation == Activation::Relu;
    let y = match (layer, ours, activation) {
        (Layer::Conv(o), true, Activation::Leaky(slope)) => {
            conv_leaky(x.clone(), weight.clone(), bias.clone(), o.clone(), slope)
        }
        (Layer::Conv(o), true, _) => conv(
            x.clone(),
            weight.clone(),
            bias.clone(),
            o.clone(),
            relu_after,
        ),
        (Layer::Transpose(o), true, _) => conv_transpose(
            x.clone(),
            weight.clone(),
            bias.clone(),
            o.clone(),
            relu_after,
        ),
        (Layer::Conv(o), false, _) => activate(
            conv2d(x.clone(), weight.clone(), Some(bias.clone()), o.clone()),
            activation,
        ),
        (Layer::Transpose(o), false, _) => activate(
            conv_transpose2d(x.clone(), weight.clone(), Some(bias.clone()), o.clone()),
            activation,
        ),
    };
    let probe = Tensor::<4>::random(y.shape(), Distribution::Normal(0.0, 1.0), &y.device());
    let grads = (y.clone() * probe).sum().backward();
    let mut out = vec![values(y.inner())];
    if input_grad {
        out.push(values(x.grad(&grads).expect("the input's gradient")));
    }
    out.push(values(weight.grad(&grads).expect("the weight's gradient")));
    out.push(values(bias.grad(&grads).expect("the bias's gradient")));
    out
}

fn check(layer: Layer, x_shape: [usize; 4], w_shape: [usize; 4], chunk_bytes: usize) {
    let device = BackendKind::Wgpu.training_device(None, false).unwrap();
    let bias_len = match layer {
        Layer::Conv(_) => w_shape[0],
        Layer::Transpose(_) => w_shape[1],
    };
    let mut activations = vec![
        (Activation::Relu, true),
        (Activation::None, true),
        (Activation::Relu, false),
    ];
    // The GAN's discriminator: a convolution with a leaky ReLU.
    if matches!(layer, Layer::Conv(_)) {
        activations.push((Activation::Leaky(0.2), true));
    }
    for (activation, input_grad) in activations {
        device.seed(11);
        let x = Tensor::<4>::random(x_shape, Distribution::Normal(0.0, 1.0), &device);
        let weight = Tensor::<4>::random(w_shape, Distribution::Normal(0.0, 0.3), &device);
        let bias = Tensor::<1>::from_data(
            TensorData::new(
                (0..bias_len).map(|i| i as f32 * 0.1 - 0.2).collect(),
                [bias_len],
            ),
            &device,
        );
        let previous = conv_gemm::set_chunk_bytes(chunk_bytes);
        device.seed(5);
        let ours = run(&layer, &x, &weight, &bias, activation, input_grad, true);
        conv_gemm::set_chunk_bytes(previous);
        device.seed(5);
        let theirs = run(&layer, &x, &weight, &bias, activation, input_grad, false);
        let names: &[&str] = if input_grad {
            &[
                "output",
                "input's gradient",
                "weight's gradient",
                "bias's gradient",
            ]
        } else {
            &["output", "weight's gradient", "bias's gradient"]
        };
        for ((a, b), name) in ours.iter().zip(&theirs).zip(names) {
            let what = format!("{name} ({activation:?}, chunk {chunk_bytes} B, {x_shape:?})");
            assert_close(a, b, &what);
        }
    }
}

/// Bytes that put `samples_per_chunk` samples of this window in one chunk.
fn chunk_of(samples_per_chunk: usize, rows: usize, positions: usize) -> usize {
    samples_per_chunk * rows * positions * 4
}

#[test]
fn convolutions_match_burns_in_chunks_of_every_size() {
    let _alone = crate::wgpu_pool_alone();
    // The model's encoder layer: 3 x 3 at stride 2, padding 1 (9 x 7 -> 5 x 4).
    let strided = ConvOptions::new([2, 2], [1, 1], [1, 1], 1);
    check(
        Layer::Conv(strided.clone()),
        [5, 3, 9, 7],
        [4, 3, 3, 3],
        conv_gemm::CHUNK_BYTES,
    );
    check(
        Layer::Conv(strided),
        [5, 3, 9, 7],
        [4, 3, 3, 3],
        chunk_of(2, 27, 20),
    );
    // Uneven strides, asymmetric padding and a dilation (9 x 8 -> 5 x 4).
    let odd = ConvOptions::new_with_padding([2, 1], [(1, 0), (2, 1)], [1, 2], 1);
    check(
        Layer::Conv(odd),
        [3, 2, 9, 8],
        [3, 2, 3, 4],
        chunk_of(1, 24, 20),
    );
    // No padding, a window as wide as the image on one axis (1 x 3).
    let valid = ConvOptions::new([1, 1], [0, 0], [1, 1], 1);
    check(
        Layer::Conv(valid),
        [4, 3, 3, 5],
        [2, 3, 3, 3],
        chunk_of(3, 27, 3),
    );
}

#[test]
fn transposed_convolutions_match_burns_in_chunks_of_every_size() {
    let _alone = crate::wgpu_pool_alone();
    // The model's decoder layer: 4 x 4 at stride 2, padding 1 (5 x 6 -> 10 x 12).
    let decoder = ConvTransposeOptions::new([2, 2], [1, 1], [0, 0], [1, 1], 1);
    check(
        Layer::Transpose(decoder.clone()),
        [5, 4, 5, 6],
        [4, 3, 4, 4],
        conv_gemm::CHUNK_BYTES,
    );
    check(
        Layer::Transpose(decoder),
        [5, 4, 5, 6],
        [4, 3, 4, 4],
        chunk_of(2, 48, 30),
    );
    // Stride 3, output padding, dilation 2, padding on one axis (4 x 3 -> 15 x 11).
    let odd = ConvTransposeOptions::new([3, 3], [0, 1], [1, 2], [2, 2], 1);
    check(
        Layer::Transpose(odd),
        [3, 2, 4, 3],
        [2, 3, 3, 3],
        chunk_of(1, 27, 12),
    );
}
