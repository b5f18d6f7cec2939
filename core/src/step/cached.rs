//! A step whose loss couples its examples through their embeddings (a contrastive loss
//! over in-batch negatives), split into micro-batches and still the whole step's gradient:
//! gradient caching (Gao et al. 2021, "Scaling Deep Contrastive Learning Batch Size under
//! Memory Limited Setup", GradCache).
//!
//! 1. Each micro-batch is embedded with the parameters untracked: nothing is kept for
//!    backward, and only the embeddings (`[step examples, width]`) stay.
//! 2. The step's loss over all of them, differentiated from the embeddings (and from any
//!    parameter the loss holds itself, such as a learned temperature): the gradient with
//!    respect to each embedding is the cache.
//! 3. Each micro-batch is embedded again with autodiff and back-propagated from its part of
//!    the cache (the gradient of `sum(embedding * cached gradient)`, which is the cached
//!    gradient at the embedding). The micro-batches' parameter gradients and the loss's own
//!    sum to the whole step's, by the chain rule: the loss depends on the parameters only
//!    through the embeddings and its own.
//!
//! The last micro-batch is embedded with autodiff in step 1 already, and back-propagated
//! from its kept graph after step 2 (the "one forward fewer" of GradCache's later
//! implementations): step 3 then re-embeds the others only. Its graph is what step 3 holds
//! for any micro-batch, and steps 1 and 2 hold nothing else of that size, so the step's
//! peak is unchanged.
//!
//! What it costs: one more forward per micro-batch but the last than plain accumulation,
//! and the cache (the embeddings and their gradients) for the whole step.

use burn::optim::{GradientsAccumulator, GradientsParams};
use burn::tensor::Tensor;

use super::{StepError, sample_device_pool};
use crate::memory::MemoryMeter;
use crate::model::{StepLoss, untracked};
use crate::readback::{self, LocalFuture};
use crate::task::{StepContext, TrainingTask};

/// The summed gradients of phase `phase` over `micro_batches`, equal to one micro-batch of
/// all of them, with the step's loss and reported term.
pub fn cached_gradients<'a, T: TrainingTask>(
    task: &'a T,
    networks: &'a T::Networks,
    phase: usize,
    micro_batches: Vec<T::Batch>,
    step_examples: usize,
    context: StepContext,
    meter: &'a mut MemoryMeter,
) -> LocalFuture<'a, Result<(GradientsParams, f64, f64), StepError>> {
    Box::pin(async move {
        let seen: usize = micro_batches.iter().map(|b| task.examples_in(b)).sum();
        if seen != step_examples {
            return Err(StepError::Incomplete {
                seen,
                expected: step_examples,
            });
        }
        // 1. The embeddings, untracked but the last's.
        let mut micro_batches = micro_batches;
        let last = micro_batches.pop().ok_or(StepError::Incomplete {
            seen: 0,
            expected: step_examples,
        })?;
        let untracked = untracked(networks);
        let mut parts = Vec::with_capacity(micro_batches.len() + 1);
        for batch in micro_batches.iter().cloned() {
            let embedded = task
                .embed(&untracked, phase, batch, context)
                .ok_or(StepError::Coupled)?
                .detach();
            sample_device_pool(&embedded.device(), meter).await?;
            meter.check()?;
            parts.push(embedded);
        }
        drop(untracked);
        let last_examples = task.examples_in(&last);
        let last_embedded = task
            .embed(networks, phase, last, context)
            .ok_or(StepError::Coupled)?;
        sample_device_pool(&last_embedded.device(), meter).await?;
        meter.check()?;
        parts.push(last_embedded.clone().detach());
        // 2. The step's loss from the cached embeddings, and its gradient there.
        let cache = Tensor::cat(parts, 0).require_grad();
        let StepLoss { total, reported } = task
            .loss_of_embeddings(networks, phase, cache.clone())
            .ok_or(StepError::Coupled)?;
        let scale = context.precision.loss_scale();
        let scaled = total.mul_scalar(scale);
        let mut grads = scaled.clone().backward();
        readback::settle(&scaled.device()).await?;
        meter.check()?;
        let loss = readback::scalar(scaled).await? as f64 / scale as f64;
        let reported = readback::scalar(reported).await? as f64;
        let cached = cache
            .grad_remove(&mut grads)
            .ok_or(StepError::Coupled)?
            .detach();
        let mut accumulator = GradientsAccumulator::<T::Networks>::new();
        accumulator.accumulate(networks, task.phase_gradients(networks, phase, grads));
        // 3. The last micro-batch from its kept graph, then each other one embedded again, each
        // back-propagated from its part of the cache.
        let backward = |embedded: Tensor<2>, start: usize, n: usize| {
            let surrogate = (embedded * cached.clone().narrow(0, start, n)).sum();
            surrogate.backward()
        };
        let grads = backward(
            last_embedded.clone(),
            step_examples - last_examples,
            last_examples,
        );
        readback::settle(&last_embedded.device()).await?;
        meter.check()?;
        drop(last_embedded);
        accumulator.accumulate(networks, task.phase_gradients(networks, phase, grads));
        let mut start = 0;
        for batch in micro_batches {
            let n = task.examples_in(&batch);
            let embedded = task
                .embed(networks, phase, batch, context)
                .ok_or(StepError::Coupled)?;
            sample_device_pool(&embedded.device(), meter).await?;
            let grads = backward(embedded.clone(), start, n);
            readback::settle(&embedded.device()).await?;
            meter.check()?;
            accumulator.accumulate(networks, task.phase_gradients(networks, phase, grads));
            start += n;
        }
        Ok((accumulator.grads(), loss, reported))
    })
}

