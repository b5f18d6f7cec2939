//! CTC's loss and its gradient on flex as one autodiff op, by the forward-backward
//! recursions over each utterance's frames on the host, utterances in parallel.
//!
//! Flex has no CTC kernel of its own, so burn records its generic CTC (a log-sum-exp of
//! tensor ops per encoder frame) and differentiates through every one of them: hundreds of
//! small ops and their autodiff nodes per micro-batch, which grow with the utterances'
//! length (perf at 0986097: 8% of the recogniser's forward alone, docs/BENCHMARKS.md). Here
//! forward is the alpha recursion and backward the beta recursion, each a few operations per
//! frame and extended label; the gradient is exact, not an approximation of burn's.
//!
//! Written by hand because burn 0.22.1's only native CTC (`burn-cubecl`) runs on GPUs; the
//! recursion is Graves et al. (2006), in log space as PyTorch computes it.

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::autodiff::{Autodiff, NodeId};
use burn::backend::flex::FlexTensor;
use burn::backend::tensor::FloatTensor;
use burn::backend::{Flex, TensorMetadata, backend_extension};
use burn::tensor::{Shape, Tensor};
use rayon::prelude::*;

use super::{contiguous, tensor};

/// Each utterance's transcript and encoder frames: what the loss reads besides the
/// log-probabilities.
#[derive(Debug, Clone)]
pub struct CtcTargets {
    /// Each utterance's labels (no blank among them).
    pub labels: Vec<Vec<usize>>,
    /// Each utterance's frames, at most the padded length.
    pub frames: Vec<usize>,
    /// The blank's index in the vocabulary.
    pub blank: usize,
}

/// Per-utterance CTC loss of `[n, frames, classes]` log-probabilities: `[n]`, zero where
/// the transcript cannot be aligned to the frames (burn's `zero_infinity`), with a zero
/// gradient there.
#[backend_extension(Flex, Autodiff)]
pub trait HostCtc: burn::backend::Backend {
    fn host_ctc(log_probs: FloatTensor<Self>, targets: CtcTargets) -> FloatTensor<Self>;
}

/// One utterance's log-probabilities, `[frames, classes]` rows of the batch's tensor.
struct Rows<'a> {
    values: &'a [f32],
    classes: usize,
}

impl Rows<'_> {
    fn at(&self, frame: usize, class: usize) -> f32 {
        self.values[frame * self.classes + class]
    }
}

fn log_add(a: f32, b: f32) -> f32 {
    let (hi, lo) = if a > b { (a, b) } else { (b, a) };
    if lo == f32::NEG_INFINITY {
        hi
    } else {
        hi + (lo - hi).exp().ln_1p()
    }
}

/// blank, l1, blank, l2, ..., lk, blank.
fn extended(labels: &[usize], blank: usize) -> Vec<usize> {
    let mut out = Vec::with_capacity(2 * labels.len() + 1);
    out.push(blank);
    for &l in labels {
        out.push(l);
        out.push(blank);
    }
    out
}

/// Whether a path may skip from extended label `s - 2` to `s` (a label differing from the
/// one before the blank between them).
fn may_skip(ext: &[usize], s: usize, blank: usize) -> bool {
    s >= 2 && ext[s] != blank && ext[s] != ext[s - 2]
}

/// Log alphas, `[frames, ext.len()]`: the log-probability of every path prefix ending at
/// frame t in extended label s, frame t's own probability included.
fn log_alphas(rows: &Rows, frames: usize, ext: &[usize], blank: usize) -> Vec<f32> {
    let width = ext.len();
    let mut alpha = vec![f32::NEG_INFINITY; frames * width];
    alpha[0] = rows.at(0, ext[0]);
    if width > 1 {
        alpha[1] = rows.at(0, ext[1]);
    }
    for t in 1..frames {
        let (before, now) = alpha.split_at_mut(t * width);
        let before = &before[(t - 1) * width..];
        for s in 0..width {
            let mut sum = before[s];
            if s >= 1 {
                sum = log_add(sum, before[s - 1]);
            }
            if may_skip(ext, s, blank) {
                sum = log_add(sum, before[s - 2]);
            }
            now[s] = sum + rows.at(t, ext[s]);
        }
    }
    alpha
}

/// Log betas, `[frames, ext.len()]`: the log-probability of every path suffix starting at
/// frame t in extended label s, frame t's own probability included.
fn log_betas(rows: &Rows, frames: usize, ext: &[usize], blank: usize) -> Vec<f32> {
    let width = ext.len();
    let mut beta = vec![f32::NEG_INFINITY; frames * width];
    let last = (frames - 1) * width;
    beta[last + width - 1] = rows.at(frames - 1, ext[width - 1]);
    if width > 1 {
        beta[last + width - 2] = rows.at(frames - 1, ext[width - 2]);
    }
    for t in (0..frames - 1).rev() {
        let (now, after) = beta.split_at_mut((t + 1) * width);
        let now = &mut now[t * width..];
        let after = &after[..width];
        for s in 0..width {
            let mut sum = after[s];
            if s + 1 < width {
                sum = log_add(sum, after[s + 1]);
            }
            if s + 2 < width && may_skip(ext, s + 2, blank) {
                sum = log_add(sum, after[s + 2]);
            }
            now[s] = sum + rows.at(t, ext[s]);
        }
    }
    beta
}

