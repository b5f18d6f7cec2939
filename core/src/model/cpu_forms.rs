//! Layers of the default model written as matrix products, the same functions as burn's
//! convolutions and faster on the CPU backends.
//!
//! burn's CPU convolution unfolds its input (im2col) and calls one GEMM. For the model's
//! first layer (one input channel) and its last (one output channel) that GEMM is a thin
//! matrix-vector product over a 9x larger unfolded copy, and the weight gradient, which
//! burn computes as a convolution with batch and channels swapped, is worse. Here:
//!
//! - [`conv_by_unfolding`]: the unfolded input built from strided slices, then a GEMM. For
//!   a layer whose input needs no gradient (the first), backward is one GEMM for the weight.
//! - [`conv_by_taps`]: a stride-1 convolution as one GEMM of every tap's weights against the
//!   input (`[taps x out, in] @ [in, positions]`), then the taps' shifted planes summed. For
//!   few output channels the taps' planes are small, and forward and backward are GEMMs with
//!   a wide inner dimension.
//!
//! Both compute exactly the sums burn's convolution does, in another order; the tests check
//! values and gradients against `conv2d` on random inputs.

use burn::nn::PaddingConfig2d;
use burn::nn::conv::{Conv2d, ConvTranspose2d};
use burn::tensor::{Device, Tensor, s};

use super::relu_if;

/// Whether `device` is a CPU backend, where these forms are faster than burn's convolution.
pub fn is_cpu(device: &Device) -> bool {
    #[cfg(feature = "flex")]
    if *device == Device::flex() {
        return true;
    }
    #[cfg(feature = "ndarray")]
    #[allow(deprecated)]
    if *device == Device::ndarray() {
        return true;
    }
    let _ = device;
    false
}

/// `layer` (then a ReLU when `relu`) in the fastest form for a CPU backend: on flex the
/// layer kernels with bias and ReLU fused (planes for one input or output channel, else
/// unfolded GEMMs); elsewhere unfolding for one input channel, taps for a stride-1 layer
/// with few output channels, burn's convolution otherwise.
pub fn conv(layer: &Conv2d, x: Tensor<4>, relu: bool) -> Tensor<4> {
    let [out, channels, _, _] = layer.weight.val().dims();
    #[cfg(feature = "flex")]
    if let Some((bias, stride, padding)) = flex_kernel_layer(layer, &x) {
        let thin = super::cpu_kernels::thin::applies(channels, out);
        // Other layers of few output channels keep the taps' form below (the GAN's).
        if thin || !(out <= 4 && layer.stride == [1, 1]) {
            return super::cpu_kernels::conv(
                x,
                layer.weight.val(),
                bias,
                stride,
                padding,
                super::cpu_kernels::Activation::relu_if(relu),
            );
        }
    }
    if channels == 1 {
        return relu_if(conv_by_unfolding(layer, x), relu);
    }
    if out <= 4 && layer.stride == [1, 1] && layer.dilation == [1, 1] {
        return relu_if(conv_by_taps(layer, x), relu);
    }
    relu_if(layer.forward(x), relu)
}

/// The bias, stride and padding of a layer flex's kernels take (`x` on flex; a bias;
/// square kernel, equal stride and symmetric padding on both axes; no dilation or groups).
#[cfg(feature = "flex")]
fn flex_kernel_layer(layer: &Conv2d, x: &Tensor<4>) -> Option<(Tensor<1>, usize, usize)> {
    let bias = layer.bias.as_ref()?;
    let [_, _, kh, kw] = layer.weight.val().dims();
    let [ph, pw] = padding(layer);
    // No padding (the recogniser's subsampling) is symmetric too.
    let symmetric = matches!(layer.padding, PaddingConfig2d::Valid)
        || matches!(layer.padding, PaddingConfig2d::Explicit(t, l, b, r) if t == b && l == r);
    (super::cpu_kernels::runs_on(&x.device())
        && kh == kw
        && ph == pw
        && symmetric
        && layer.stride[0] == layer.stride[1]
        && layer.dilation == [1, 1]
        && layer.groups == 1)
        .then(|| (bias.val(), layer.stride[0], ph))
}

/// `layer` (then a ReLU when `relu`) on a CPU backend: on flex the unfolded-gradient
/// kernels with bias and ReLU fused, burn's otherwise.
pub fn up(layer: &ConvTranspose2d, x: Tensor<4>, relu: bool) -> Tensor<4> {
    #[cfg(feature = "flex")]
    if let Some(bias) = &layer.bias {
        let [_, _, kh, kw] = layer.weight.val().dims();
        if super::cpu_kernels::runs_on(&x.device())
            && kh == kw
            && layer.stride[0] == layer.stride[1]
            && layer.padding[0] == layer.padding[1]
            && layer.padding_out == [0, 0]
            && layer.dilation == [1, 1]
            && layer.groups == 1
        {
            let (stride, padding) = (layer.stride[0], layer.padding[0]);
            return super::cpu_kernels::conv_transpose(
                x,
                layer.weight.val(),
                bias.val(),
                stride,
                padding,
                super::cpu_kernels::Activation::relu_if(relu),
            );
        }
    }
    relu_if(layer.forward(x), relu)
}

