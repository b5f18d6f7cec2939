use burn::module::Module;
use burn::optim::GradientsParams;
use burn::tensor::{Distribution, Int, Tensor};

use super::s4d::{direct_convolution, fft_convolution};
use super::{LEVELS, SashimiShape, shifted_inputs};
use crate::backend::BackendKind;
use crate::checkpoint::new_optimizer;

fn cpu(seed: u64) -> burn::tensor::Device {
    let device = BackendKind::Flex.device().unwrap().autodiff();
    device.seed(seed);
    device
}

fn largest_difference<const D: usize>(a: Tensor<D>, b: Tensor<D>) -> f32 {
    (a - b).abs().max().into_scalar::<f32>()
}

/// The FFT convolution is the direct causal one, outputs and both gradients, at a length
/// that is not a power of two (the FFT pads it) and one that is.
#[test]
fn the_fft_convolution_equals_the_direct_one_with_its_gradients() {
    let device = cpu(3);
    for length in [37, 64] {
        let u = Tensor::<3>::random([2, 3, length], Distribution::Normal(0.0, 1.0), &device)
            .require_grad();
        let kernel = Tensor::<2>::random([3, length], Distribution::Normal(0.0, 0.3), &device)
            .require_grad();
        let weights = Tensor::<3>::random([2, 3, length], Distribution::Normal(0.0, 1.0), &device);
        let fft = fft_convolution(u.clone(), kernel.clone());
        let direct = direct_convolution(u.clone(), kernel.clone());
        let scale = direct.clone().abs().max().into_scalar::<f32>();
        let out = largest_difference(fft.clone(), direct.clone());
        assert!(
            out < 1e-4 * scale.max(1.0),
            "length {length}: outputs {out}"
        );
        let fft_grads = (fft * weights.clone()).sum().backward();
        let direct_grads = (direct * weights).sum().backward();
        let close = |name: &str, a: Option<Tensor<3>>, b: Option<Tensor<3>>| {
            let (a, b) = (a.expect("a gradient"), b.expect("a gradient"));
            let scale = b.clone().abs().max().into_scalar::<f32>();
            let diff = largest_difference(a, b);
            assert!(
                diff < 1e-4 * scale.max(1.0),
                "length {length}: {name} gradient {diff}"
            );
        };
        close("input", u.grad(&fft_grads), u.grad(&direct_grads));
        let (a, b) = (kernel.grad(&fft_grads), kernel.grad(&direct_grads));
        close("kernel", a.map(|g| g.unsqueeze()), b.map(|g| g.unsqueeze()));
    }
}

/// Changing the level fed at one position changes no output before it, and does change
/// outputs from it on: the network is causal, the pooled paths included.
#[test]
fn no_output_sees_a_level_fed_after_it() {
    let device = cpu(5);
    let network = SashimiShape::small().init(&device);
    let length = 128;
    let inputs = Tensor::<2, Int>::random([1, length], Distribution::Uniform(0.0, 256.0), &device);
    let at = 70;
    let changed = inputs
        .clone()
        .slice_assign([0..1, at..at + 1], Tensor::full([1, 1], 3, &device));
    let before = network.forward(inputs);
    let after = network.forward(changed);
    let earlier = largest_difference(
        before.clone().slice([0..1, 0..at, 0..LEVELS]),
        after.clone().slice([0..1, 0..at, 0..LEVELS]),
    );
    let later = largest_difference(
        before.slice([0..1, at..length, 0..LEVELS]),
        after.slice([0..1, at..length, 0..LEVELS]),
    );
    assert!(earlier < 1e-4, "an earlier output moved by {earlier}");
    assert!(later > 1e-3, "the change reached no later output ({later})");
}

/// The inputs are the start level, then the sequence less its last level.
#[test]
fn each_position_is_fed_the_level_before_it() {
    let device = cpu(1);
    let levels = Tensor::<2, Int>::from_ints([[5, 6, 7, 8]], &device);
    let inputs = shifted_inputs(levels)
        .into_data()
        .convert::<i64>()
        .try_into_vec::<i64>()
        .unwrap();
    assert_eq!(inputs, vec![super::START_LEVEL, 5, 6, 7]);
}

/// A few AdamW steps on one crop lower its negative log-likelihood from about ln 256.
#[test]
fn the_nll_falls_as_the_network_fits_a_crop() {
    let device = cpu(7);
    let mut network = SashimiShape::small().init(&device);
    // A repeating ramp: predictable from the levels before.
    let levels: Vec<i64> = (0..256).map(|i| (i * 8 % 256) as i64).collect();
    let levels = Tensor::<1, Int>::from_ints(levels.as_slice(), &device).reshape([1, 256]);
    let mut optimizer = new_optimizer();
    let mut nll = Vec::new();
    for _ in 0..15 {
        let loss = network.nll(levels.clone());
        nll.push(loss.clone().into_scalar::<f32>());
        let grads = GradientsParams::from_grads(loss.backward(), &network);
        network = optimizer.step(3e-3, network, grads);
    }
    let uniform = (LEVELS as f32).ln();
    assert!(
        (nll[0] - uniform).abs() < 1.5,
        "the first NLL is near a uniform guess's ({uniform}): {nll:?}"
    );
    assert!(nll[14] < 0.6 * nll[0], "the NLL falls: {nll:?}");
}