/// The log-likelihood of the transcript from the last frame's alphas.
fn log_likelihood(alpha: &[f32], frames: usize, width: usize) -> f32 {
    let last = &alpha[(frames - 1) * width..frames * width];
    if width > 1 {
        log_add(last[width - 1], last[width - 2])
    } else {
        last[0]
    }
}

/// One utterance's negative log-likelihood; infinite when no path aligns.
fn utterance_loss(rows: &Rows, frames: usize, labels: &[usize], blank: usize) -> f32 {
    if frames == 0 {
        return f32::INFINITY;
    }
    let ext = extended(labels, blank);
    -log_likelihood(&log_alphas(rows, frames, &ext, blank), frames, ext.len())
}

/// One utterance's gradient of `scale` x its loss with respect to its log-probabilities,
/// written into `grad` (`[padded frames, classes]`, zero on entry): minus the posterior
/// occupancy of each class at each frame. Nothing is written when no path aligns.
fn utterance_gradient(
    rows: &Rows,
    frames: usize,
    labels: &[usize],
    blank: usize,
    scale: f32,
    grad: &mut [f32],
) {
    if frames == 0 {
        return;
    }
    let ext = extended(labels, blank);
    let width = ext.len();
    let alpha = log_alphas(rows, frames, &ext, blank);
    let log_p = log_likelihood(&alpha, frames, width);
    if !log_p.is_finite() {
        return;
    }
    let beta = log_betas(rows, frames, &ext, blank);
    let classes = rows.classes;
    for t in 0..frames {
        let row = &mut grad[t * classes..(t + 1) * classes];
        for s in 0..width {
            let i = t * width + s;
            // alpha and beta both hold frame t's probability: one is taken out again.
            let occupancy = alpha[i] + beta[i] - rows.at(t, ext[s]) - log_p;
            if occupancy > f32::NEG_INFINITY {
                row[ext[s]] -= scale * occupancy.exp();
            }
        }
    }
}

fn dims3(t: &FlexTensor) -> [usize; 3] {
    let shape = t.shape();
    [shape[0], shape[1], shape[2]]
}

impl HostCtc for Flex {
    fn host_ctc(log_probs: FlexTensor, targets: CtcTargets) -> FlexTensor {
        let [n, padded, classes] = dims3(&log_probs);
        let values = contiguous(&log_probs);
        let losses: Vec<f32> = (0..n)
            .into_par_iter()
            .map(|i| {
                let rows = Rows {
                    values: &values[i * padded * classes..(i + 1) * padded * classes],
                    classes,
                };
                let frames = targets.frames[i].min(padded);
                let loss = utterance_loss(&rows, frames, &targets.labels[i], targets.blank);
                if loss.is_finite() { loss } else { 0.0 }
            })
            .collect();
        tensor(losses, Shape::new([n]))
    }
}

#[derive(Debug)]
struct CtcBackward;

impl Backward<Flex, 1> for CtcBackward {
    type State = (NodeId, CtcTargets);

    fn backward(
        self,
        ops: Ops<Self::State, 1>,
        grads: &mut Gradients,
        checkpointer: &mut Checkpointer,
    ) {
        let [node] = ops.parents;
        let upstream: FlexTensor = grads.consume::<Flex>(&ops.node);
        let Some(node) = node else { return };
        let (log_probs_id, targets) = ops.state;
        let log_probs: FlexTensor = checkpointer.retrieve_node_output(log_probs_id);
        let [n, padded, classes] = dims3(&log_probs);
        let values = contiguous(&log_probs);
        let upstream = contiguous(&upstream);
        let mut gradient = vec![0.0f32; n * padded * classes];
        gradient
            .par_chunks_mut(padded * classes)
            .enumerate()
            .for_each(|(i, grad)| {
                let rows = Rows {
                    values: &values[i * padded * classes..(i + 1) * padded * classes],
                    classes,
                };
                let frames = targets.frames[i].min(padded);
                utterance_gradient(
                    &rows,
                    frames,
                    &targets.labels[i],
                    targets.blank,
                    upstream[i],
                    grad,
                );
            });
        grads.register::<Flex>(node.id, tensor(gradient, log_probs.shape()));
    }
}

impl<C: CheckpointStrategy> HostCtc for Autodiff<Flex, C> {
    fn host_ctc(log_probs: FloatTensor<Self>, targets: CtcTargets) -> FloatTensor<Self> {
        match CtcBackward
            .prepare::<C>([log_probs.node()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(mut prep) => {
                let id = prep.checkpoint(&log_probs);
                let losses = Flex::host_ctc(log_probs.into_primitive(), targets.clone());
                prep.finish((id, targets), losses)
            }
            OpsKind::UnTracked(prep) => {
                prep.finish(Flex::host_ctc(log_probs.into_primitive(), targets))
            }
        }
    }
}

/// Each utterance's CTC loss, `[n]`, from `[n, frames, classes]` log-probabilities on flex
/// (f32), zero where no path aligns, as burn's `CTCLoss` with `zero_infinity`.
pub fn loss(log_probs: Tensor<3>, targets: CtcTargets) -> Tensor<1> {
    Tensor::from_dispatch(burn::backend::Dispatch::host_ctc(
        log_probs.into_dispatch(),
        targets,
    ))
}

#[cfg(test)]
mod tests;