#[cfg(test)]
mod tests {
    //! A contrastive step cut into micro-batches: cached, the whole step's parameters; plain
    //! accumulation, another function's.

    use burn::module::{Module, Param};
    use burn::nn::{Linear, LinearConfig};
    use burn::optim::SgdConfig;
    use burn::tensor::{Device, Distribution, Tensor, TensorData};

    use crate::backend::BackendKind;
    use crate::memory::MemoryMeter;
    use crate::model::{AnalyticStep, StepLoss, flat_parameters, largest_difference};
    use crate::precision::Precision;
    use crate::readback::block_on;
    use crate::step::{StepSettings, optimizer_step};
    use crate::task::{Coupling, StepContext, TrainingTask};

    #[derive(Module, Debug)]
    struct TwoTowers {
        audio: Linear,
        text: Linear,
        /// The logits' scale, as its logarithm (CLIP's learned temperature).
        log_scale: Param<Tensor<1>>,
    }

    /// Audio `[n, 8]` and text `[n, 6]` of `n` pairs.
    #[derive(Debug, Clone)]
    struct Pairs(Tensor<2>, Tensor<2>);

    /// A loss that couples every pair with every other (the log of the summed exponentials
    /// of all audio-text scores: the contrastive model's InfoNCE is tested in
    /// `crate::contrastive`); `cached` says whether it declares its coupling through
    /// embeddings (else it claims independent examples, as plain accumulation assumes).
    #[derive(Debug, Clone)]
    struct Contrastive {
        cached: bool,
    }

    impl TrainingTask for Contrastive {
        type Networks = TwoTowers;
        type Batch = Pairs;

        fn phases(&self) -> &'static [&'static str] {
            &["contrastive"]
        }

        fn coupling(&self) -> Coupling {
            if self.cached {
                Coupling::Embeddings
            } else {
                Coupling::PerExample
            }
        }

        fn networks(&self, device: &Device) -> TwoTowers {
            TwoTowers {
                audio: LinearConfig::new(8, 4).init(device),
                text: LinearConfig::new(6, 4).init(device),
                log_scale: Param::from_tensor(Tensor::from_data(
                    TensorData::new(vec![0.0f32], [1]),
                    device,
                )),
            }
        }

        fn examples_in(&self, batch: &Pairs) -> usize {
            batch.0.dims()[0]
        }