/// The layer's symmetric padding (the model builds every convolution with explicit padding).
fn padding(layer: &Conv2d) -> [usize; 2] {
    match layer.padding {
        PaddingConfig2d::Explicit(top, left, _, _) => [top, left],
        _ => [0, 0],
    }
}

fn add_bias(y: Tensor<4>, layer: &Conv2d) -> Tensor<4> {
    match &layer.bias {
        Some(bias) => {
            let channels = bias.val().dims()[0];
            y + bias.val().reshape([1, channels, 1, 1])
        }
        None => y,
    }
}

/// `layer`'s convolution as strided slices of the padded input stacked into the unfolded
/// matrix `[n, in x kh x kw, positions]`, times the weight `[out, in x kh x kw]`.
pub fn conv_by_unfolding(layer: &Conv2d, x: Tensor<4>) -> Tensor<4> {
    let [n, channels, height, width] = x.dims();
    let [out, _, kh, kw] = layer.weight.val().dims();
    let [ph, pw] = padding(layer);
    let [sh, sw] = layer.stride;
    let oh = (height + 2 * ph - kh) / sh + 1;
    let ow = (width + 2 * pw - kw) / sw + 1;
    let padded = x.pad(
        [(ph, ph), (pw, pw)],
        burn::tensor::ops::PadMode::Constant(0.0),
    );
    // Rows ordered as the weight's flattening: channel, then tap row, then tap column.
    let taps: Vec<Tensor<5>> = (0..kh)
        .flat_map(|ky| (0..kw).map(move |kx| (ky, kx)))
        .map(|(ky, kx)| {
            padded
                .clone()
                .slice(s![
                    ..,
                    ..,
                    ky..ky + sh * (oh - 1) + 1;sh as isize,
                    kx..kx + sw * (ow - 1) + 1;sw as isize
                ])
                .unsqueeze_dim::<5>(2)
        })
        .collect();
    let unfolded = Tensor::cat(taps, 2).reshape([n, channels * kh * kw, oh * ow]);
    let weight = layer.weight.val().reshape([1, out, channels * kh * kw]);
    add_bias(weight.matmul(unfolded).reshape([n, out, oh, ow]), layer)
}

