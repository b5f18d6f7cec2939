//! The patch task: every [`ModelConfig`] trains as one, its network's patches of log-mel
//! spectrograms through one phase, examples independent.

use burn::tensor::Device;

use super::{StepContext, TrainingTask};
use crate::backend::BackendKind;
use crate::model::{AnalyticStep, ModelConfig, Patches, SpectrogramModel, StepLoss};
use crate::precision::Precision;

/// A model configuration is a task rather than being wrapped in one, so that a network
/// defined outside Headroom (implementing the two model traits) plans and trains through the
/// seam with nothing more to write.
impl<C: ModelConfig> TrainingTask for C {
    type Networks = C::Model;
    type Batch = Patches;

    fn phases(&self) -> &'static [&'static str] {
        &["model"]
    }

    fn networks(&self, device: &Device) -> C::Model {
        self.init(device)
    }

    fn examples_in(&self, batch: &Patches) -> usize {
        batch.len()
    }

    fn measuring_batch(&self, examples: usize, device: &Device) -> Patches {
        Patches::random(self.input(), self.classes(), examples, device)
    }

    fn loss(
        &self,
        networks: &C::Model,
        _phase: usize,
        batch: Patches,
        context: StepContext,
    ) -> StepLoss {
        networks.loss(batch, context.precision, context.warming_up)
    }

    fn parameters(&self) -> u64 {
        self.parameter_count()
    }

    fn step_memory(
        &self,
        backend: BackendKind,
        precision: Precision,
        examples: usize,
    ) -> AnalyticStep {
        self.analytic_step(backend, precision, examples)
    }
}
