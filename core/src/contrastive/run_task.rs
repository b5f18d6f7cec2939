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
        // By length, the most a micro-batch holds is the shortest bucket's and the least
        // the longest's: a step of long examples is cut even where short ones fit whole.
        let (fewest, most) =
            config
                .length_buckets
                .as_ref()
                .map_or((config.micro_batch, config.micro_batch), |b| {
                    let held = b.buckets.iter().map(|b| b.examples);
                    (held.clone().min().unwrap_or(1), held.max().unwrap_or(1))
                });
        Some(negatives_words(
            self.negatives,
            step,
            (fewest.min(step), most.min(step)),
            self.cache_bytes(step),
        ))
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

/// What the run says of the negatives each pair sees, in steps of `step` pairs whose
/// micro-batches hold from `fewest` to `most` pairs; `cache_bytes`: what gradient caching
/// holds for a step.
fn negatives_words(
    negatives: Negatives,
    step: usize,
    (fewest, most): (usize, usize),
    cache_bytes: u64,
) -> String {
    let others = step.saturating_sub(1);
    let cut = fewest < step;
    // A small step's cache is kilobytes, which whole MiB would call nothing.
    let cache = if cache_bytes < 1 << 20 {
        format!("{} KiB", cache_bytes.div_ceil(1 << 10))
    } else {
        crate::size::human(cache_bytes)
    };
    match negatives {
        Negatives::Step if cut => {
            let which = if most < step {
                "however the step is cut"
            } else {
                "in a step cut for its long examples too"
            };
            format!(
                "Negatives: each pair is contrasted with the other {others} pairs of its step, \
                 {which} (gradient caching; its cache and the step's loss hold {cache})"
            )
        }
        Negatives::MicroBatch if cut => {
            let share = if most < step {
                format!("at most {} of the step's {others}", most.saturating_sub(1))
            } else {
                format!(
                    "as few as {} of the step's {others} in a step cut for its long examples",
                    fewest.saturating_sub(1)
                )
            };
            format!(
                "Negatives: each pair is contrasted only with the other pairs of its \
                 micro-batch ({share}): plain accumulation, a loss other than the step's; \
                 --negatives step gives each pair all {others}"
            )
        }
        _ => format!(
            "Negatives: each pair is contrasted with the other {others} pairs of its step (the \
             whole step is one micro-batch)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plan by length whose shortest bucket holds the whole step still cuts a step of long
    /// examples (speech-clap at 300 MiB: 64 of the shortest, 8 of the longest): the words
    /// say so, where they had said the whole step was one micro-batch.
    #[test]
    fn a_step_cut_only_for_its_long_examples_is_said_to_be_cut() {
        let by_length = negatives_words(Negatives::Step, 64, (8, 64), 1 << 20);
        assert!(by_length.contains("other 63 pairs"), "{by_length}");
        assert!(
            by_length.contains("cut for its long examples"),
            "{by_length}"
        );
        assert!(by_length.contains("hold 1 MiB"), "{by_length}");
        let small = negatives_words(Negatives::Step, 64, (8, 64), 100_000);
        assert!(small.contains("hold 98 KiB"), "{small}");
        let fixed = negatives_words(Negatives::Step, 128, (16, 16), 1 << 20);
        assert!(fixed.contains("however the step is cut"), "{fixed}");
        let whole = negatives_words(Negatives::Step, 64, (64, 64), 1 << 20);
        assert!(
            whole.contains("the whole step is one micro-batch"),
            "{whole}"
        );
        let plain = negatives_words(Negatives::MicroBatch, 128, (16, 16), 0);
        assert!(plain.contains("at most 15 of the step's 127"), "{plain}");
        let plain_by_length = negatives_words(Negatives::MicroBatch, 64, (8, 64), 0);
        assert!(
            plain_by_length.contains("as few as 7 of the step's 63"),
            "{plain_by_length}"
        );
        let plain_whole = negatives_words(Negatives::MicroBatch, 64, (64, 64), 0);
        assert!(
            plain_whole.contains("whole step is one micro-batch"),
            "{plain_whole}"
        );
    }
}
