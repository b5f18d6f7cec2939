//! The classifier over its data: opened as the patch task's, sized for the train split's
//! machines (and a fresh run's generator read), and measured by accuracy on the real test
//! split, each classifier beside the other.

use burn::module::Module;
use burn::tensor::Device;

use super::ClassifierConfig;
use super::data::{ClassifierData, GeneratedDraws};
use super::generator::FrozenGenerator;
use super::networks::{Classifier, ClassifierNetworks};
use crate::config::TrainConfig;
use crate::data::LoaderOptions;
use crate::events::{Results, ResultsRow};
use crate::gan::held_out_patches;
use crate::readback::{self, LocalFuture};
use crate::train::{EvalBatches, Evaluation, PatchData, RunTask, TaskData, TrainError};

/// Generated patches judged per class at the end of a run.
pub const JUDGED_PER_CLASS: usize = 64;
impl RunTask for ClassifierConfig {
    type Data = ClassifierData;

    fn open(
        self,
        config: &TrainConfig,
        loader: &LoaderOptions,
    ) -> Result<(Self, ClassifierData), TrainError> {
        let patches = PatchData::open(config, loader, self.patch)?;
        let draws = GeneratedDraws {
            seed: config.seed,
            draws: None,
        };
        Ok((self, ClassifierData::new(patches, draws, config)))
    }

    /// One class per machine of the train split, at least two; with generated patches, the
    /// generator read and checked against them.
    fn for_data(mut self, data: &ClassifierData) -> Result<Self, TrainError> {
        let machines = &data.patches.run().machines;
        if machines.len() < 2 {
            return Err(TrainError::Task(format!(
                "the train split has {} machine(s); a classifier needs at least two to tell \
                 apart (the built-in set has four IDs; a DCASE folder, several IDs of a type)",
                machines.len()
            )));
        }
        self.machines = machines.clone();
        if let Some(generated) = &mut self.generated {
            if !(generated.share > 0.0 && generated.share <= 1.0) {
                return Err(TrainError::Task(format!(
                    "the share of generated patches is {}; give one above 0 and at most 1",
                    generated.share
                )));
            }
            let frozen = FrozenGenerator::read(&generated.checkpoint, self.patch, machines)?;
            generated.shape = frozen.shape;
            generated.renormalise = frozen.renormalise(data.normalization());
            generated.weights = Some(frozen.weights);
        }
        Ok(self)
    }

    /// The real-data classifier's mean cross-entropy over the validation patches.
    fn validation_loss<'a>(
        &'a self,
        networks: &'a ClassifierNetworks,
        data: &'a ClassifierData,
        device: &'a Device,
        batches: &'a EvalBatches,
    ) -> LocalFuture<'a, Result<f64, TrainError>> {
        Box::pin(async move {
            let classifier = networks.real.valid();
            let (mut sum, mut n) = (0.0, 0usize);
            for &clip in &data.patches.run().validation {
                let batch = data.patches.patches_of(clip)?;
                for part in batch.chunks(batches.examples) {
                    let patches = part.patches;
                    let part = part.to_tensor(device);
                    let loss = classifier.loss(part.values, part.classes);
                    sum += f64::from(readback::scalar(loss).await?) * patches as f64;
                    n += patches;
                }
            }
            Ok(sum / n.max(1) as f64)
        })
    }

    /// Per machine and over all: the share of the test split's clips each classifier places
    /// (a clip's class: the largest of its patches' summed logits) and, with a generator,
    /// the share of generated patches of the class the real-data classifier places as it.
    fn evaluate<'a>(
        &'a self,
        networks: &'a ClassifierNetworks,
        data: &'a ClassifierData,
        device: &'a Device,
        batches: &'a EvalBatches,
        skipped: Vec<String>,
    ) -> LocalFuture<'a, Result<Evaluation, TrainError>> {
        Box::pin(async move {
            let classes = self.classes();
            let real = networks.real.valid();
            let mixed = networks.mixed.as_ref().map(|m| m.valid());
            let mut tally = vec![Tally::default(); classes];
            for &clip in &data.patches.run().test {
                let batch = data.patches.patches_of(clip)?;
                let Some(&class) = batch.classes.first() else {
                    continue;
                };
                let class = (class as usize).min(classes - 1);
                let own = clip_class(&real, &batch, batches.examples, classes, device).await?;
                let t = &mut tally[class];
                t.clips += 1;
                t.real += usize::from(own == class);
                if let Some(mixed) = &mixed {
                    let own = clip_class(mixed, &batch, batches.examples, classes, device).await?;
                    t.mixed += usize::from(own == class);
                }
            }
            if let (Some(generator), Some(generated)) = (&networks.generator, &self.generated) {
                let generator = generator.valid();
                for (class, t) in tally.iter_mut().enumerate() {
                    let judged = vec![class; JUDGED_PER_CLASS];
                    let first = (class * JUDGED_PER_CLASS) as u64;
                    let latent = generated.shape.latent;
                    let made = held_out_patches(&generator, latent, &judged, first, device)
                        .mul_scalar(generated.renormalise.scale)
                        .add_scalar(generated.renormalise.shift);
                    let logits = readback::floats(real.logits(made)).await?;
                    t.generated_placed = logits
                        .chunks(classes)
                        .filter(|row| argmax(row) == class)
                        .count();
                }
            }
            Ok(Evaluation::Results(self.results(&tally, skipped)))
        })
    }
}

