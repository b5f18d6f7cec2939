//! The default model's matrix products ([`shapes::STEP`]), each run as Headroom runs it
//! (`gemm::gemm`, one thread, a row-major destination), for the native binary and for the
//! page (`page.html`), which calls the exports below and times them with `performance.now`.

pub mod shapes;

use shapes::{Product, STEP};

/// Operands and destination of one product, filled with small values.
pub struct Operands {
    lhs: Vec<f32>,
    rhs: Vec<f32>,
    dst: Vec<f32>,
}

impl Operands {
    pub fn new(p: &Product) -> Self {
        let span =
            |rows: usize, cols: usize, [rs, cs]: [usize; 2]| (rows - 1) * rs + (cols - 1) * cs + 1;
        let fill = |len: usize, step: usize| (0..len).map(|i| (i % step) as f32 * 0.1).collect();
        Self {
            lhs: fill(span(p.m, p.k, p.lhs_strides), 7),
            rhs: fill(span(p.k, p.n, p.rhs_strides), 5),
            dst: vec![0.0; (p.m - 1) * p.dst_row_stride + p.n],
        }
    }

    /// `dst = lhs @ rhs`, `reps` times; returns one value of the result.
    pub fn multiply(&mut self, p: &Product, reps: usize) -> f32 {
        for _ in 0..reps {
            // SAFETY: each buffer spans every element its strides reach (`new`).
            unsafe {
                gemm::gemm(
                    p.m,
                    p.n,
                    p.k,
                    self.dst.as_mut_ptr(),
                    1,
                    p.dst_row_stride as isize,
                    false,
                    self.lhs.as_ptr(),
                    p.lhs_strides[1] as isize,
                    p.lhs_strides[0] as isize,
                    self.rhs.as_ptr(),
                    p.rhs_strides[1] as isize,
                    p.rhs_strides[0] as isize,
                    1.0,
                    1.0,
                    false,
                    false,
                    false,
                    gemm::Parallelism::None,
                );
            }
        }
        self.dst[0]
    }

    /// The largest difference between the product and a plain triple loop over the same
    /// operands, relative to the largest value: a kernel that is fast but wrong shows here.
    pub fn error(&mut self, p: &Product) -> f32 {
        self.multiply(p, 1);
        let (mut worst, mut largest) = (0.0f32, 0.0f32);
        for i in 0..p.m {
            for j in 0..p.n {
                let want: f32 = (0..p.k)
                    .map(|l| {
                        self.lhs[i * p.lhs_strides[0] + l * p.lhs_strides[1]]
                            * self.rhs[l * p.rhs_strides[0] + j * p.rhs_strides[1]]
                    })
                    .sum();
                worst = worst.max((self.dst[i * p.dst_row_stride + j] - want).abs());
                largest = largest.max(want.abs());
            }
        }
        worst / largest.max(f32::MIN_POSITIVE)
    }
}

/// Floating-point operations of one product.
pub fn flops(p: &Product) -> f64 {
    2.0 * (p.m * p.k * p.n) as f64
}

/// Repetitions that take about 0.3 GFLOP, at least 3.
pub fn reps(p: &Product) -> usize {
    ((3e8 / flops(p)) as usize).max(3)
}

#[unsafe(no_mangle)]
pub extern "C" fn product_count() -> usize {
    STEP.len()
}

#[unsafe(no_mangle)]
pub extern "C" fn product_calls(i: usize) -> usize {
    STEP[i].calls
}

#[unsafe(no_mangle)]
pub extern "C" fn product_reps(i: usize) -> usize {
    reps(&STEP[i])
}

thread_local! {
    /// The page's prepared product: its index and operands.
    static PREPARED: std::cell::RefCell<Option<(usize, Operands)>> = const { std::cell::RefCell::new(None) };
}

/// Makes product `i`'s operands, outside the page's timing.
#[unsafe(no_mangle)]
pub extern "C" fn prepare(i: usize) {
    PREPARED.with(|slot| *slot.borrow_mut() = Some((i, Operands::new(&STEP[i]))));
}

/// `f` on the prepared product and its operands; NaN if none is prepared.
fn on_prepared(f: impl FnOnce(&Product, &mut Operands) -> f32) -> f32 {
    PREPARED.with(|slot| match slot.borrow_mut().as_mut() {
        Some((i, operands)) => f(&STEP[*i], operands),
        None => f32::NAN,
    })
}

/// The prepared product's relative error (`Operands::error`).
#[unsafe(no_mangle)]
pub extern "C" fn error() -> f32 {
    on_prepared(|p, operands| operands.error(p))
}

/// The prepared product, `reps` times (the page times the call).
#[unsafe(no_mangle)]
pub extern "C" fn multiply(reps: usize) -> f32 {
    on_prepared(|p, operands| operands.multiply(p, reps))
}
