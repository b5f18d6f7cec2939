//! The host linear layer against burn's `Linear` (and `gelu`) differentiated by autodiff,
//! and its erf against libm's.

use burn::tensor::activation::gelu;
use burn::tensor::{Distribution, Tensor, TensorData};

use super::super::{assert_close, values};
use super::{BLOCK, erf, linear};
use crate::backend::BackendKind;

/// Output and the gradients of the input, weight and bias, for a weighted sum of the
/// output, equal burn's, with and without GELU, over rows that fill two blocks and part of
/// a third.
#[test]
fn output_and_gradients_equal_burns() {
    let device = BackendKind::Flex.device().unwrap().autodiff();
    device.seed(9);
    let rows = 2 * BLOCK + 22;
    let x = Tensor::<3>::random([2, rows / 2, 12], Distribution::Normal(0.0, 1.5), &device);
    let w = Tensor::<2>::random([12, 20], Distribution::Normal(0.0, 0.5), &device);
    let b = Tensor::<1>::random([20], Distribution::Normal(0.0, 0.5), &device);
    let weights = Tensor::<3>::random([2, rows / 2, 20], Distribution::Normal(0.0, 1.0), &device);
    for with_gelu in [false, true] {
        let run = |ours: bool| {
            let (x, w, b) = (
                x.clone().require_grad(),
                w.clone().require_grad(),
                b.clone().require_grad(),
            );
            let out = if ours {
                linear(x.clone(), w.clone(), b.clone(), with_gelu)
            } else {
                let z = x.clone().matmul(w.clone().unsqueeze()) + b.clone().unsqueeze();
                if with_gelu { gelu(z) } else { z }
            };
            let grads = (out.clone() * weights.clone()).sum().backward();
            (
                values(out),
                values(x.grad(&grads).unwrap()),
                values(w.grad(&grads).unwrap()),
                values(b.grad(&grads).unwrap()),
            )
        };
        let ours = run(true);
        let theirs = run(false);
        let what = if with_gelu { "with GELU" } else { "plain" };
        assert_close(&ours.0, &theirs.0, &format!("{what}: output"));
        assert_close(&ours.1, &theirs.1, &format!("{what}: input's gradient"));
        assert_close(&ours.2, &theirs.2, &format!("{what}: weight's gradient"));
        assert_close(&ours.3, &theirs.3, &format!("{what}: bias's gradient"));
    }
}

/// The approximation is within a few f32 ulps of 1 of libm's erf (flex's), over and past
/// the range where erf leaves ±1.
#[test]
fn erf_is_libms_to_float_precision() {
    let device = BackendKind::Flex.device().unwrap();
    let grid: Vec<f32> = (-6000..=6000).map(|i| i as f32 / 1000.0).collect();
    let n = grid.len();
    let libm = values(Tensor::<1>::from_data(TensorData::new(grid.clone(), [n]), &device).erf());
    for (x, want) in grid.iter().zip(libm) {
        let got = erf(*x);
        assert!((got - want).abs() <= 4e-7, "erf({x}) = {got}, libm {want}");
    }
    assert_eq!(erf(0.0), 0.0);
    assert!(
        (erf(f32::INFINITY) - 1.0).abs() <= 4e-7 && (erf(f32::NEG_INFINITY) + 1.0).abs() <= 4e-7
    );
    assert!(erf(f32::NAN).is_nan());
}
