//! The S4D layer (a diagonal state space, Gu et al. 2022, "On the Parameterization and
//! Initialization of Diagonal State Space Models"): each channel a linear recurrence of
//! `d_state / 2` complex modes, discretised by zero-order hold, applied as its length-L
//! impulse response (the kernel) convolved causally with the input.
//!
//! The convolution is an FFT's (burn's `signal` `rfft`/`irfft`, sizes a power of two: the
//! input and kernel zero-padded to the power of two at or above twice the length, so that
//! the circular product is the linear one); on ndarray, which has no FFT in burn, it is a
//! direct causal convolution (a depthwise `conv1d` of the flipped kernel), exact but of
//! O(L^2) work: fine for the short crops a test or a first try runs, slow beyond.

use std::f64::consts::PI;

use burn::module::{Module, Param};
use burn::tensor::module::conv1d;
use burn::tensor::ops::ConvOptions;
use burn::tensor::{Device, Distribution, Int, Tensor};

/// The S4D layer's parameters: per channel its step size and per mode the continuous-time
/// pole `A` (real part stored as the log of its negation, so that it stays negative: a
/// stable recurrence), the output projection `C` (complex) and the skip `D`.
#[derive(Module, Debug)]
pub struct S4d {
    /// `[channels]`, log of the step size.
    log_dt: Param<Tensor<1>>,
    /// `[channels, modes]`: `A`'s real part is `-exp(log_a_real)`.
    log_a_real: Param<Tensor<2>>,
    /// `[channels, modes]`.
    a_imag: Param<Tensor<2>>,
    /// `[channels, modes]`, `C`'s real and imaginary parts.
    c_real: Param<Tensor<2>>,
    c_imag: Param<Tensor<2>>,
    /// `[channels]`.
    d: Param<Tensor<1>>,
}

/// The step sizes' range at initialisation, as S4D draws them (log-uniform).
const DT_MIN: f64 = 1e-3;
const DT_MAX: f64 = 1e-1;

impl S4d {
    /// S4D-Lin's initialisation: `A_n = -1/2 + i pi n`, `C` standard complex normal.
    pub fn new(channels: usize, state: usize, device: &Device) -> Self {
        let modes = (state / 2).max(1);
        let log_dt = Tensor::random(
            [channels],
            Distribution::Uniform(DT_MIN.ln(), DT_MAX.ln()),
            device,
        );
        let log_a_real = Tensor::full([channels, modes], 0.5f64.ln(), device);
        let a_imag = Tensor::<1, Int>::arange(0..modes as i64, device)
            .float()
            .mul_scalar(PI)
            .unsqueeze_dim::<2>(0)
            .repeat_dim(0, channels);
        // Each part of variance 1/2: the complex normal of variance 1.
        let normal = Distribution::Normal(0.0, 0.5f64.sqrt());
        Self {
            log_dt: Param::from_tensor(log_dt),
            log_a_real: Param::from_tensor(log_a_real),
            a_imag: Param::from_tensor(a_imag),
            c_real: Param::from_tensor(Tensor::random([channels, modes], normal, device)),
            c_imag: Param::from_tensor(Tensor::random([channels, modes], normal, device)),
            d: Param::from_tensor(Tensor::random(
                [channels],
                Distribution::Normal(0.0, 1.0),
                device,
            )),
        }
    }

    /// The discretised modes: `C'` and `dt A` as real and imaginary parts, `[channels,
    /// modes]` each: `K[l] = 2 Re(sum_n C'_n exp(dt A_n l))` with `C' = C (exp(dt A) - 1) /
    /// A` (zero-order hold).
    fn modes(&self) -> [Tensor<2>; 4] {
        let dt = self.log_dt.val().exp().unsqueeze_dim::<2>(1);
        let a_re = self.log_a_real.val().exp().neg();
        let a_im = self.a_imag.val();
        let dta_re = a_re.clone() * dt.clone();
        let dta_im = a_im.clone() * dt;
        // exp(dt A) - 1, divided by A (times A's conjugate over |A|^2).
        let grow = dta_re.clone().exp();
        let e_re = grow.clone() * dta_im.clone().cos() - 1.0;
        let e_im = grow * dta_im.clone().sin();
        let norm = a_re.clone().powi_scalar(2) + a_im.clone().powi_scalar(2);
        let q_re = (e_re.clone() * a_re.clone() + e_im.clone() * a_im.clone()) / norm.clone();
        let q_im = (e_im * a_re - e_re * a_im) / norm;
        let (c_re, c_im) = (self.c_real.val(), self.c_imag.val());
        let cp_re = c_re.clone() * q_re.clone() - c_im.clone() * q_im.clone();
        let cp_im = c_re * q_im + c_im * q_re;
        [cp_re, cp_im, dta_re, dta_im]
    }

