//! The matrix products of one training step of the default model (vq-patch-ae, 8 x 4
//! patches a step, one thread), as `headroom_core::model::cpu_kernels::matrix::gemm_into`
//! makes them: read at c86b038 by printing each call's shape and strides
//! over a run of `trainer-cli train --backend flex --no-plan --no-eval --steps 2
//! --batch-size 8 --n-patches 4 --threads 1` (`calls`: half the run's count;
//! the run may do more than its two steps, so the mix's total time is a weight for the
//! ratio, not a step's time).

/// One kind of product: `dst` (m x n, row-major, rows `dst_row_stride` apart) = lhs (m x k)
/// @ rhs (k x n), each operand's strides as `[row, column]`.
pub struct Product {
    pub calls: usize,
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub lhs_strides: [usize; 2],
    pub rhs_strides: [usize; 2],
    pub dst_row_stride: usize,
}

/// calls, m, k, n, lhs strides, rhs strides, destination row stride.
const fn p(
    calls: usize,
    m: usize,
    k: usize,
    n: usize,
    lhs: [usize; 2],
    rhs: [usize; 2],
    dst: usize,
) -> Product {
    Product {
        calls,
        m,
        k,
        n,
        lhs_strides: lhs,
        rhs_strides: rhs,
        dst_row_stride: dst,
    }
}

#[rustfmt::skip]
pub const STEP: &[Product] = &[
    p(  96,  128,  256, 1089, [ 256, 1], [1089,    1], 1089),
    p(  96,  256,  384,  289, [ 384, 1], [ 289,    1],  289),
    p( 256,  512,  128,   64, [ 128, 1], [   1, 1024],   64),
    p( 256,   64,  512,  128, [ 512, 1], [ 128,    1], 1024),
    p( 128, 1024,   64,   96, [  64, 1], [   1,  256],   96),
    p( 128,   96, 1024,   64, [1024, 1], [  64,    1],  256),
    p( 112,   64,  288,  256, [ 288, 1], [ 256,    1],  256),
    p(  64,  384,  256,   81, [ 256, 1], [  81,    1],   81),
    p(  80,   64,  864,   64, [ 864, 1], [  64,    1],   64),
    p(  80,   96,  576,   64, [ 576, 1], [  64,    1],   64),
    p(   8,  384,  256,  324, [ 256, 1], [ 324,    1],  324),
    p(   8, 1536,  256,   64, [ 256, 1], [   1,  256],   64),
    p(   8,   64, 1536,  256, [1536, 1], [ 256,    1],  256),
    p(  32,  288,  256,   64, [ 256, 1], [   1,  256],   64),
    p(  32,  288,   64,  256, [   1, 288], [ 256,    1],  256),
    p(   8,  576,  256,   96, [ 256, 1], [   1,  256],   96),
    p(   8,  576,   96,  256, [   1, 576], [ 256,    1],  256),
    p(   8,   64,  864,  256, [ 864, 1], [ 256,    1],  256),
    p(   8,  864,  256,   64, [ 256, 1], [   1,  256],   64),
    p(   8,  864,   64,  256, [   1, 864], [ 256,    1],  256),
    p(   8,   96,  576,  256, [ 576, 1], [ 256,    1],  256),
];