        fn measuring_batch(&self, examples: usize, device: &Device) -> Pairs {
            let normal = Distribution::Normal(0.0, 1.0);
            Pairs(
                Tensor::random([examples, 8], normal, device),
                Tensor::random([examples, 6], normal, device),
            )
        }

        fn embed(
            &self,
            networks: &TwoTowers,
            _: usize,
            batch: Pairs,
            _: StepContext,
        ) -> Option<Tensor<2>> {
            let audio = networks.audio.forward(batch.0);
            let text = networks.text.forward(batch.1);
            Some(Tensor::cat(vec![audio, text], 1))
        }

        fn loss_of_embeddings(
            &self,
            networks: &TwoTowers,
            _: usize,
            embeddings: Tensor<2>,
        ) -> Option<StepLoss> {
            let audio = embeddings.clone().narrow(1, 0, 4);
            let text = embeddings.narrow(1, 4, 4);
            let scale = networks.log_scale.val().exp().reshape([1, 1]);
            let logits = audio.matmul(text.transpose()) * scale;
            let total = logits.exp().sum().log();
            Some(StepLoss {
                reported: total.clone(),
                total,
            })
        }

        fn loss(
            &self,
            networks: &TwoTowers,
            phase: usize,
            batch: Pairs,
            context: StepContext,
        ) -> StepLoss {
            let embedded = self.embed(networks, phase, batch, context).unwrap();
            self.loss_of_embeddings(networks, phase, embedded).unwrap()
        }

        fn parameters(&self) -> u64 {
            (8 * 4 + 4 + 6 * 4 + 4 + 1) as u64
        }

        fn step_memory(&self, _: BackendKind, _: Precision, _: usize) -> AnalyticStep {
            AnalyticStep::default()
        }
    }

    /// The parameters after one SGD step over `pairs` cut into micro-batches of `cut`.
    fn stepped(task: &Contrastive, start: &TwoTowers, pairs: &Pairs, cut: usize) -> Vec<f32> {
        let n = task.examples_in(pairs);
        let batches: Vec<Pairs> = (0..n / cut)
            .map(|i| {
                Pairs(
                    pairs.0.clone().narrow(0, i * cut, cut),
                    pairs.1.clone().narrow(0, i * cut, cut),
                )
            })
            .collect();
        let device = pairs.0.device();
        let mut meter = MemoryMeter::new(BackendKind::Flex, &device);
        let settings = StepSettings {
            step_examples: n,
            lr: 0.5,
            clip_norm: None,
            warming_up: false,
            precision: Precision::F32,
        };
        // Plain SGD: the parameters move by the gradient itself, so equal parameters are
        // equal gradients.
        let (next, _) = block_on(optimizer_step(
            task,
            start.clone(),
            &mut SgdConfig::new().init(),
            batches,
            settings,
            &mut meter,
        ))
        .unwrap();
        flat_parameters(&next)
    }

    #[test]
    fn cached_micro_batches_step_as_the_whole_batch_and_plain_accumulation_does_not() {
        let device = BackendKind::Flex.device().unwrap().autodiff();
        device.seed(17);
        let cached = Contrastive { cached: true };
        let start = cached.networks(&device);
        let pairs = cached.measuring_batch(16, &device);
        let whole = stepped(&cached, &start, &pairs, 16);
        let moved = largest_difference(&whole, &flat_parameters(&start));
        assert!(
            moved > 1e-3,
            "the whole step moved the parameters by {moved}"
        );
        for cut in [8, 4, 1] {
            let worst = largest_difference(&whole, &stepped(&cached, &start, &pairs, cut));
            assert!(worst < 1e-5, "cached in micro-batches of {cut}: {worst}");
        }
        // The same loss accumulated micro-batch by micro-batch: each sees 3 negatives, not
        // 15, and its gradient is another function's.
        let plain = Contrastive { cached: false };
        let accumulated = stepped(&plain, &start, &pairs, 4);
        let worst = largest_difference(&whole, &accumulated);
        assert!(
            worst > 100.0 * 1e-5,
            "plain accumulation came within {worst}"
        );
    }
}
