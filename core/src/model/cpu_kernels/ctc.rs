//! CTC's loss and its gradient on flex as one autodiff op, by the forward-backward
//! recursions over each utterance's frames on the host, utterances in parallel.
//!
//! Flex has no CTC kernel of its own, so burn records its generic CTC (a log-sum-exp of
//! tensor ops per encoder frame) and differentiates through every one of them: hundreds of
//! small ops and their autodiff nodes per micro-batch, which grow with the utterances'
//! length (perf at 0986097: 8% of the recogniser's forward alone, docs/BENCHMARKS.md). Here
//! the alpha recursion gives the loss and, when a backward will follow, the beta recursion
//! the gradient in the same forward pass (see [`losses_and_gradient`]); a few products and
//! sums per frame and extended label; the gradient is exact, not an approximation of burn's.
//!
//! Written by hand because burn 0.22.1's only native CTC (`burn-cubecl`) runs on GPUs; the
//! recursions are Graves et al. (2006).

use burn::backend::autodiff::Autodiff;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
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

/// One utterance's recursions: its extended labels and their probabilities per frame.
///
/// In probabilities scaled per frame (Graves 2012, section 7.3.1), in f64, rather than in
/// log space: one `exp` per frame and label here, then only products and sums, where log
/// space takes an `exp` and a `log1p` per frame, label and transition (they were a seventh
/// of a step's time). Each frame's row is normalised to sum 1 and its scale kept in log
/// space, so nothing underflows that log space would keep: a row vanishes only when every
/// label it allows has a probability under f64's least (a log-probability under -700).
struct Lattice {
    ext: Vec<usize>,
    frames: usize,
    /// `[frames, ext.len()]`: each extended label's probability at each frame.
    probs: Vec<f64>,
    blank: usize,
}

impl Lattice {
    fn new(rows: &Rows, frames: usize, labels: &[usize], blank: usize) -> Self {
        let ext = extended(labels, blank);
        let mut probs = Vec::with_capacity(frames * ext.len());
        // One `exp` per class and frame, then gathered: a transcript's extended labels
        // outnumber the classes many times (361 against 27 at 180 characters).
        let mut class_probs = vec![0.0f64; rows.classes];
        for t in 0..frames {
            for (c, p) in class_probs.iter_mut().enumerate() {
                *p = f64::from(rows.at(t, c)).exp();
            }
            probs.extend(ext.iter().map(|&c| class_probs[c]));
        }
        Self {
            ext,
            frames,
            probs,
            blank,
        }
    }

    fn width(&self) -> usize {
        self.ext.len()
    }

    /// Scaled alphas (path prefixes ending at frame t in extended label s, frame t's
    /// probability included), each frame's row summing to 1, and the transcript's
    /// log-likelihood; `None` when no path aligns.
    fn alphas(&self) -> Option<(Vec<f64>, f64)> {
        let width = self.width();
        let mut alpha = vec![0.0f64; self.frames * width];
        let mut log_scale = 0.0;
        for t in 0..self.frames {
            let y = &self.probs[t * width..(t + 1) * width];
            let (before, now) = alpha.split_at_mut(t * width);
            let now = &mut now[..width];
            if t == 0 {
                now[0] = y[0];
                if width > 1 {
                    now[1] = y[1];
                }
            } else {
                let before = &before[(t - 1) * width..];
                for s in 0..width {
                    let mut sum = before[s];
                    if s >= 1 {
                        sum += before[s - 1];
                    }
                    if may_skip(&self.ext, s, self.blank) {
                        sum += before[s - 2];
                    }
                    now[s] = sum * y[s];
                }
            }
            log_scale += normalise(now)?;
        }
        let last = &alpha[(self.frames - 1) * width..];
        let end = last[width - 1] + if width > 1 { last[width - 2] } else { 0.0 };
        (end > 0.0).then(|| (alpha, log_scale + end.ln()))
    }

    /// Scaled betas (path suffixes starting at frame t in extended label s, frame t's
    /// probability included), each frame's row summing to 1; `None` when no path aligns.
    fn betas(&self) -> Option<Vec<f64>> {
        let width = self.width();
        let mut beta = vec![0.0f64; self.frames * width];
        for t in (0..self.frames).rev() {
            let y = &self.probs[t * width..(t + 1) * width];
            let (now, after) = beta.split_at_mut((t + 1) * width);
            let now = &mut now[t * width..];
            if t + 1 == self.frames {
                now[width - 1] = y[width - 1];
                if width > 1 {
                    now[width - 2] = y[width - 2];
                }
            } else {
                let after = &after[..width];
                for s in 0..width {
                    let mut sum = after[s];
                    if s + 1 < width {
                        sum += after[s + 1];
                    }
                    if s + 2 < width && may_skip(&self.ext, s + 2, self.blank) {
                        sum += after[s + 2];
                    }
                    now[s] = sum * y[s];
                }
            }
            normalise(now)?;
        }
        Some(beta)
    }
}

/// Scales `row` to sum 1; its log scale, or `None` when it is all zero.
fn normalise(row: &mut [f64]) -> Option<f64> {
    let sum: f64 = row.iter().sum();
    if sum > 0.0 && sum.is_finite() {
        row.iter_mut().for_each(|v| *v /= sum);
        Some(sum.ln())
    } else {
        None
    }
}

