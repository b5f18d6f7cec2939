//! Matrix products on views into row-major `f32` buffers, through the `gemm` crate: a view
//! may be read transposed, or be a block of columns inside wider rows (one attention head's
//! features among all heads'), so that the kernels multiply in place without copying
//! operands into contiguous matrices first.

/// A `rows x cols` matrix read from `data`: element (r, c) at `r * row_stride + c *
/// col_stride`.
#[derive(Clone, Copy)]
pub struct Mat<'a> {
    data: &'a [f32],
    rows: usize,
    cols: usize,
    row_stride: usize,
    col_stride: usize,
}

impl<'a> Mat<'a> {
    /// The whole of `data`, row-major.
    pub fn new(data: &'a [f32], rows: usize, cols: usize) -> Self {
        debug_assert_eq!(data.len(), rows * cols);
        Self::strided(data, rows, cols, cols)
    }

    /// `rows x cols` starting at `data[0]`, rows `row_stride` apart (columns adjacent).
    pub fn strided(data: &'a [f32], rows: usize, cols: usize, row_stride: usize) -> Self {
        let mat = Self {
            data,
            rows,
            cols,
            row_stride,
            col_stride: 1,
        };
        assert!(mat.extent() <= data.len(), "matrix view past its buffer");
        mat
    }

    /// The same matrix read transposed.
    pub fn t(self) -> Self {
        Self {
            rows: self.cols,
            cols: self.rows,
            row_stride: self.col_stride,
            col_stride: self.row_stride,
            ..self
        }
    }

    pub fn shape(&self) -> [usize; 2] {
        [self.rows, self.cols]
    }

    /// One past the last element the view reads.
    fn extent(&self) -> usize {
        if self.rows == 0 || self.cols == 0 {
            0
        } else {
            (self.rows - 1) * self.row_stride + (self.cols - 1) * self.col_stride + 1
        }
    }
}

/// `dst (+)= lhs @ rhs`, `dst` row-major and contiguous; single-threaded (callers split
/// the batch).
pub fn gemm(dst: &mut [f32], accumulate: bool, lhs: Mat, rhs: Mat) {
    let n = rhs.shape()[1];
    assert_eq!(dst.len(), lhs.shape()[0] * n, "destination size");
    // SAFETY: `dst` holds exactly the `m x n` row-major result.
    unsafe { gemm_into(dst.as_mut_ptr(), n, accumulate, lhs, rhs, 1.0) }
}

/// `dst = lhs @ rhs` into the `m x n` block at the start of `dst`, rows `dst_row_stride`
/// apart; single-threaded.
pub fn gemm_block(dst: &mut [f32], dst_row_stride: usize, lhs: Mat, rhs: Mat) {
    let [m, n] = [lhs.shape()[0], rhs.shape()[1]];
    assert!(
        m == 0 || n == 0 || (m - 1) * dst_row_stride + n <= dst.len(),
        "destination block past its buffer"
    );
    assert!(n <= dst_row_stride || m <= 1, "destination rows overlap");
    // SAFETY: every element written lies inside `dst` (checked above), which is borrowed
    // mutably for the call.
    unsafe { gemm_into(dst.as_mut_ptr(), dst_row_stride, false, lhs, rhs, 1.0) }
}

/// `dst (+)= scale * lhs @ rhs` into the `m x n` block at `dst`, rows `dst_row_stride`
/// apart; single-threaded.
///
/// # Safety
/// `dst` must be valid for writes at `r * dst_row_stride + c` for every `r < m`, `c < n`,
/// and nothing else may read or write those elements during the call.
pub unsafe fn gemm_into(
    dst: *mut f32,
    dst_row_stride: usize,
    accumulate: bool,
    lhs: Mat,
    rhs: Mat,
    scale: f32,
) {
    let [m, k] = lhs.shape();
    let [k2, n] = rhs.shape();
    assert_eq!(k, k2, "inner dimensions");
    // SAFETY: the views' extents were checked against their buffers when made; the
    // destination is the caller's promise.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst,
            1,
            dst_row_stride as isize,
            accumulate,
            lhs.data.as_ptr(),
            lhs.col_stride as isize,
            lhs.row_stride as isize,
            rhs.data.as_ptr(),
            rhs.col_stride as isize,
            rhs.row_stride as isize,
            // gemm's alpha scales what `dst` held, its beta the product.
            1.0,
            scale,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}
