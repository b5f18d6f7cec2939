//! Multi-head scaled dot-product attention on flex as one autodiff op: per sequence and
//! head, the scores' matrix product, the mask and softmax in one pass over each row, and
//! the product with the values; backward from the kept probabilities.
//!
//! burn 0.22.1's attention under autodiff is its composed fallback, and `MultiHeadAttention`
//! records every piece apart: the heads swapped out of the features (a copy), the scores'
//! product, their scaling, a mask fill per mask, softmax's four ops, the values' product and
//! the heads swapped back, each a pass over the `[n, heads, queries, keys]` scores that
//! autodiff then differentiates one by one. PyTorch's twin runs one fused kernel (its CPU
//! flash attention) forward and one backward. Here the heads are read in place from the
//! `[n, tokens, heads x head features]` projections (strided matrix views) and the result is
//! written the same way, so no head is copied out or back. Written by hand because burn
//! 0.22.1 has no attention kernel with a backward on flex.

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::autodiff::{Autodiff, NodeId};
use burn::backend::flex::FlexTensor;
use burn::backend::tensor::FloatTensor;
use burn::backend::{Flex, TensorMetadata, backend_extension};
use burn::tensor::Tensor;
use rayon::prelude::*;

use super::exp::exp;
use super::matrix::{Mat, gemm, gemm_into};
use super::{contiguous, lanes, register, tensor};

/// Which keys each query attends: a key is left out when it is past its sequence's own
/// length, or (`causal`) after the query's position.
#[derive(Debug, Clone)]
pub struct KeyMask {
    /// Each sequence's keys; those past it are padding.
    pub keys: Vec<usize>,
    /// Queries attend no later key (a decoder reading its own tokens).
    pub causal: bool,
    /// The score a left-out key takes before softmax: burn's `MultiHeadAttention` fills
    /// masked scores with its `min_float` rather than leaving them out, which a sequence
    /// with every key masked would show.
    pub masked_score: f32,
}

impl KeyMask {
    /// How many keys query `query` of sequence `sequence` reads: a prefix of the keys,
    /// since both padding and the causal mask leave out a suffix.
    fn reads(&self, sequence: usize, query: usize, keys: usize) -> usize {
        let own = self.keys[sequence].min(keys);
        if self.causal { own.min(query + 1) } else { own }
    }
}

/// `softmax(q_h k_hᵀ / sqrt(head features), masked) v_h` for each head `h`: `q` is
/// `[n, queries, features]`, `k` and `v` are `[n, keys, features]`, each head a block of
/// `features / heads` adjacent features; the result is `[n, queries, features]` with the
/// heads in the same blocks (what `MultiHeadAttention` hands its output projection).
#[backend_extension(Flex, Autodiff)]
pub trait HostAttention: burn::backend::Backend {
    fn host_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        heads: usize,
        mask: KeyMask,
    ) -> FloatTensor<Self>;
}

/// The sizes of one call.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    n: usize,
    queries: usize,
    keys: usize,
    features: usize,
    heads: usize,
}

impl Sizes {
    fn of(q: &FlexTensor, k: &FlexTensor, heads: usize) -> Self {
        let (qs, ks) = (q.shape(), k.shape());
        assert_eq!(qs[2] % heads, 0, "features split evenly over the heads");
        Self {
            n: qs[0],
            queries: qs[1],
            keys: ks[1],
            features: qs[2],
            heads,
        }
    }

    fn head_features(&self) -> usize {
        self.features / self.heads
    }

    fn scale(&self) -> f32 {
        1.0 / (self.head_features() as f32).sqrt()
    }

    fn probs(&self) -> usize {
        self.queries * self.keys
    }

    /// Task `task`'s sequence and the offset of its head's first feature in a `[n, len,
    /// features]` buffer.
    fn head(&self, task: usize, len: usize) -> (usize, usize) {
        let (sequence, head) = (task / self.heads, task % self.heads);
        (
            sequence,
            sequence * len * self.features + head * self.head_features(),
        )
    }

    /// One head of a `[n, len, features]` buffer: `len x head features`, rows a whole
    /// token's features apart.
    fn view<'a>(&self, values: &'a [f32], task: usize, len: usize) -> Mat<'a> {
        let (_, offset) = self.head(task, len);
        Mat::strided(&values[offset..], len, self.head_features(), self.features)
    }
}