/// `layer`'s stride-1 convolution as every tap's product with the input at once,
/// `[kh x kw x out, in] @ [in, positions]`, then each tap's plane shifted into place and
/// summed.
pub fn conv_by_taps(layer: &Conv2d, x: Tensor<4>) -> Tensor<4> {
    let [n, channels, height, width] = x.dims();
    let [out, _, kh, kw] = layer.weight.val().dims();
    let [ph, pw] = padding(layer);
    debug_assert_eq!(layer.stride, [1, 1], "conv_by_taps is for stride 1");
    let oh = height + 2 * ph - kh + 1;
    let ow = width + 2 * pw - kw + 1;
    let weight = layer
        .weight
        .val()
        .permute([2, 3, 0, 1])
        .reshape([1, kh * kw * out, channels]);
    let planes = weight
        .matmul(x.reshape([n, channels, height * width]))
        .reshape([n, kh * kw, out, height, width])
        .pad(
            [(ph, ph), (pw, pw)],
            burn::tensor::ops::PadMode::Constant(0.0),
        );
    let mut sum: Option<Tensor<5>> = None;
    for ky in 0..kh {
        for kx in 0..kw {
            let tap = ky * kw + kx;
            let plane = planes
                .clone()
                .slice(s![.., tap..tap + 1, .., ky..ky + oh, kx..kx + ow]);
            sum = Some(match sum {
                Some(sum) => sum + plane,
                None => plane,
            });
        }
    }
    let y = sum
        .expect("a kernel has at least one tap")
        .reshape([n, out, oh, ow]);
    add_bias(y, layer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::BackendKind;
    use burn::nn::conv::Conv2dConfig;
    use burn::tensor::Distribution;

    fn layer(channels: [usize; 2], stride: usize, padding: usize, device: &Device) -> Conv2d {
        let padding = match padding {
            0 => PaddingConfig2d::Valid,
            p => PaddingConfig2d::Explicit(p, p, p, p),
        };
        Conv2dConfig::new(channels, [3, 3])
            .with_stride([stride, stride])
            .with_padding(padding)
            .init(device)
    }

    fn values(t: Tensor<4>) -> Vec<f32> {
        t.into_data().convert::<f32>().try_to_vec::<f32>().unwrap()
    }

    fn assert_close(a: Vec<f32>, b: Vec<f32>, what: &str) {
        assert_eq!(a.len(), b.len(), "{what}: length");
        let scale = b.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-6);
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            assert!(
                (x - y).abs() <= 1e-5 * scale,
                "{what}[{i}]: {x} against {y} (scale {scale})"
            );
        }
    }

    /// Output, input gradient and weight and bias gradients of `form` against burn's conv2d
    /// (padding 1).
    fn check(
        form: fn(&Conv2d, Tensor<4>) -> Tensor<4>,
        channels: [usize; 2],
        stride: usize,
        size: [usize; 2],
    ) {
        check_padded(form, channels, stride, 1, size)
    }

    fn check_padded(
        form: fn(&Conv2d, Tensor<4>) -> Tensor<4>,
        channels: [usize; 2],
        stride: usize,
        padding: usize,
        size: [usize; 2],
    ) {
        check_against(form, |l, x| l.forward(x), channels, stride, padding, size)
    }

    /// The same against `plain`, burn's layer and whatever follows it.
    fn check_against(
        form: fn(&Conv2d, Tensor<4>) -> Tensor<4>,
        plain: fn(&Conv2d, Tensor<4>) -> Tensor<4>,
        channels: [usize; 2],
        stride: usize,
        padding: usize,
        size: [usize; 2],
    ) {
        let device = BackendKind::Flex.device().unwrap().autodiff();
        let layer = layer(channels, stride, padding, &device);
        let x = Tensor::<4>::random(
            [3, channels[0], size[0], size[1]],
            Distribution::Normal(0.0, 1.0),
            &device,
        );
        let plain_y = plain(&layer, x.clone().require_grad());
        let g = Tensor::<4>::random(plain_y.dims(), Distribution::Normal(0.0, 1.0), &device);
        let gradients = |y: Tensor<4>, x: &Tensor<4>| {
            let grads = (y * g.clone()).sum().backward();
            (
                values(x.grad(&grads).unwrap()),
                layer
                    .weight
                    .val()
                    .grad(&grads)
                    .unwrap()
                    .into_data()
                    .try_to_vec::<f32>()
                    .unwrap(),
                layer
                    .bias
                    .as_ref()
                    .unwrap()
                    .val()
                    .grad(&grads)
                    .unwrap()
                    .into_data()
                    .try_to_vec::<f32>()
                    .unwrap(),
            )
        };
        let xp = x.clone().require_grad();
        let plain_y = plain(&layer, xp.clone());
        let xf = x.clone().require_grad();
        let fast_y = form(&layer, xf.clone());
        assert_eq!(fast_y.dims(), plain_y.dims());
        assert_close(values(fast_y.clone()), values(plain_y.clone()), "output");
        let (px, pw, pb) = gradients(plain_y, &xp);
        let (fx, fw, fb) = gradients(fast_y, &xf);
        assert_close(fx, px, "input gradient");
        assert_close(fw, pw, "weight gradient");
        assert_close(fb, pb, "bias gradient");
    }

    #[test]
    fn unfolding_matches_conv2d() {
        check(conv_by_unfolding, [1, 32], 2, [64, 64]); // enc1
        check(conv_by_unfolding, [5, 7], 2, [9, 11]); // odd sizes
        check(conv_by_unfolding, [3, 4], 1, [6, 5]);
    }

    #[test]
    fn taps_match_conv2d() {
        check(conv_by_taps, [32, 1], 1, [64, 64]); // out
        check(conv_by_taps, [6, 3], 1, [7, 10]);
    }

    /// The recogniser's subsampling: 3 x 3 at stride 2 without padding, over odd sizes, from
    /// one channel (unfolding) and between several (flex's unfolded-gradient kernels).
    #[test]
    fn unpadded_stride_two_matches_conv2d() {
        let auto: fn(&Conv2d, Tensor<4>) -> Tensor<4> = |layer, x| conv(layer, x, false);
        check_padded(auto, [1, 8], 2, 0, [23, 17]);
        check_padded(auto, [8, 8], 2, 0, [11, 9]);
        check_padded(auto, [6, 5], 2, 0, [12, 10]);
    }

    /// A GAN discriminator's layer: the leaky ReLU in the same op, its mask read from the
    /// output (the sign of a leaky ReLU's output is its input's).
    #[test]
    fn a_leaky_activation_matches_burns_leaky_relu() {
        use crate::model::cpu_kernels::{self, Activation};
        let fused: fn(&Conv2d, Tensor<4>) -> Tensor<4> = |layer, x| {
            let bias = layer.bias.as_ref().unwrap().val();
            cpu_kernels::conv(x, layer.weight.val(), bias, 2, 1, Activation::Leaky(0.2))
        };
        let plain: fn(&Conv2d, Tensor<4>) -> Tensor<4> =
            |layer, x| burn::tensor::activation::leaky_relu(layer.forward(x), 0.2);
        check_against(fused, plain, [1, 8], 2, 1, [16, 12]);
        check_against(fused, plain, [8, 16], 2, 1, [8, 6]);
    }

    #[test]
    fn only_cpu_backends_take_these_forms() {
        assert!(is_cpu(&BackendKind::Flex.device().unwrap()));
        assert!(is_cpu(&BackendKind::Flex.device().unwrap().autodiff()));
    }
}
