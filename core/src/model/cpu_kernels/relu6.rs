//! ReLU6 (`min(max(x, 0), 6)`) on flex as one autodiff op that keeps only its output: its
//! gradient passes where the output lies strictly between 0 and 6, which the output tells.
//!
//! burn 0.22.1's autodiff records a clamp as two comparisons into masks and two masked
//! fills, which flex runs element by element on strided layouts: a fifth of the
//! id-classifier's step (perf at af9247a). Written as two ReLUs instead it ran as fast but
//! kept two more activations per layer (the step's peak +50%); this op keeps the output,
//! which the next layer holds anyway. Written by hand because burn has no ReLU6 whose
//! backward reads its output.

use burn::backend::autodiff::Autodiff;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::flex::FlexTensor;
use burn::backend::tensor::FloatTensor;
use burn::backend::{Flex, TensorMetadata, backend_extension};
use burn::tensor::Tensor;
use rayon::prelude::*;

use super::{CHUNK, contiguous, register, tensor};

const SIX: f32 = 6.0;

/// `min(max(x, 0), 6)`, NaN kept, as burn's `relu6`.
#[backend_extension(Flex, Autodiff)]
pub trait HostRelu6: burn::backend::Backend {
    fn host_relu6(x: FloatTensor<Self>) -> FloatTensor<Self>;
}

fn forward(x: &FlexTensor) -> FlexTensor {
    let values = contiguous(x);
    let mut out = vec![0.0f32; values.len()];
    out.par_chunks_mut(CHUNK)
        .zip(values.par_chunks(CHUNK))
        .for_each(|(out, x)| {
            for (y, &x) in out.iter_mut().zip(x) {
                // NaN stays NaN, as burn's clamp keeps it.
                *y = x.clamp(0.0, SIX);
            }
        });
    tensor(out, x.shape())
}

impl HostRelu6 for Flex {
    fn host_relu6(x: FlexTensor) -> FlexTensor {
        forward(&x)
    }
}

#[derive(Debug)]
struct Relu6Backward;

impl Backward<Flex, 1> for Relu6Backward {
    /// The op's output (its storage shared with the output itself).
    type State = FlexTensor;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let upstream: FlexTensor = grads.consume::<Flex>(&ops.node);
        let shape = upstream.shape();
        let (y, dy) = (contiguous(&ops.state), contiguous(&upstream));
        let mut dx = vec![0.0f32; dy.len()];
        dx.par_chunks_mut(CHUNK)
            .zip(dy.par_chunks(CHUNK).zip(y.par_chunks(CHUNK)))
            .for_each(|(dx, (dy, y))| {
                for ((dx, &dy), &y) in dx.iter_mut().zip(dy).zip(y) {
                    // Where the input was inside the bounds, or NaN. At an input of exactly 0
                    // or 6 (an output that an input beyond the bound gives too) masked, as
                    // PyTorch's ReLU6 does; burn's clamp passes it there.
                    let inside = y > 0.0 && y < SIX || y.is_nan();
                    *dx = if inside { dy } else { 0.0 };
                }
            });
        let [x_node] = ops.parents.map(|p| p.map(|node| node.id));
        register(grads, [(x_node, tensor(dx, shape))]);
    }
}

impl<C: CheckpointStrategy> HostRelu6 for Autodiff<Flex, C> {
    fn host_relu6(x: FloatTensor<Self>) -> FloatTensor<Self> {
        match Relu6Backward
            .prepare::<C>([x.node()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let y = forward(&x.into_primitive());
                prep.finish(y.clone(), y)
            }
            OpsKind::UnTracked(prep) => prep.finish(forward(&x.into_primitive())),
        }
    }
}

/// burn's `relu6` through [`HostRelu6`], on flex (f32).
pub fn relu6<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    Tensor::from_dispatch(burn::backend::Dispatch::host_relu6(x.into_dispatch()))
}

#[cfg(test)]
mod tests {
    use burn::tensor::{Tensor, TensorData};

    use crate::backend::BackendKind;

    /// Outputs and input gradients equal burn's `relu6`, over values below 0, inside and
    /// above 6; at both bounds the gradient is masked (PyTorch's rule).
    #[test]
    fn matches_burns_relu6() {
        let device = BackendKind::Flex.device().unwrap().autodiff();
        let mut values: Vec<f32> = (0..96).map(|i| (i as f32 - 24.0) * 0.19).collect();
        values.extend([0.0, 6.0, -0.0, 6.5, -7.0]);
        let n = values.len();
        let upstream: Vec<f32> = (0..n).map(|i| 1.0 + i as f32 * 0.01).collect();
        let run = |ours: bool| {
            let x: Tensor<2> =
                Tensor::from_data(TensorData::new(values.clone(), [1, n]), &device).require_grad();
            let y = if ours {
                super::relu6(x.clone())
            } else {
                burn::tensor::activation::relu6(x.clone())
            };
            let weights = Tensor::from_data(TensorData::new(upstream.clone(), [1, n]), &device);
            let grads = (y.clone() * weights).sum().backward();
            let flat = |data: TensorData| data.convert::<f32>().as_slice::<f32>().unwrap().to_vec();
            (
                flat(y.into_data()),
                flat(x.grad(&grads).unwrap().into_data()),
            )
        };
        let (ours, theirs) = (run(true), run(false));
        assert_eq!(ours.0, theirs.0, "outputs");
        for (i, &x) in values.iter().enumerate() {
            if x == 0.0 || x == 6.0 {
                // At a bound PyTorch's rule, which the output alone can follow.
                assert_eq!(ours.1[i], 0.0, "the gradient at {x}");
            } else {
                assert_eq!(ours.1[i], theirs.1[i], "the gradient at {x}");
            }
        }
        assert!(ours.1.contains(&0.0) && ours.1.iter().any(|&g| g > 0.0));
    }
}