/// A buffer that parallel tasks write in disjoint blocks (each task its own head's columns
/// of every row), which safe slices cannot split.
#[derive(Clone, Copy)]
struct Shared(*mut f32);
// SAFETY: tasks write disjoint elements only (see each use).
unsafe impl Send for Shared {}
unsafe impl Sync for Shared {}

/// Writes `lhs @ rhs` (times `scale`) into task `task`'s head block of `dst`, a `[n, len,
/// features]` buffer.
fn write_head(dst: Shared, sizes: &Sizes, task: usize, len: usize, lhs: Mat, rhs: Mat, scale: f32) {
    let (_, offset) = sizes.head(task, len);
    // SAFETY: the block is `len` rows of `head features` starting at `offset`, rows
    // `features` apart, inside the `n * len * features` buffer; each task (sequence, head)
    // owns its own block.
    unsafe { gemm_into(dst.0.add(offset), sizes.features, false, lhs, rhs, scale) }
}

/// The output and the attention probabilities `[n, heads, queries, keys]`.
fn forward(
    q: &FlexTensor,
    k: &FlexTensor,
    v: &FlexTensor,
    heads: usize,
    mask: &KeyMask,
) -> (FlexTensor, Vec<f32>) {
    let sizes = Sizes::of(q, k, heads);
    let (qv, kv, vv) = (contiguous(q), contiguous(k), contiguous(v));
    let mut out = vec![0.0f32; sizes.n * sizes.queries * sizes.features];
    let mut probs = vec![0.0f32; sizes.n * heads * sizes.probs()];
    let dst = Shared(out.as_mut_ptr());
    probs
        .par_chunks_mut(sizes.probs().max(1))
        .enumerate()
        .for_each(|(task, p)| {
            let (sequence, _) = sizes.head(task, sizes.queries);
            gemm(
                p,
                false,
                sizes.view(&qv, task, sizes.queries),
                sizes.view(&kv, task, sizes.keys).t(),
            );
            for (query, row) in p.chunks_mut(sizes.keys).enumerate() {
                let reads = mask.reads(sequence, query, sizes.keys);
                softmax_row(row, sizes.scale(), reads, mask.masked_score);
            }
            let values = sizes.view(&vv, task, sizes.keys);
            let p = Mat::new(p, sizes.queries, sizes.keys);
            write_head(dst, &sizes, task, sizes.queries, p, values, 1.0);
        });
    (tensor(out, q.shape()), probs)
}

/// One row of scores made probabilities in place: the first `reads` scaled, then softmax
/// as burn computes it (less the row's largest, `exp`, over the sum). The keys left out
/// take probability 0: burn gives them `exp(masked_score - largest)`, which is 0 in f32
/// whenever a key is read (scores are nowhere near -10^4); with none read, burn's row is
/// uniform over the masked scores, and so is this one.
fn softmax_row(row: &mut [f32], scale: f32, reads: usize, masked_score: f32) {
    if reads == 0 {
        row.fill(masked_score);
        softmax(row);
        return;
    }
    let (read, left_out) = row.split_at_mut(reads);
    for s in read.iter_mut() {
        *s *= scale;
    }
    softmax(read);
    left_out.fill(0.0);
}

fn softmax(row: &mut [f32]) {
    let largest = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    // The exponentials in one pass and their sum in another: a running sum in the same
    // loop would keep the loop from running as vector instructions.
    for s in row.iter_mut() {
        *s = exp(*s - largest);
    }
    let inverse = 1.0 / lanes::sum(row);
    for s in row.iter_mut() {
        *s *= inverse;
    }
}

impl HostAttention for Flex {
    fn host_attention(
        q: FlexTensor,
        k: FlexTensor,
        v: FlexTensor,
        heads: usize,
        mask: KeyMask,
    ) -> FlexTensor {
        forward(&q, &k, &v, heads, &mask).0
    }
}

#[derive(Debug, Clone)]
struct AttentionState {
    /// The queries', keys' and values' nodes, kept by the checkpointer.
    inputs: [NodeId; 3],
    probs: std::sync::Arc<Vec<f32>>,
    heads: usize,
    mask: KeyMask,
}

#[derive(Debug)]
struct AttentionBackward;

impl Backward<Flex, 3> for AttentionBackward {
    type State = AttentionState;

