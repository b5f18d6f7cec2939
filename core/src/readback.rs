//! Reading results back from a device in the way every platform allows: awaited. A web
//! page cannot block while its GPU works (burn's synchronous reads panic there), so the
//! engine's reads are `async`, and a native caller blocks on the whole operation once
//! ([`block_on`]) as burn's own synchronous reads block on each. One engine, not two.

use std::future::Future;
use std::pin::Pin;

use burn::tensor::{Device, Tensor};

/// An engine operation in progress, on this thread: what the model-erased front-end API
/// returns (`Trainer`'s run, a dispatch by model name), boxed since its type depends on the
/// model. The engine's generic steps (`crate::step`, the planner's measurements, a run's
/// step) return one too, for the build's sake: rustc compiles an `async` body into every
/// codegen unit that awaits it and LLVM then inlines it into its caller's, so the step's
/// body was compiled again inside each measurement and each kind of step. Boxed, each body
/// is compiled once per task: headroom-core's optimised IR went from 2.19 to 1.57 million
/// lines and its release build from 208 to 169 s of CPU (docs/BENCHMARKS-HISTORY.md,
/// "CI"); one allocation per step or micro-batch is nothing beside its tensors.
pub type LocalFuture<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;

/// A read that failed: the device's error in its words (an allocation that failed surfaces
/// here on the web, where nothing waits for the device without a read).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("the device failed while computing a result: {0}")]
pub struct ReadbackError(pub String);

/// The value of a one-element tensor, waiting for the device to compute it.
pub async fn scalar(tensor: Tensor<1>) -> Result<f32, ReadbackError> {
    tensor
        .into_scalar_async::<f32>()
        .await
        .map_err(|error| ReadbackError(format!("{error:?}")))
}

/// A tensor's values as f32, waiting for the device to compute them.
pub async fn floats<const D: usize>(tensor: Tensor<D>) -> Result<Vec<f32>, ReadbackError> {
    let data = tensor
        .into_data_async()
        .await
        .map_err(|error| ReadbackError(format!("{error:?}")))?;
    data.convert::<f32>()
        .try_into_vec::<f32>()
        .map_err(|error| ReadbackError(format!("{error:?}")))
}

/// Waits until the device has run what was queued, and reports the error it met (an
/// allocation that failed, on cubecl backends). In a web page there is no waiting without
/// a read: the next [`scalar`] or [`floats`] waits instead, and reports the error.
pub async fn settle(device: &Device) -> Result<(), ReadbackError> {
    #[cfg(not(target_arch = "wasm32"))]
    {
        device
            .sync()
            .map_err(|error| ReadbackError(error.to_string()))
    }
    #[cfg(target_arch = "wasm32")]
    {
        let _ = device;
        Ok(())
    }
}

/// Runs an engine operation to its end on this thread: how native front-ends call the
/// `async` engine. Not in a web page, which awaits instead.
#[cfg(not(target_arch = "wasm32"))]
pub fn block_on<T>(future: impl Future<Output = T>) -> T {
    futures_lite::future::block_on(future)
}
