//! The waveform task's data: each split's clips ([`Clips`]: the built-in spoken digits or a
//! user's folder of recordings) quantised to 8-bit levels and laid end to end, then cut into
//! crops of the run's `sample_len`; the train stream of shuffled epochs of crops; and what
//! the loop measures on the held-out splits (NLL in bits per sample).

use burn::module::Module;
use burn::tensor::Device;
use headroom_datasets::waveform::Quantizer;

use super::source::{Clips, Made};
use super::{SashimiConfig, levels_tensor};
use crate::config::TrainConfig;
use crate::data::{EpochOrder, LoaderOptions, Normalization, OnBadFile, report_bad_files};
use crate::events::{DatasetReport, Picture, Results, ResultsRow};
use crate::model::sashimi::Sashimi;
use crate::readback::{self, LocalFuture};
use crate::train::{EvalBatches, Evaluation, RunTask, TaskData, TrainError};

/// One split: its clips and, once made or read, their levels end to end.
pub(super) struct Split {
    clips: Clips,
    pub(super) levels: Vec<u8>,
    /// Samples in the split's first clip, where the validation picture is taken from.
    first_clip: usize,
}

impl Split {
    fn new(clips: Clips) -> Self {
        Self {
            clips,
            levels: Vec::new(),
            first_clip: 0,
        }
    }
}

pub struct WaveformData {
    config: SashimiConfig,
    pub(super) train: Split,
    validation: Split,
    test: Split,
    order: EpochOrder,
    seed: u64,
    on_bad_file: OnBadFile,
    /// Files left out as unreadable, in words.
    skipped: Vec<String>,
    resampled: usize,
}

impl WaveformData {
    /// Makes or reads `split`'s levels; its bad files fail the run or are left out, as
    /// the run's `on_bad_file` says.
    fn fill(&mut self, which: fn(&mut Self) -> &mut Split) -> Result<(), TrainError> {
        let Made {
            levels,
            first_clip,
            problems,
            resampled,
        } = which(self).clips.clone().levels(&self.config);
        report_bad_files(problems, self.on_bad_file, &mut self.skipped)?;
        self.resampled += resampled;
        let split = which(self);
        split.levels = levels;
        split.first_clip = first_clip;
        Ok(())
    }

    /// Whole crops in `split`.
    fn crops(&self, split: &Split) -> usize {
        split.levels.len() / self.config.sample_len.max(1)
    }

    /// The mean NLL in bits per sample over `split`'s crops, `batches.examples` at a time.
    async fn bits(
        &self,
        network: &Sashimi,
        split: &Split,
        device: &Device,
        batches: &EvalBatches,
    ) -> Result<f64, TrainError> {
        let len = self.config.sample_len;
        let crops = self.crops(split);
        let at_once = batches.examples.max(1);
        let (mut sum, mut first) = (0.0, 0);
        while first < crops {
            let count = at_once.min(crops - first);
            let levels = &split.levels[first * len..(first + count) * len];
            let nll = network.nll(levels_tensor(levels, count, device));
            sum += f64::from(readback::scalar(nll).await?) * count as f64;
            first += count;
        }
        Ok(sum / crops.max(1) as f64 / std::f64::consts::LN_2)
    }

    /// Where the clips came from, in words.
    fn source(&self) -> String {
        let quantizer = match self.config.quantizer {
            Quantizer::MuLaw => "mu-law",
            Quantizer::Linear => "linear",
        };
        let files = [&self.train, &self.validation, &self.test].map(|s| s.clips.len());
        let crops = format!(
            "each split's clips end to end in crops of {} samples",
            self.config.sample_len
        );
        match &self.config.folder {
            Some(folder) => format!(
                "the WAV and FLAC files under {} ({} train, {} validation, {} test; at {} Hz, \
                 {}{}{quantizer} 8-bit), {crops}",
                folder.root.display(),
                files[0],
                files[1],
                files[2],
                folder.sample_rate,
                match self.resampled {
                    0 => String::new(),
                    n => format!("{n} resampled, "),
                },
                if folder.stereo {
                    "stereo interleaved, "
                } else {
                    ""
                }
            ),
            None => {
                let digits = &self.config.digits;
                format!(
                    "generated spoken digits ({} voices, seed {}, {} clips of {} samples at {} \
                     Hz, {quantizer} 8-bit), {crops}",
                    digits.voices,
                    digits.seed,
                    files.iter().sum::<usize>(),
                    digits.clip_samples,
                    digits.sample_rate,
                )
            }
        }
    }
}

impl TaskData for WaveformData {
    type Batch = burn::tensor::Tensor<2, burn::tensor::Int>;

    /// Makes or reads the train and validation clips (and a folder's test files, so that a
    /// bad one is said before training); refuses a train split shorter than one crop.
    fn check(&mut self) -> Result<(), TrainError> {
        self.config.check_sample_len().map_err(TrainError::Task)?;
        self.fill(|data| &mut data.train)?;
        self.fill(|data| &mut data.validation)?;
        if self.config.folder.is_some() {
            self.fill(|data| &mut data.test)?;
        }
        let crops = self.crops(&self.train);
        if crops == 0 {
            return Err(TrainError::Task(format!(
                "the train split holds {} samples, fewer than one crop of {}: ask for a \
                 shorter crop (--sample-len) or more train clips",
                self.train.levels.len(),
                self.config.sample_len
            )));
        }
        self.order = EpochOrder::new(self.seed, crops);
        Ok(())
    }

    fn train_examples(&self) -> usize {
        self.crops(&self.train)
    }