/// One class's counts.
#[derive(Debug, Clone, Copy, Default)]
struct Tally {
    clips: usize,
    real: usize,
    mixed: usize,
    generated_placed: usize,
}

/// The class `classifier` gives a clip: the largest of its patches' summed logits.
async fn clip_class(
    classifier: &Classifier,
    batch: &crate::data::PatchBatch,
    at_once: usize,
    classes: usize,
    device: &Device,
) -> Result<usize, TrainError> {
    let mut sums = vec![0.0f64; classes];
    for part in batch.chunks(at_once) {
        let logits = classifier.logits(part.to_tensor(device).values);
        for row in readback::floats(logits).await?.chunks(classes) {
            for (s, v) in sums.iter_mut().zip(row) {
                *s += f64::from(*v);
            }
        }
    }
    Ok(argmax(&sums))
}

fn argmax<T: PartialOrd + Copy>(values: &[T]) -> usize {
    let mut best = 0;
    for (i, v) in values.iter().enumerate() {
        if *v > values[best] {
            best = i;
        }
    }
    best
}

impl ClassifierConfig {
    fn results(&self, tally: &[Tally], skipped: Vec<String>) -> Results {
        let with_generator = self.generated.is_some();
        let share = |n: usize, of: usize| n as f64 / of.max(1) as f64;
        let values = |t: &Tally| {
            let mut v = vec![share(t.real, t.clips)];
            if with_generator {
                v.push(share(t.mixed, t.clips));
                v.push(share(t.generated_placed, JUDGED_PER_CLASS));
            }
            v
        };
        let mut rows: Vec<ResultsRow> = tally
            .iter()
            .enumerate()
            .map(|(class, t)| ResultsRow {
                label: self.machines.get(class).map_or_else(
                    || format!("class {class}"),
                    |m| format!("{} id {:02}", m.machine_type, m.machine_id),
                ),
                examples: t.clips,
                values: values(t),
            })
            .collect();
        let all = tally.iter().fold(Tally::default(), |a, t| Tally {
            clips: a.clips + t.clips,
            real: a.real + t.real,
            mixed: a.mixed + t.mixed,
            generated_placed: a.generated_placed + t.generated_placed,
        });
        let mut all_values = values(&all);
        if with_generator {
            all_values[2] = share(all.generated_placed, JUDGED_PER_CLASS * tally.len());
        }
        rows.push(ResultsRow {
            label: "all".into(),
            examples: all.clips,
            values: all_values,
        });
        let (about, measures) = match &self.generated {
            Some(g) => (
                format!(
                    "machine ID of the test split's clips ({}), by the classifier trained on \
                     real patches and by the one trained with {:.0}% of its patches made by \
                     the generator of {}; and the share of {JUDGED_PER_CLASS} generated \
                     patches per machine the real-data classifier places as that machine",
                    self.arch.name(),
                    100.0 * g.share,
                    g.checkpoint.display()
                ),
                vec![
                    "accuracy, real data".into(),
                    "accuracy, real + generated".into(),
                    "generated placed".into(),
                ],
            ),
            None => (
                format!(
                    "machine ID of the test split's clips ({}), trained on real patches",
                    self.arch.name()
                ),
                vec!["accuracy".into()],
            ),
        };
        Results {
            about,
            measures,
            rows,
            skipped,
        }
    }
}
