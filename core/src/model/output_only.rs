//! A layer and the activation after it (ReLU or leaky ReLU) as one autodiff op that keeps
//! only the layer's output for backward: the autodiff side shared by flex's kernels (`cpu_kernels`) and the cubecl
//! layers (`gpu_layers`), each backend supplying the forward and backward arithmetic.
//!
//! burn records a layer as a convolution (which keeps its input) and a ReLU (which keeps
//! *its* input, the pre-activation): every hidden activation is held twice until backward.
//! The ReLU's gradient mask can as well be read from its output (zero where the output is
//! not positive), and that output is the next layer's input, kept anyway; so this op keeps
//! the input and weight by checkpoint id and, when there is an activation, the output. A
//! leaky ReLU's mask is read the same way: with a positive slope its output is positive
//! exactly where its input is.

use burn::backend::Backend;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::autodiff::{Autodiff, NodeId};
use burn::backend::tensor::FloatTensor;
use burn::tensor::ops::{ConvOptions, ConvTransposeOptions};

/// Which layer, with its options.
#[derive(Debug, Clone)]
pub(crate) enum Layer {
    Conv(ConvOptions<2>),
    Transpose(ConvTransposeOptions<2>),
}

/// The activation after a layer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Activation {
    None,
    Relu,
    /// A leaky ReLU with this slope (positive) below zero.
    Leaky(f32),
}

impl Activation {
    /// The ReLU when `relu`, else none.
    pub fn relu_if(relu: bool) -> Self {
        if relu { Self::Relu } else { Self::None }
    }

    /// What a value below zero is multiplied by, in forward and in backward; `None` without
    /// an activation.
    pub fn negative_slope(self) -> Option<f32> {
        match self {
            Self::None => None,
            Self::Relu => Some(0.0),
            Self::Leaky(slope) => Some(slope),
        }
    }
}

/// Which gradients backward must produce (the parents that require one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WantedGradients {
    pub input: bool,
    pub weight: bool,
    pub bias: bool,
}

/// Gradients for the input, weight and bias; `None` where not wanted.
pub(crate) type LayerGradients<B> = [Option<FloatTensor<B>>; 3];

/// A backend's arithmetic for [`tracked`].
pub(crate) trait LayerKernels: Backend {
    /// The layer with its bias, then the activation.
    fn layer_forward(
        layer: &Layer,
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        activation: Activation,
    ) -> FloatTensor<Self>;

    /// The gradients from the output's gradient `dy`; `activated` is the forward's output
    /// and its activation, when there was one (the output's sign is the mask).
    fn layer_backward(
        layer: &Layer,
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        dy: FloatTensor<Self>,
        activated: Option<(FloatTensor<Self>, Activation)>,
        wanted: WantedGradients,
    ) -> LayerGradients<Self>;
}

#[derive(Debug)]
struct LayerBackward;

#[derive(Debug, Clone)]
struct State<B: Backend> {
    x: NodeId,
    weight: NodeId,
    /// The output, when activated: shares the output's buffer, which the next layer keeps
    /// as its input anyway.
    activated: Option<(FloatTensor<B>, Activation)>,
    layer: Layer,
}

impl<B: LayerKernels> Backward<B, 3> for LayerBackward {
    type State = State<B>;

    fn backward(
        self,
        ops: Ops<State<B>, 3>,
        grads: &mut Gradients,
        checkpointer: &mut Checkpointer,
    ) {
        let [node_x, node_weight, node_bias] = ops.parents;
        let dy = grads.consume::<B>(&ops.node);
        let state = ops.state;
        let x: FloatTensor<B> = checkpointer.retrieve_node_output(state.x);
        let weight: FloatTensor<B> = checkpointer.retrieve_node_output(state.weight);
        let wanted = WantedGradients {
            input: node_x.is_some(),
            weight: node_weight.is_some(),
            bias: node_bias.is_some(),
        };
        let gradients = B::layer_backward(&state.layer, x, weight, dy, state.activated, wanted);
        for (node, gradient) in [node_x, node_weight, node_bias].into_iter().zip(gradients) {
            if let (Some(node), Some(gradient)) = (node, gradient) {
                grads.register::<B>(node.id, gradient);
            }
        }
    }
}

/// The op on the autodiff backend: `B`'s forward, recorded with [`LayerBackward`].
pub(crate) fn tracked<B: LayerKernels, C: CheckpointStrategy>(
    layer: Layer,
    x: FloatTensor<Autodiff<B, C>>,
    weight: FloatTensor<Autodiff<B, C>>,
    bias: FloatTensor<Autodiff<B, C>>,
    activation: Activation,
) -> FloatTensor<Autodiff<B, C>> {
    match LayerBackward
        .prepare::<C>([x.node(), weight.node(), bias.node()])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(mut prep) => {
            let (x_id, weight_id) = (prep.checkpoint(&x), prep.checkpoint(&weight));
            let y = B::layer_forward(
                &layer,
                x.into_primitive(),
                weight.into_primitive(),
                bias.into_primitive(),
                activation,
            );
            let state = State {
                x: x_id,
                weight: weight_id,
                activated: (activation != Activation::None).then(|| (y.clone(), activation)),
                layer,
            };
            prep.finish(state, y)
        }
        OpsKind::UnTracked(prep) => prep.finish(B::layer_forward(
            &layer,
            x.into_primitive(),
            weight.into_primitive(),
            bias.into_primitive(),
            activation,
        )),
    }
}