    fn backward(
        self,
        ops: Ops<Self::State, 3>,
        grads: &mut Gradients,
        checkpointer: &mut Checkpointer,
    ) {
        let upstream: FlexTensor = grads.consume::<Flex>(&ops.node);
        let state = ops.state;
        let [q, k, v]: [FlexTensor; 3] =
            state.inputs.map(|id| checkpointer.retrieve_node_output(id));
        let sizes = Sizes::of(&q, &k, state.heads);
        let (qv, kv, vv, dout) = (
            contiguous(&q),
            contiguous(&k),
            contiguous(&v),
            contiguous(&upstream),
        );
        let mut dq = vec![0.0f32; qv.len()];
        let mut dk = vec![0.0f32; kv.len()];
        let mut dv = vec![0.0f32; vv.len()];
        let (dq_at, dk_at, dv_at) = (
            Shared(dq.as_mut_ptr()),
            Shared(dk.as_mut_ptr()),
            Shared(dv.as_mut_ptr()),
        );
        let (queries, keys) = (sizes.queries, sizes.keys);
        state
            .probs
            .par_chunks(sizes.probs().max(1))
            .enumerate()
            .for_each(|(task, p)| {
                let (sequence, _) = sizes.head(task, queries);
                let p_mat = Mat::new(p, queries, keys);
                let dout = sizes.view(&dout, task, queries);
                // dV = Pᵀ dO; dP = dO Vᵀ; dS = P (dP - rowsum(dP P)), zero where left out
                // (burn's mask fill passes no gradient there); dQ = s dS K; dK = s dSᵀ Q.
                write_head(dv_at, &sizes, task, keys, p_mat.t(), dout, 1.0);
                let mut ds = vec![0.0f32; p.len()];
                gemm(&mut ds, false, dout, sizes.view(&vv, task, keys).t());
                for (query, (row, p)) in ds.chunks_mut(keys).zip(p.chunks(keys)).enumerate() {
                    let [dot] = lanes::sums(row, p, |d, p| [d * p]);
                    let reads = state.mask.reads(sequence, query, keys);
                    let (read, left_out) = row.split_at_mut(reads);
                    for (d, p) in read.iter_mut().zip(p) {
                        *d = p * (*d - dot);
                    }
                    left_out.fill(0.0);
                }
                let ds = Mat::new(&ds, queries, keys);
                let scale = sizes.scale();
                write_head(
                    dq_at,
                    &sizes,
                    task,
                    queries,
                    ds,
                    sizes.view(&kv, task, keys),
                    scale,
                );
                write_head(
                    dk_at,
                    &sizes,
                    task,
                    keys,
                    ds.t(),
                    sizes.view(&qv, task, queries),
                    scale,
                );
            });
        let [q_node, k_node, v_node] = ops.parents.map(|p| p.map(|node| node.id));
        register(
            grads,
            [
                (q_node, tensor(dq, q.shape())),
                (k_node, tensor(dk, k.shape())),
                (v_node, tensor(dv, v.shape())),
            ],
        );
    }
}

impl<C: CheckpointStrategy> HostAttention for Autodiff<Flex, C> {
    fn host_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        heads: usize,
        mask: KeyMask,
    ) -> FloatTensor<Self> {
        match AttentionBackward
            .prepare::<C>([q.node(), k.node(), v.node()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(mut prep) => {
                let inputs = [
                    prep.checkpoint(&q),
                    prep.checkpoint(&k),
                    prep.checkpoint(&v),
                ];
                let (out, probs) = forward(
                    &q.into_primitive(),
                    &k.into_primitive(),
                    &v.into_primitive(),
                    heads,
                    &mask,
                );
                let state = AttentionState {
                    inputs,
                    probs: std::sync::Arc::new(probs),
                    heads,
                    mask,
                };
                prep.finish(state, out)
            }
            OpsKind::UnTracked(prep) => prep.finish(Flex::host_attention(
                q.into_primitive(),
                k.into_primitive(),
                v.into_primitive(),
                heads,
                mask,
            )),
        }
    }
}

/// Multi-head attention's context, `[n, queries, features]`, from the projected queries,
/// keys and values, on flex (f32): see [`HostAttention`].
pub fn attend(q: Tensor<3>, k: Tensor<3>, v: Tensor<3>, heads: usize, mask: KeyMask) -> Tensor<3> {
    Tensor::from_dispatch(burn::backend::Dispatch::host_attention(
        q.into_dispatch(),
        k.into_dispatch(),
        v.into_dispatch(),
        heads,
        mask,
    ))
}

#[cfg(test)]
mod tests;