    fn validation_examples(&self) -> usize {
        self.crops(&self.validation)
    }

    fn test_examples(&self) -> usize {
        match &self.test.clips {
            Clips::Digits(keys) => {
                self.config.digits.clip_samples * keys.len() / self.config.sample_len.max(1)
            }
            Clips::Files(_) => self.crops(&self.test),
        }
    }

    /// Stream positions are epochs of the train crops, each shuffled by the seed and its
    /// number ([`EpochOrder`]).
    fn micro_batch(
        &mut self,
        first: u64,
        count: usize,
        device: &Device,
    ) -> Result<Self::Batch, TrainError> {
        let len = self.config.sample_len;
        if self.crops(&self.train) == 0 {
            return Err(TrainError::Task(
                "the train clips were not made before training".into(),
            ));
        }
        let mut levels = Vec::with_capacity(count * len);
        for position in first..first + count as u64 {
            let crop = self.order.slot(position);
            levels.extend_from_slice(&self.train.levels[crop * len..(crop + 1) * len]);
        }
        Ok(levels_tensor(&levels, count, device))
    }

    /// Levels are not standardised: the network embeds them.
    fn normalization(&self) -> Normalization {
        Normalization {
            mean: 0.0,
            std: 1.0,
        }
    }

    fn keep_normalization(&mut self, _: Normalization) {}

    fn report(&self, _: &TrainConfig, loader: &LoaderOptions) -> DatasetReport {
        DatasetReport {
            source: self.source(),
            machine_types: Vec::new(),
            train_clips: self.train_examples(),
            validation_clips: self.validation_examples(),
            test_clips: self.test_examples(),
            resident: true,
            host_memory_bytes: loader.host_memory_bytes,
            skipped: self.skipped.clone(),
        }
    }
}

impl RunTask for SashimiConfig {
    type Data = WaveformData;

    fn open(
        self,
        config: &TrainConfig,
        loader: &LoaderOptions,
    ) -> Result<(Self, WaveformData), TrainError> {
        self.check_sample_len().map_err(TrainError::Task)?;
        let [train, validation, test] = Clips::of(&self)
            .map_err(|e| TrainError::Task(e.to_string()))?
            .map(Split::new);
        let data = WaveformData {
            config: self.clone(),
            train,
            validation,
            test,
            order: EpochOrder::new(config.seed, 1),
            seed: config.seed,
            on_bad_file: loader.on_bad_file,
            skipped: Vec::new(),
            resampled: 0,
        };
        Ok((self, data))
    }

    fn validation_loss<'a>(
        &'a self,
        network: &'a Sashimi,
        data: &'a WaveformData,
        device: &'a Device,
        batches: &'a EvalBatches,
    ) -> LocalFuture<'a, Result<f64, TrainError>> {
        Box::pin(async move {
            data.bits(&network.valid(), &data.validation, device, batches)
                .await
        })
    }

    /// The middle of the first validation clip above a clip the network generates (a
    /// quarter of a second each, the draws seeded alike at every validation).
    fn picture<'a>(
        &'a self,
        network: &'a Sashimi,
        data: &'a WaveformData,
        _: &'a Device,
    ) -> LocalFuture<'a, Result<Option<(Picture, String)>, TrainError>> {
        Box::pin(async move {
            let rate = data.config.sample_rate() as usize;
            let samples = (rate / 4).max(1);
            // The middle of the first clip, where a digit's word is.
            let clip = data.validation.first_clip.min(data.validation.levels.len());
            let from = clip.saturating_sub(samples) / 2;
            let quantizer = data.config.quantizer;
            let real = quantizer.samples(&data.validation.levels[from..(from + samples).min(clip)]);
            let made = super::sampling::sample(&network.valid(), 1, samples, 0).await?;
            let made = quantizer.samples(&made[0]);
            Ok(Some((
                super::picture::waveforms(&[&real, &made], 800),
                format!(
                    "waveforms of {samples} samples: the middle of a validation clip (top) and a clip \
                     the network generates one sample at a time (below)"
                ),
            )))
        })
    }

    /// NLL in bits per sample on the validation and test splits.
    fn evaluate<'a>(
        &'a self,
        network: &'a Sashimi,
        data: &'a WaveformData,
        device: &'a Device,
        batches: &'a EvalBatches,
        skipped: Vec<String>,
    ) -> LocalFuture<'a, Result<Evaluation, TrainError>> {
        Box::pin(async move {
            let network = network.valid();
            // The built-in test clips are made only now; a folder's were read at the start.
            let made;
            let test = match &data.test.clips {
                Clips::Digits(_) if data.test.levels.is_empty() => {
                    made = Split {
                        levels: data.test.clips.levels(&data.config).levels,
                        clips: Clips::Digits(Vec::new()),
                        first_clip: 0,
                    };
                    &made
                }
                _ => &data.test,
            };
            let mut rows = Vec::new();
            for (label, split) in [("validation", &data.validation), ("test", test)] {
                let crops = data.crops(split);
                if crops == 0 {
                    continue;
                }
                rows.push(ResultsRow {
                    label: label.into(),
                    examples: crops,
                    values: vec![data.bits(&network, split, device, batches).await?],
                });
            }
            Ok(Evaluation::Results(Results {
                about: format!(
                    "negative log-likelihood of each sample given the samples before it in its \
                     crop of {} (the first given the middle level), in bits: log2 of 256 \
                     levels is 8 bits for a uniform guess",
                    self.sample_len
                ),
                measures: vec!["NLL (bits/sample)".into()],
                rows,
                skipped,
            }))
        })
    }
}
