//! The contrastive model over the speech corpus: opened and fitted as the recogniser's data
//! (`crate::speech`), and measured on the held-out splits by the InfoNCE loss over each
//! whole split and by retrieval recall both ways.

use burn::module::Module;
use burn::tensor::{Device, Tensor};

use super::retrieval::{self, Recall};
use super::{ContrastiveConfig, Negatives, PairNetworks};
use crate::config::TrainConfig;
use crate::data::LoaderOptions;
use crate::events::{Results, ResultsRow};
use crate::readback::{self, LocalFuture};
use crate::speech::{HeldOut, SpeechData};
use crate::task::TrainingTask;
use crate::train::{EvalBatches, Evaluation, RunTask, TrainError};

/// The ks retrieval recall is measured at.
pub const RECALL_AT: [usize; 3] = [1, 5, 10];

impl RunTask for ContrastiveConfig {
    type Data = SpeechData;

    fn open(
        self,
        config: &TrainConfig,
        loader: &LoaderOptions,
    ) -> Result<(Self, SpeechData), TrainError> {
        let (speech, data) = self.speech.clone().open(config, loader)?;
        Ok((Self { speech, ..self }, data))
    }

    /// The vocabulary and the longest utterance, as the recogniser reads them.
    fn for_data(mut self, data: &SpeechData) -> Result<Self, TrainError> {
        self.speech = self.speech.for_data(data)?;
        Ok(self)
    }

    /// How many negatives each pair sees: the step's, or with plain accumulation only its
    /// micro-batch's.
    fn step_words(&self, config: &TrainConfig) -> Option<String> {
        let step = config.effective_batch();
        let largest = config
            .length_buckets
            .as_ref()
            .map_or(config.micro_batch, |b| {
                b.buckets.iter().map(|b| b.examples).max().unwrap_or(1)
            })
            .min(step);
        Some(match self.negatives {
            Negatives::Step if largest < step => format!(
                "Negatives: each pair is contrasted with the other {} pairs of its step, \
                 however the step is cut (gradient caching; its cache and the step's loss \
                 hold {})",
                step.saturating_sub(1),
                crate::size::human(self.cache_bytes(step))
            ),
            Negatives::Step => format!(
                "Negatives: each pair is contrasted with the other {} pairs of its step (the \
                 whole step is one micro-batch)",
                step.saturating_sub(1)
            ),
            Negatives::MicroBatch if largest < step => format!(
                "Negatives: each pair is contrasted only with the other pairs of its \
                 micro-batch (at most {} of the step's {}): plain accumulation, a loss other \
                 than the step's; --negatives step gives each pair all {}",
                largest.saturating_sub(1),
                step.saturating_sub(1),
                step.saturating_sub(1)
            ),
            Negatives::MicroBatch => format!(
                "Negatives: each pair is contrasted with the other {} pairs of its step (the \
                 whole step is one micro-batch)",
                step.saturating_sub(1)
            ),
        })
    }

    /// The InfoNCE loss over the whole validation split at once: every pair against every
    /// other (more negatives than a training step's, so it is not the train loss's scale).
    fn validation_loss<'a>(
        &'a self,
        networks: &'a PairNetworks,
        data: &'a SpeechData,
        device: &'a Device,
        batches: &'a EvalBatches,
    ) -> LocalFuture<'a, Result<f64, TrainError>> {
        Box::pin(async move {
            let networks = networks.valid();
            let embedded = embeddings(
                &networks,
                data,
                HeldOut::Validation,
                device,
                batches,
                &mut Vec::new(),
            )?;
            let Some(embedded) = embedded else {
                return Ok(f64::NAN);
            };
            let loss = self.info_nce(&networks, embedded).total;
            Ok(f64::from(readback::scalar(loss).await?))
        })
    }

    /// Recall at 1, 5 and 10 both ways, on the validation and test splits: each split's
    /// pairs retrieved among themselves.
    fn evaluate<'a>(
        &'a self,
        networks: &'a PairNetworks,
        data: &'a SpeechData,
        device: &'a Device,
        batches: &'a EvalBatches,
        skipped: Vec<String>,
    ) -> LocalFuture<'a, Result<Evaluation, TrainError>> {
        Box::pin(async move {
            let networks = networks.valid();
            let mut skipped = skipped;
            let mut rows = Vec::new();
            for (label, split) in [("validation", HeldOut::Validation), ("test", HeldOut::Test)] {
                let Some(embedded) =
                    embeddings(&networks, data, split, device, batches, &mut skipped)?
                else {
                    continue;
                };
                let n = embedded.dims()[0];
                let w = self.width;
                let audio = embedded.clone().narrow(1, 0, w);
                let text = embedded.narrow(1, w, w);
                let similarity = readback::floats(audio.matmul(text.transpose())).await?;
                let Recall {
                    audio_to_text,
                    text_to_audio,
                    ..
                } = retrieval::recall(&similarity, n, &RECALL_AT);
                rows.push(ResultsRow {
                    label: label.into(),
                    examples: n,
                    values: [audio_to_text, text_to_audio].concat(),
                });
            }
            let measures = ["audio to text", "text to audio"]
                .iter()
                .flat_map(|way| RECALL_AT.map(|k| format!("R@{k} {way}")))
                .collect();
            Ok(Evaluation::Results(Results {
                about: "retrieval among each split's own pairs: the share of utterances whose \
                        transcript is among the k it scores highest, and of transcripts whose \
                        utterance is (chance: k / the split's pairs)"
                    .into(),
                measures,
                rows,
                skipped,
            }))
        })
    }
}

/// Every pair's embeddings of a held-out split, `[pairs, 2 x width]`; `None` for an empty
/// split.
fn embeddings(
    networks: &PairNetworks,
    data: &SpeechData,
    split: HeldOut,
    device: &Device,
    batches: &EvalBatches,
    skipped: &mut Vec<String>,
) -> Result<Option<Tensor<2>>, TrainError> {
    let parts: Vec<Tensor<2>> = data
        .held_out_batches(split, batches, device, skipped)?
        .into_iter()
        .map(|batch| networks.embed(batch))
        .collect();
    Ok((!parts.is_empty()).then(|| Tensor::cat(parts, 0)))
}