/// Parameter counts: the small default (347,392), and the seed's size against SaShiMi's
/// SC09 model (4.1 M in the paper; 4,297,216 here, whose S4D blocks project their output
/// with one linear layer where S4's reference uses a gated one).
#[test]
fn the_sizes_hold_the_parameters_they_should() {
    let device = cpu(1);
    let small = SashimiShape::small().init(&device).num_params();
    let seed = SashimiShape::seed().init(&device).num_params();
    assert!(small < 500_000, "small: {small}");
    assert_eq!(SashimiShape::small().parameters(), small as u64);
    assert_eq!(SashimiShape::seed().parameters(), seed as u64);
    assert!(
        (3_900_000..4_500_000).contains(&seed),
        "the seed's size: {seed} parameters"
    );
    let mixture = SashimiShape {
        mixtures: 6,
        ..SashimiShape::seed()
    };
    let with_mixture = mixture.init(&device).num_params();
    assert_eq!(mixture.parameters(), with_mixture as u64);
    // The head's 256 outputs become 18.
    assert_eq!(seed - with_mixture, (64 + 1) * (256 - 18));
}

/// On ndarray, which has no FFT in burn, the layer convolves directly, and gives what
/// flex's FFT gives.
#[test]
fn ndarray_convolves_directly_as_flex_does_by_fft() {
    use super::s4d::{causal_convolution, has_fft};
    let flex = cpu(2);
    let ndarray = BackendKind::Ndarray.device().unwrap();
    assert!(has_fft(&flex) && !has_fft(&ndarray));
    let u = Tensor::<3>::random([1, 2, 50], Distribution::Normal(0.0, 1.0), &flex);
    let kernel = Tensor::<2>::random([2, 50], Distribution::Normal(0.0, 0.3), &flex);
    let by_fft = causal_convolution(u.clone(), kernel.clone());
    let direct = causal_convolution(
        Tensor::from_data(u.into_data(), &ndarray),
        Tensor::from_data(kernel.into_data(), &ndarray),
    );
    let direct = Tensor::<3>::from_data(direct.into_data(), &flex);
    let diff = largest_difference(by_fft, direct);
    assert!(diff < 1e-4, "{diff}");
}

/// The kernel built in blocks is the one summed over every step at once, values and
/// gradients, at lengths that are and are not a block's multiple.
#[test]
fn the_blocked_kernel_is_the_whole_one_with_its_gradients() {
    let device = cpu(11);
    let layer = super::S4d::new(4, 16, &device);
    for length in [1, 37, 256, 1_000] {
        let weights = Tensor::<2>::random([4, length], Distribution::Normal(0.0, 1.0), &device);
        let blocked = layer.kernel(length);
        let whole = layer.kernel_whole(length);
        let scale = whole.clone().abs().max().into_scalar::<f32>();
        let diff = largest_difference(blocked.clone(), whole.clone());
        assert!(diff < 1e-4 * scale.max(1.0), "length {length}: {diff}");
        let a = GradientsParams::from_grads((blocked * weights.clone()).sum().backward(), &layer);
        let b = GradientsParams::from_grads((whole * weights).sum().backward(), &layer);
        let (a, b) = (gradient(&layer, a), gradient(&layer, b));
        let scale = b.iter().fold(0f32, |m, g| m.max(g.abs()));
        assert!(scale > 0.0, "length {length}: the kernel has a gradient");
        let diff = a
            .iter()
            .zip(&b)
            .fold(0f32, |m, (x, y)| m.max((x - y).abs()));
        assert!(
            diff < 1e-3 * scale.max(1.0),
            "length {length}: gradients {diff}"
        );
    }
}

/// A gradient as one plain SGD step of rate 1 moves the parameters.
fn gradient(layer: &super::S4d, grads: GradientsParams) -> Vec<f32> {
    use crate::model::flat_parameters;
    let moved = burn::optim::SgdConfig::new()
        .init()
        .step(1.0, layer.clone(), grads);
    let before = flat_parameters(layer);
    flat_parameters(&moved)
        .iter()
        .zip(&before)
        .map(|(m, b)| b - m)
        .collect()
}

/// Stepping one sample at a time gives the whole sequence's logits at every position: the
/// S4D layers' recurrences are their kernels, the poolings' buffers their reshapes, and the
/// up-pooling's delay the same.
#[test]
fn the_network_stepped_one_sample_at_a_time_is_the_whole_forward() {
    let device = cpu(13);
    let network = SashimiShape::small().init(&device);
    let length = 48;
    let levels = Tensor::<2, Int>::random([2, length], Distribution::Uniform(0.0, 256.0), &device);
    let inputs = shifted_inputs(levels);
    let whole = network.forward(inputs.clone());
    let mut stepper = super::Stepper::new(&network);
    let stepped: Vec<Tensor<3>> = (0..length)
        .map(|t| {
            let fed = inputs.clone().slice([0..2, t..t + 1]).reshape([2]);
            stepper.step(fed).unsqueeze_dim::<3>(1)
        })
        .collect();
    let stepped = Tensor::cat(stepped, 1);
    let scale = whole.clone().abs().max().into_scalar::<f32>();
    let diff = largest_difference(stepped, whole);
    assert!(diff < 1e-3 * scale.max(1.0), "{diff} of {scale}");
}
