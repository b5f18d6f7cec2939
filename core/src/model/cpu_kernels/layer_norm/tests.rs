//! The host layer norm against burn's (its default decomposition, differentiated by
//! autodiff).

use burn::tensor::{Distribution, Tensor};

use super::super::{assert_close, values};
use super::normalise;
use crate::backend::BackendKind;

/// The output and the gradients of the input, the scale and the shift, for a weighted sum
/// of the output, equal burn's, on rows of an offset and a spread far from 0 and 1.
#[test]
fn output_and_gradients_equal_burns() {
    let device = BackendKind::Flex.device().unwrap().autodiff();
    device.seed(5);
    let x = Tensor::<3>::random([3, 7, 12], Distribution::Normal(2.0, 3.0), &device);
    let gamma = Tensor::<1>::random([12], Distribution::Normal(1.0, 0.5), &device);
    let beta = Tensor::<1>::random([12], Distribution::Normal(0.0, 0.5), &device);
    let weights = Tensor::<3>::random([3, 7, 12], Distribution::Normal(0.0, 1.0), &device);
    let run = |ours: bool| {
        let (x, gamma, beta) = (
            x.clone().require_grad(),
            gamma.clone().require_grad(),
            beta.clone().require_grad(),
        );
        let out = if ours {
            normalise(x.clone(), gamma.clone(), beta.clone(), 1e-5)
        } else {
            burn::tensor::module::layer_norm(x.clone(), gamma.clone(), Some(beta.clone()), 1e-5)
        };
        let grads = (out.clone() * weights.clone()).sum().backward();
        (
            values(out),
            values(x.grad(&grads).unwrap()),
            values(gamma.grad(&grads).unwrap()),
            values(beta.grad(&grads).unwrap()),
        )
    };
    let ours = run(true);
    let theirs = run(false);
    assert_close(&ours.0, &theirs.0, "output");
    assert_close(&ours.1, &theirs.1, "input's gradient");
    assert_close(&ours.2, &theirs.2, "scale's gradient");
    assert_close(&ours.3, &theirs.3, "shift's gradient");
}
