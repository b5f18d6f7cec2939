//! The GAN over its data: opened as the patch task's, sized for the run's machines, and
//! measured on held-out patches by the quality figures of [`super::quality`].

use burn::module::Module;
use burn::tensor::{Device, Int, Tensor, TensorData};
use headroom_datasets::Label;

use super::data::{GanData, GanNoise, noise_of};
use super::networks::{GanNetworks, Generator};
use super::quality::{self, ClassQuality};
use super::{GanConfig, grid};
use crate::config::TrainConfig;
use crate::data::LoaderOptions;
use crate::events::{Picture, Results, ResultsRow};
use crate::readback::{self, LocalFuture};
use crate::train::{EvalBatches, Evaluation, PatchData, RunTask, TrainError};

/// Held-out noise comes from its own seed beside the run's, so that no generated patch it
/// judges was drawn for training.
const HELD_OUT_SEED: u64 = 0x9e37_79b9_7f4a_7c15;

impl RunTask for GanConfig {
    type Data = GanData;

    fn open(
        self,
        config: &TrainConfig,
        loader: &LoaderOptions,
    ) -> Result<(Self, GanData), TrainError> {
        let patches = PatchData::open(config, loader, self.patch())?;
        let noise = GanNoise {
            latent: self.shape.latent,
            seed: config.seed,
        };
        let data = GanData::new(patches, noise, config);
        Ok((self, data))
    }

    /// One class per machine of the train split.
    fn for_data(mut self, data: &GanData) -> Result<Self, TrainError> {
        let machines = &data.patches.run().machines;
        if machines.is_empty() {
            return Err(TrainError::Task(
                "the train split names no machine to generate patches of".into(),
            ));
        }
        self.machines = machines.clone();
        Ok(self)
    }

    /// The mean over classes of the Fréchet distance between the validation split's
    /// patches and as many generated of each class (lower is better): the figure that
    /// tracks the generator over training.
    fn validation_loss<'a>(
        &'a self,
        networks: &'a GanNetworks,
        data: &'a GanData,
        device: &'a Device,
        batches: &'a EvalBatches,
    ) -> LocalFuture<'a, Result<f64, TrainError>> {
        Box::pin(async move {
            let clips = &data.patches.run().validation;
            let classes = self.judge(networks, data, clips, device, batches).await?;
            Ok(quality::mean_frechet(&classes).unwrap_or(f64::NAN))
        })
    }

    /// A row per machine: a validation patch of it, then patches generated from the same
    /// held-out noise at every validation.
    fn picture<'a>(
        &'a self,
        networks: &'a GanNetworks,
        data: &'a GanData,
        device: &'a Device,
    ) -> LocalFuture<'a, Result<Option<(Picture, String)>, TrainError>> {
        Box::pin(async move {
            let (mels, frames) = (self.shape.mels, self.shape.frames);
            let size = mels * frames;
            let classes = self.classes();
            let run = data.patches.run();
            // The first validation (or train) patch of each class.
            let mut real: Vec<Option<Vec<f32>>> = vec![None; classes];
            for &clip in run.validation.iter().chain(&run.train) {
                let class = run.classes.get(clip).copied().unwrap_or(0) as usize;
                if class < classes && real[class].is_none() {
                    let patches = data.patches.patches_of(clip)?;
                    real[class] = patches.values.get(..size).map(<[f32]>::to_vec);
                }
                if real.iter().all(Option::is_some) {
                    break;
                }
            }
            let labels: Vec<usize> = (0..classes)
                .flat_map(|c| std::iter::repeat_n(c, grid::SAMPLES))
                .collect();
            let generator = networks.generator.valid();
            let made = self.generate(&generator, &labels, 0, device);
            let made = readback::floats(made).await?;
            let rows: Vec<Vec<Option<&[f32]>>> = (0..classes)
                .map(|c| {
                    std::iter::once(real[c].as_deref())
                        .chain(
                            made.chunks(size)
                                .skip(c * grid::SAMPLES)
                                .take(grid::SAMPLES)
                                .map(Some),
                        )
                        .collect()
                })
                .collect();
            let about = format!(
                "a row per machine ({}): a real log-mel patch, then {} generated",
                self.machines
                    .iter()
                    .map(|m| format!("{} id {:02}", m.machine_type, m.machine_id))
                    .collect::<Vec<_>>()
                    .join(", "),
                grid::SAMPLES
            );
            Ok(Some((grid::draw(&rows, mels, frames), about)))
        })
    }

    /// Per class and over all: the Fréchet distance to the test split's normal patches
    /// (the validation split's where the test split has no labelled normal clips), how
    /// often a generated patch's nearest real class centroid is its own, and the same for
    /// the real patches.
    fn evaluate<'a>(
        &'a self,
        networks: &'a GanNetworks,
        data: &'a GanData,
        device: &'a Device,
        batches: &'a EvalBatches,
        skipped: Vec<String>,
    ) -> LocalFuture<'a, Result<Evaluation, TrainError>> {
        Box::pin(async move {
            let run = data.patches.run();
            let store = run.store.clips();
            let normal: Vec<usize> = run
                .test
                .iter()
                .copied()
                .filter(|&c| store.get(c).and_then(|clip| clip.label) == Some(Label::Normal))
                .collect();
            let (split, clips) = if normal.is_empty() {
                ("validation", &run.validation)
            } else {
                ("test (normal clips)", &normal)
            };
            let classes = self.judge(networks, data, clips, device, batches).await?;
            Ok(Evaluation::Results(self.results(&classes, split, skipped)))
        })
    }
}