    /// The channels' impulse responses over `length` steps, `[channels, length]`, built in
    /// blocks of `B` steps (about the square root of the length): step `bB + j` is
    /// `2 Re(sum_n (C'_n z_n^(bB)) z_n^j)` with `z = exp(dt A)`, a product of a `[blocks,
    /// modes]` and a `[modes, B]` matrix per channel. What autodiff keeps is
    /// `[channels, modes, blocks + B]` and the kernel itself, where the sum over every step
    /// at once ([`S4d::kernel_whole`]) keeps several `[channels, modes, length]` tensors: for
    /// seed 004's size at 16,000 steps, gigabytes.
    pub fn kernel(&self, length: usize) -> Tensor<2> {
        let device = self.d.val().device();
        let [cp_re, cp_im, dta_re, dta_im] = self.modes();
        let [channels, _] = cp_re.dims();
        let block = (length as f64).sqrt().ceil().max(1.0) as usize;
        let blocks = length.div_ceil(block);
        // z^(steps), `[channels, modes, steps.len()]`, as real and imaginary parts.
        let power = |steps: usize, stride: usize| {
            let at = Tensor::<1, Int>::arange(0..steps as i64, &device)
                .float()
                .mul_scalar(stride as f64)
                .reshape([1, 1, steps]);
            let decay = (dta_re.clone().unsqueeze_dim::<3>(2) * at.clone()).exp();
            let angle = dta_im.clone().unsqueeze_dim::<3>(2) * at;
            (decay.clone() * angle.clone().cos(), decay * angle.sin())
        };
        let (start_re, start_im) = power(blocks, block);
        let (step_re, step_im) = power(block, 1);
        let (cp_re, cp_im) = (cp_re.unsqueeze_dim::<3>(2), cp_im.unsqueeze_dim::<3>(2));
        // C' z^(bB): `[channels, blocks, modes]`.
        let w_re =
            (cp_re.clone() * start_re.clone() - cp_im.clone() * start_im.clone()).swap_dims(1, 2);
        let w_im = (cp_re * start_im + cp_im * start_re).swap_dims(1, 2);
        let k = w_re.matmul(step_re) - w_im.matmul(step_im);
        k.reshape([channels, blocks * block])
            .slice([0..channels, 0..length])
            .mul_scalar(2.0)
    }

    /// The impulse responses summed over every step at once, `[channels, modes, length]`
    /// held: what [`S4d::kernel`] computes in blocks, kept to test it against.
    #[cfg(test)]
    pub fn kernel_whole(&self, length: usize) -> Tensor<2> {
        let device = self.d.val().device();
        let [cp_re, cp_im, dta_re, dta_im] = self.modes();
        let steps = Tensor::<1, Int>::arange(0..length as i64, &device)
            .float()
            .reshape([1, 1, length]);
        let decay = (dta_re.unsqueeze_dim::<3>(2) * steps.clone()).exp();
        let angle = dta_im.unsqueeze_dim::<3>(2) * steps;
        let terms = (cp_re.unsqueeze_dim::<3>(2) * angle.clone().cos()
            - cp_im.unsqueeze_dim::<3>(2) * angle.sin())
            * decay;
        terms.sum_dim(1).squeeze_dim::<2>(1).mul_scalar(2.0)
    }

    /// The layer as a recurrence, for one step at a time: `x_t = z x_(t-1) + u_t` per mode
    /// (`z = exp(dt A)`), `y_t = 2 Re(C' x_t) + D u_t`, whose impulse response is
    /// [`S4d::kernel`].
    pub fn recurrence(&self) -> Recurrence {
        let [cp_re, cp_im, dta_re, dta_im] = self.modes();
        let grow = dta_re.exp();
        Recurrence {
            z_re: grow.clone() * dta_im.clone().cos(),
            z_im: grow * dta_im.sin(),
            cp_re,
            cp_im,
            d: self.d.val(),
        }
    }

    /// The layer over `u` (`[batch, channels, length]`): its kernel convolved causally
    /// with each channel, plus `D u`.
    pub fn forward(&self, u: Tensor<3>) -> Tensor<3> {
        let [_, channels, length] = u.dims();
        let kernel = self.kernel(length);
        let skip = u.clone() * self.d.val().reshape([1, channels, 1]);
        causal_convolution(u, kernel) + skip
    }
}

