//! The network one sample at a time, for generating audio: each S4D layer as its
//! recurrence ([`super::s4d::Recurrence`]), each pooling as a buffer. A coarser resolution
//! steps once every `factor` finer steps, when its down-pooling's buffer is full; its output
//! is pooled up into the next `factor` finer steps (one pooled step late, as the whole
//! sequence's up-pooling shifts it). Its logits are the whole-sequence forward's at every
//! position (tested), at a cost per sample that does not grow with the sequence.

use burn::tensor::{Int, Tensor};

use super::s4d::{Recurrence, RecurrentState};
use super::{Residual, Sashimi};

/// A residual block with its layer's recurrence and state.
struct BlockState {
    recurrence: Option<Recurrence>,
    state: Option<RecurrentState>,
}

/// One resolution finer than the coarsest: its down-pooling's buffer of inputs, the
/// up-pooled steps from the coarser resolution's last output, and its blocks' states.
struct LevelState {
    pending: Vec<Tensor<2>>,
    pooled_up: Option<Vec<Tensor<2>>>,
    blocks: Vec<BlockState>,
}

/// The network stepping one position at a time over a batch of sequences.
pub struct Stepper<'a> {
    network: &'a Sashimi,
    /// Finest first; the coarsest (the centre) is `center`.
    levels: Vec<LevelState>,
    center: Vec<BlockState>,
    position: usize,
}

fn states(blocks: &[Residual]) -> Vec<BlockState> {
    blocks
        .iter()
        .map(|b| BlockState {
            recurrence: b.s4.as_ref().map(super::S4d::recurrence),
            state: None,
        })
        .collect()
}

impl Residual {
    /// One position, `x`: `[batch, channels]`.
    fn step(&self, x: Tensor<2>, block: &mut BlockState) -> Tensor<2> {
        let z = self.norm.forward(x.clone());
        let z = match (&block.recurrence, &self.inner) {
            (Some(recurrence), _) => {
                let (y, state) = recurrence.step(z, block.state.take());
                block.state = Some(state);
                y
            }
            (None, Some(inner)) => inner.forward(z),
            (None, None) => z,
        };
        x + self.output.forward(burn::tensor::activation::gelu(z))
    }
}

fn run(blocks: &[Residual], states: &mut [BlockState], mut x: Tensor<2>) -> Tensor<2> {
    for (block, state) in blocks.iter().zip(states) {
        x = block.step(x, state);
    }
    x
}

impl<'a> Stepper<'a> {
    pub fn new(network: &'a Sashimi) -> Self {
        // Level `l`'s blocks are the up stage that ends at it: the last stage is the finest.
        let levels = (0..network.down.len())
            .map(|level| LevelState {
                pending: Vec::new(),
                pooled_up: None,
                blocks: states(&network.up[network.up.len() - 1 - level].blocks),
            })
            .collect();
        Self {
            network,
            levels,
            center: states(&network.center),
            position: 0,
        }
    }

    /// The head's outputs for the next level, `[batch, head width]`, after feeding `inputs` (`[batch]`,
    /// the level at this position: the start level first, then each sample drawn).
    pub fn step(&mut self, inputs: Tensor<1, Int>) -> Tensor<2> {
        let [batch] = inputs.dims();
        let x = self
            .network
            .embedding
            .forward(inputs.reshape([batch, 1]))
            .squeeze_dim::<2>(1);
        let x = self.level(0, x, self.position);
        self.position += 1;
        self.network.head.forward(self.network.norm.forward(x))
    }

    /// One step at resolution `level` (its step `t`) on its input `u`.
    fn level(&mut self, level: usize, u: Tensor<2>, t: usize) -> Tensor<2> {
        let network = self.network;
        if level == network.down.len() {
            return run(&network.center, &mut self.center, u.clone()) + u;
        }
        let stage = &network.up[network.up.len() - 1 - level];
        let factor = network.down[level].factor;
        let [batch, channels] = u.dims();
        let up = match &self.levels[level].pooled_up {
            Some(steps) => steps[t % factor].clone(),
            None => Tensor::zeros([batch, channels], &u.device()),
        };
        let x = up + u.clone();
        let out = run(&stage.blocks, &mut self.levels[level].blocks, x.clone()) + x;
        self.levels[level].pending.push(u);
        if self.levels[level].pending.len() == factor {
            let pending = std::mem::take(&mut self.levels[level].pending);
            let pooled = network.down[level].linear.forward(Tensor::cat(pending, 1));
            let coarse = self.level(level + 1, pooled, t / factor);
            let expanded = stage.pool.linear.forward(coarse);
            let width = expanded.dims()[1] / factor;
            self.levels[level].pooled_up = Some(
                (0..factor)
                    .map(|j| {
                        expanded
                            .clone()
                            .slice([0..batch, j * width..(j + 1) * width])
                    })
                    .collect(),
            );
        }
        out
    }
}