impl GanConfig {
    /// Each class's figures: the real patches of `clips` against as many generated of the
    /// same classes, from held-out noise.
    async fn judge(
        &self,
        networks: &GanNetworks,
        data: &GanData,
        clips: &[usize],
        device: &Device,
        batches: &EvalBatches,
    ) -> Result<Vec<ClassQuality>, TrainError> {
        let (mels, frames) = (self.shape.mels, self.shape.frames);
        let mut real = Vec::new();
        for &clip in clips {
            let patches = data.patches.patches_of(clip)?;
            for (values, &class) in patches.values.chunks(mels * frames).zip(&patches.classes) {
                real.push((class as usize, quality::band_profile(values, mels, frames)));
            }
        }
        let labels: Vec<usize> = real.iter().map(|(c, _)| *c).collect();
        let generator = networks.generator.valid();
        let mut generated = Vec::with_capacity(labels.len());
        for (part, chunk) in labels.chunks(batches.examples.max(1)).enumerate() {
            let first = (part * batches.examples.max(1)) as u64;
            let patches = self.generate(&generator, chunk, first, device);
            let values = readback::floats(patches).await?;
            for (values, &class) in values.chunks(mels * frames).zip(chunk) {
                generated.push((class, quality::band_profile(values, mels, frames)));
            }
        }
        Ok(quality::compare(&real, &generated, self.classes()))
    }

    /// Patches of `classes` from held-out noise (see [`held_out_patches`]).
    pub fn generate(
        &self,
        generator: &Generator,
        classes: &[usize],
        first: u64,
        device: &Device,
    ) -> Tensor<4> {
        held_out_patches(generator, self.shape.latent, classes, first, device)
    }

    fn results(&self, classes: &[ClassQuality], split: &str, skipped: Vec<String>) -> Results {
        let row = |label: String, examples: usize, values: Vec<f64>| ResultsRow {
            label,
            examples,
            values,
        };
        let mut rows: Vec<ResultsRow> = classes
            .iter()
            .map(|c| {
                let machine = self.machines.get(c.class).map_or_else(
                    || format!("class {}", c.class),
                    |m| format!("{} id {:02}", m.machine_type, m.machine_id),
                );
                row(
                    machine,
                    c.real,
                    vec![
                        c.frechet.unwrap_or(f64::NAN),
                        c.recognised,
                        c.real_recognised,
                    ],
                )
            })
            .collect();
        let total: usize = classes.iter().map(|c| c.real).sum();
        let weighted = |f: fn(&ClassQuality) -> f64| {
            classes.iter().map(|c| f(c) * c.real as f64).sum::<f64>() / total.max(1) as f64
        };
        rows.push(row(
            "all".into(),
            total,
            vec![
                quality::mean_frechet(classes).unwrap_or(f64::NAN),
                weighted(|c| c.recognised),
                weighted(|c| c.real_recognised),
            ],
        ));
        Results {
            about: format!(
                "generated patches against the {split} split's, per machine: band-profile \
                 Fréchet distance (lower is better), share recognised as their machine by \
                 the nearest real centroid, and the same share for the real patches"
            ),
            measures: vec![
                "Fréchet distance".into(),
                "generated recognised".into(),
                "real recognised".into(),
            ],
            rows,
            skipped,
        }
    }
}

/// Patches of `classes` from held-out noise of `latent` values, the `i`th from draw
/// `first + i`: the same patches every time the same networks are judged, by the GAN's own
/// evaluation or by a classifier it feeds.
pub fn held_out_patches(
    generator: &Generator,
    latent: usize,
    classes: &[usize],
    first: u64,
    device: &Device,
) -> Tensor<4> {
    let n = classes.len();
    let mut noise = Vec::with_capacity(n * latent);
    for i in 0..n as u64 {
        noise.extend_from_slice(&noise_of(HELD_OUT_SEED, first + i, 1, latent)[..latent]);
    }
    let noise = Tensor::from_data(TensorData::new(noise, [n, latent]), device);
    let labels: Vec<i64> = classes.iter().map(|&c| c as i64).collect();
    let labels = Tensor::<1, Int>::from_data(TensorData::new(labels, [n]), device);
    generator.forward(noise, labels)
}