/// One utterance's negative log-likelihood; infinite when no path aligns.
fn utterance_loss(rows: &Rows, frames: usize, labels: &[usize], blank: usize) -> f32 {
    if frames == 0 {
        return f32::INFINITY;
    }
    match Lattice::new(rows, frames, labels, blank).alphas() {
        Some((_, log_likelihood)) => -log_likelihood as f32,
        None => f32::INFINITY,
    }
}

/// One utterance's loss, and its gradient with respect to its log-probabilities written
/// into `grad` (`[padded frames, classes]`, zero on entry): minus the posterior occupancy of
/// each class at each frame. Infinite, and nothing written, when no path aligns.
fn utterance_loss_and_gradient(
    rows: &Rows,
    frames: usize,
    labels: &[usize],
    blank: usize,
    grad: &mut [f32],
) -> f32 {
    if frames == 0 {
        return f32::INFINITY;
    }
    let lattice = Lattice::new(rows, frames, labels, blank);
    let (Some((alpha, log_likelihood)), Some(beta)) = (lattice.alphas(), lattice.betas()) else {
        return f32::INFINITY;
    };
    let width = lattice.width();
    let classes = rows.classes;
    let mut occupancy = vec![0.0f64; width];
    for t in 0..frames {
        // alpha and beta both hold frame t's probability: one is taken out again. Each
        // frame's occupancies sum to 1 unscaled, so normalising them undoes both scalings.
        let span = t * width..(t + 1) * width;
        for (((o, a), b), y) in occupancy
            .iter_mut()
            .zip(&alpha[span.clone()])
            .zip(&beta[span.clone()])
            .zip(&lattice.probs[span])
        {
            *o = if *y > 0.0 { a * b / y } else { 0.0 };
        }
        let total: f64 = occupancy.iter().sum();
        if !(total > 0.0 && total.is_finite()) {
            continue;
        }
        let row = &mut grad[t * classes..(t + 1) * classes];
        for (&class, &o) in lattice.ext.iter().zip(&occupancy) {
            row[class] -= (o / total) as f32;
        }
    }
    -log_likelihood as f32
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

/// Each utterance's loss (zero where no path aligns) and the gradient of their sum with
/// respect to the log-probabilities: computed together in forward, from one lattice per
/// utterance, so that backward only scales the gradient. The lattices (frames x extended
/// labels, a few MB an utterance at 30 s) then live while forward runs, not at the start of
/// backward, where every activation is held and a step's memory peaks; the thread count
/// bounds how many are alive at once, which a model of memory by utterances and frames
/// could not follow.
fn losses_and_gradient(log_probs: &FlexTensor, targets: &CtcTargets) -> (Vec<f32>, Vec<f32>) {
    let [n, padded, classes] = dims3(log_probs);
    let values = contiguous(log_probs);
    let mut gradient = vec![0.0f32; n * padded * classes];
    let mut losses = vec![0.0f32; n];
    gradient
        .par_chunks_mut((padded * classes).max(1))
        .zip(losses.par_iter_mut())
        .enumerate()
        .for_each(|(i, (grad, loss))| {
            let rows = Rows {
                values: &values[i * padded * classes..(i + 1) * padded * classes],
                classes,
            };
            let frames = targets.frames[i].min(padded);
            let l =
                utterance_loss_and_gradient(&rows, frames, &targets.labels[i], targets.blank, grad);
            *loss = if l.is_finite() { l } else { 0.0 };
        });
    (losses, gradient)
}

#[derive(Debug)]
struct CtcBackward;

impl Backward<Flex, 1> for CtcBackward {
    /// The gradient of each utterance's loss, `[n, frames, classes]`.
    type State = (std::sync::Arc<Vec<f32>>, Shape);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node] = ops.parents;
        let upstream: FlexTensor = grads.consume::<Flex>(&ops.node);
        let Some(node) = node else { return };
        let (gradient, shape) = ops.state;
        let upstream = contiguous(&upstream);
        let per_utterance = shape.num_elements() / upstream.len().max(1);
        let mut gradient = std::sync::Arc::unwrap_or_clone(gradient);
        gradient
            .par_chunks_mut(per_utterance.max(1))
            .zip(upstream.par_iter())
            .for_each(|(grad, &scale)| grad.iter_mut().for_each(|g| *g *= scale));
        grads.register::<Flex>(node.id, tensor(gradient, shape));
    }
}

impl<C: CheckpointStrategy> HostCtc for Autodiff<Flex, C> {
    fn host_ctc(log_probs: FloatTensor<Self>, targets: CtcTargets) -> FloatTensor<Self> {
        match CtcBackward
            .prepare::<C>([log_probs.node()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let log_probs = log_probs.into_primitive();
                let shape = log_probs.shape();
                let (losses, gradient) = losses_and_gradient(&log_probs, &targets);
                let n = losses.len();
                prep.finish(
                    (std::sync::Arc::new(gradient), shape),
                    tensor(losses, Shape::new([n])),
                )
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