/// An S4D layer's recurrence ([`S4d::recurrence`]): `[channels, modes]` each, `d`
/// `[channels]`.
#[derive(Debug, Clone)]
pub struct Recurrence {
    z_re: Tensor<2>,
    z_im: Tensor<2>,
    cp_re: Tensor<2>,
    cp_im: Tensor<2>,
    d: Tensor<1>,
}

/// A recurrence's state for a batch, `[batch, channels, modes]` as real and imaginary parts.
pub type RecurrentState = (Tensor<3>, Tensor<3>);

impl Recurrence {
    /// One step over `u` (`[batch, channels]`) from `state` (none: zeros): the output and
    /// the next state.
    pub fn step(&self, u: Tensor<2>, state: Option<RecurrentState>) -> (Tensor<2>, RecurrentState) {
        let [batch, channels] = u.dims();
        let modes = self.z_re.dims()[1];
        let (x_re, x_im) = state.unwrap_or_else(|| {
            let zeros = Tensor::zeros([batch, channels, modes], &u.device());
            (zeros.clone(), zeros)
        });
        let (z_re, z_im) = (
            self.z_re.clone().unsqueeze::<3>(),
            self.z_im.clone().unsqueeze::<3>(),
        );
        let input = u.clone().unsqueeze_dim::<3>(2);
        let next_re = x_re.clone() * z_re.clone() - x_im.clone() * z_im.clone() + input;
        let next_im = x_re * z_im + x_im * z_re;
        let (cp_re, cp_im) = (
            self.cp_re.clone().unsqueeze::<3>(),
            self.cp_im.clone().unsqueeze::<3>(),
        );
        let y = (next_re.clone() * cp_re - next_im.clone() * cp_im)
            .sum_dim(2)
            .squeeze_dim::<2>(2)
            .mul_scalar(2.0);
        (y + u * self.d.clone().unsqueeze::<2>(), (next_re, next_im))
    }
}

/// `y[b, h, t] = sum_{s <= t} k[h, s] u[b, h, t - s]`: by FFT where burn has one for the
/// device, else directly.
pub fn causal_convolution(u: Tensor<3>, kernel: Tensor<2>) -> Tensor<3> {
    if has_fft(&u.device()) {
        fft_convolution(u, kernel)
    } else {
        direct_convolution(u, kernel)
    }
}

/// Whether burn computes FFTs on `device`: flex and the cubecl backends; not ndarray.
pub fn has_fft(device: &Device) -> bool {
    #[cfg(feature = "ndarray")]
    {
        use burn::backend::DispatchDevice;
        !matches!(
            device.clone().without_autodiff().as_dispatch(),
            DispatchDevice::NdArray(_)
        )
    }
    #[cfg(not(feature = "ndarray"))]
    {
        let _ = device;
        true
    }
}

/// The FFT size for a causal convolution of `length` steps: the power of two at or above
/// twice the length, so that nothing wraps around.
pub fn fft_size(length: usize) -> usize {
    (2 * length).next_power_of_two()
}

/// The causal convolution by FFT: both sides zero-padded to [`fft_size`], multiplied as
/// spectra, transformed back and cut to the length.
pub fn fft_convolution(u: Tensor<3>, kernel: Tensor<2>) -> Tensor<3> {
    let [batch, channels, length] = u.dims();
    let n = fft_size(length);
    let (u_re, u_im) = burn::signal::rfft(u, 2, Some(n));
    let (k_re, k_im) = burn::signal::rfft(kernel, 1, Some(n));
    let (k_re, k_im) = (k_re.unsqueeze_dim::<3>(0), k_im.unsqueeze_dim::<3>(0));
    let y_re = u_re.clone() * k_re.clone() - u_im.clone() * k_im.clone();
    let y_im = u_re * k_im + u_im * k_re;
    burn::signal::irfft(y_re, y_im, 2, Some(n)).slice([0..batch, 0..channels, 0..length])
}

/// The causal convolution directly: a depthwise `conv1d` of the flipped kernel over the
/// input padded on the left by `length - 1`.
pub fn direct_convolution(u: Tensor<3>, kernel: Tensor<2>) -> Tensor<3> {
    let [_, channels, length] = u.dims();
    let weight = kernel.flip([1]).reshape([channels, 1, length]);
    let padded = Tensor::cat(
        vec![
            Tensor::zeros([u.dims()[0], channels, length - 1], &u.device()),
            u,
        ],
        2,
    );
    conv1d(
        padded,
        weight,
        None,
        ConvOptions::new([1], [0], [1], channels),
    )
}
