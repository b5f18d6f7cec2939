//! The run a command's flags ask for, as core's [`RunSpec`]: each flag onto one field, so
//! that `train` and `plan` ask core for the same run, and the rest (the configuration, the
//! planner's request, the budget's source, what a resumed run may change) is core's.

use anyhow::{Context, Result};
use headroom_core::RunLength;
use headroom_core::size::parse_size;
use headroom_core::spec::{BudgetSpec, DataSpec, MemorySpec, RunSpec, SplitSpec};

use crate::args::{Backend, DataArgs, DeviceArg, MemoryArgs, PlanArgs, SplitArgs, TrainArgs};

fn memory(args: &MemoryArgs) -> Result<MemorySpec> {
    let budget = match (&args.memory_budget, &args.simulate_device) {
        (Some(text), _) => BudgetSpec::Given {
            bytes: parse_size(text).context("--memory-budget")?,
        },
        (None, Some(device)) => BudgetSpec::Simulated {
            device: device.clone(),
        },
        (None, None) => BudgetSpec::FreeMemory,
    };
    Ok(MemorySpec {
        budget,
        fraction: args.memory_fraction,
        effective_batch: args.effective_batch,
        checkpointing: args.checkpointing(),
        precision: args.precision,
    })
}

fn split(args: &SplitArgs) -> SplitSpec {
    SplitSpec {
        micro_batch: args.batch_size,
        n_patches: args.n_patches,
        accumulation: args.gradient_accumulation_steps,
        ..SplitSpec::default()
    }
}

fn data(args: &DataArgs, machine_ids: Option<u32>, train_clips_per_id: Option<usize>) -> DataSpec {
    let features = &args.features;
    DataSpec {
        root: args.data_root.clone(),
        machine_type: args.machine_type.clone(),
        n_mels: features.n_mels,
        sample_rate: features.sample_rate,
        resample: features.resample,
        machine_ids,
        train_clips_per_id,
        // The built-in dataset's test split keeps its size on the command line.
        test_clips_per_id: None,
        speech: args
            .speech_train
            .clone()
            .map(|train| headroom_core::speech::SpeechFiles {
                train,
                validation: args.speech_validation.clone(),
                test: args.speech_test.clone(),
            }),
    }
}

impl TrainArgs {
    pub fn spec(&self) -> Result<RunSpec> {
        Ok(RunSpec {
            model: self.model.clone(),
            // Auto is no backend asked for: Headroom chooses.
            backend: self.backend.filter(|b| *b != Backend::Auto).map(Into::into),
            device: self.device.as_ref().map(DeviceArg::label),
            asr_size: self.asr_size.map(Into::into),
            gan_size: self.gan_size.map(Into::into),
            classifier: self.classifier.spec(),
            negatives: self.classifier.negatives.map(Into::into),
            sashimi: self.sashimi.spec(),
            data: data(&self.data, self.machine_ids, self.train_clips_per_id),
            split: SplitSpec {
                stride: self.stride,
                placement: self.placement.map(Into::into),
                ..split(&self.split)
            },
            memory: memory(&self.memory)?,
            planner: !self.no_plan,
            length: self
                .steps
                .map(RunLength::Steps)
                .or(self.epochs.map(RunLength::Epochs)),
            lr: self.lr,
            clip_norm: self.clip_norm,
            ema: self.ema,
            seed: self.seed,
            checkpoint_every: self.checkpoint_every,
            validate_every: self.validate_every,
            empty_cache_every: self.empty_cache_every,
        })
    }
}

impl PlanArgs {
    pub fn spec(&self) -> Result<RunSpec> {
        Ok(RunSpec {
            model: self.model.clone(),
            data: data(&self.data, self.machine_ids, self.train_clips_per_id),
            split: split(&self.split),
            memory: memory(&self.memory)?,
            asr_size: self.asr_size.map(Into::into),
            gan_size: self.gan_size.map(Into::into),
            classifier: self.classifier.spec(),
            negatives: self.classifier.negatives.map(Into::into),
            sashimi: self.sashimi.spec(),
            ..RunSpec::default()
        })
    }
}

/// The run a `train` command asks for: its flags' spec, or the run file `--config` names with
/// the flags given beside it over it.
pub struct Request {
    pub spec: RunSpec,
    /// The run file read, if any.
    pub config: Option<std::path::PathBuf>,
    /// The flags that overrode the file's settings, as given (`--steps`).
    pub overridden: Vec<String>,
}

impl TrainArgs {
    pub fn request(&self) -> Result<Request> {
        let flags = self.spec()?;
        let Some(path) = &self.config else {
            return Ok(Request {
                spec: flags,
                config: None,
                overridden: Vec::new(),
            });
        };
        let mut spec = crate::run_file::read(path)?;
        let mut overridden = Vec::new();
        for id in &self.given {
            if take(id, &flags, &mut spec) {
                overridden.push(format!("--{}", id.replace('_', "-")));
            }
        }
        Ok(Request {
            spec,
            config: Some(path.clone()),
            overridden,
        })
    }
}

/// The flags of `train` that are no setting of the run: where it writes, how it reads its
/// clips, what it prints.
#[cfg_attr(not(test), allow(dead_code))]
pub const NOT_SETTINGS: [&str; 12] = [
    "config",
    "out",
    "resume",
    "stop_after",
    "prefetch",
    "loader_workers",
    "host_memory",
    "cache",
    "on_bad_file",
    "threads",
    "no_eval",
    "json",
];

/// Sets in `into` the setting the flag `id` sets, as `flags` (the spec of the flags given)
/// has it; `false` for a flag that sets none. Settings that go together are taken together:
/// the backend with the device, the dataset's source with its sizes, the budget's source.
fn take(id: &str, flags: &RunSpec, into: &mut RunSpec) -> bool {
    let (data, given) = (&mut into.data, &flags.data);
    match id {
        "model" => into.model = flags.model.clone(),
        "backend" | "device" => {
            into.backend = flags.backend;
            into.device = flags.device.clone();
        }
        "asr_size" => into.asr_size = flags.asr_size,
        "gan_size" => into.gan_size = flags.gan_size,
        "classifier" => into.classifier.arch = flags.classifier.arch,
        "generator" => into.classifier.generator = flags.classifier.generator.clone(),
        "generated_share" => into.classifier.generated_share = flags.classifier.generated_share,
        "negatives" => into.negatives = flags.negatives,
        "sashimi_size" => into.sashimi.size = flags.sashimi.size,
        "sample_len" => into.sashimi.sample_len = flags.sashimi.sample_len,
        "quantizer" => into.sashimi.quantizer = flags.sashimi.quantizer,
        "waveforms" => into.sashimi.waveforms = flags.sashimi.waveforms.clone(),
        "mixtures" => into.sashimi.mixtures = flags.sashimi.mixtures,
        "stereo" => into.sashimi.stereo = flags.sashimi.stereo,
        "batch_size" => into.split.micro_batch = flags.split.micro_batch,
        "n_patches" => into.split.n_patches = flags.split.n_patches,
        "gradient_accumulation_steps" => into.split.accumulation = flags.split.accumulation,
        "stride" => into.split.stride = flags.split.stride,
        "placement" => into.split.placement = flags.split.placement,
        "epochs" | "steps" => into.length = flags.length,
        "lr" => into.lr = flags.lr,
        "clip_norm" => into.clip_norm = flags.clip_norm,
        "ema" => into.ema = flags.ema,
        "seed" => into.seed = flags.seed,
        "checkpoint_every" => into.checkpoint_every = flags.checkpoint_every,
        "validate_every" => into.validate_every = flags.validate_every,
        "empty_cache_every" => into.empty_cache_every = flags.empty_cache_every,
        "machine_ids" => data.machine_ids = given.machine_ids,
        "train_clips_per_id" => data.train_clips_per_id = given.train_clips_per_id,
        // Another source of clips: the file's sizes of the built-in dataset go with its own.
        "data_root" | "speech_train" | "speech_validation" | "speech_test" => {
            data.root = given.root.clone();
            data.speech = given.speech.clone();
            data.machine_ids = given.machine_ids;
            data.train_clips_per_id = given.train_clips_per_id;
            data.test_clips_per_id = given.test_clips_per_id;
        }
        "machine_type" => data.machine_type = given.machine_type.clone(),
        "n_mels" => data.n_mels = given.n_mels,
        "sample_rate" => data.sample_rate = given.sample_rate,
        "resample" => data.resample = given.resample,
        "memory_budget" | "simulate_device" => into.memory.budget = flags.memory.budget.clone(),
        "memory_fraction" => into.memory.fraction = flags.memory.fraction,
        "effective_batch" => into.memory.effective_batch = flags.memory.effective_batch,
        "use_gradient_checkpointing" | "no_gradient_checkpointing" => {
            into.memory.checkpointing = flags.memory.checkpointing;
        }
        "precision" => into.memory.precision = flags.memory.precision,
        "no_plan" => into.planner = flags.planner,
        _ => return false,
    }
    true
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;
    use crate::args::{Cli, Command};

    fn train_args(flags: &[&str]) -> TrainArgs {
        let mut all = vec!["trainer-cli", "train"];
        all.extend_from_slice(flags);
        match crate::args::parse_from(all).command {
            Some(Command::Train(a)) => *a,
            other => panic!("not a train command: {other:?}"),
        }
    }

    #[test]
    fn every_flag_of_train_is_a_setting_or_listed_as_none() {
        let command = Cli::command();
        let train = command.find_subcommand("train").unwrap();
        let mut file = RunSpec::default();
        for arg in train.get_arguments() {
            let id = arg.get_id().as_str();
            let setting = take(id, &RunSpec::default(), &mut file);
            assert_ne!(
                setting,
                NOT_SETTINGS.contains(&id),
                "--{id}: a setting of the run's and listed as none, or neither"
            );
        }
    }

    /// Every setting's flag given beside a run file of other settings: the flags' spec.
    #[test]
    fn flags_given_beside_a_file_win() {
        let file = RunSpec {
            model: Some("dcase-ae".into()),
            backend: Some(headroom_core::BackendKind::Ndarray),
            device: Some("wgpu:0".into()),
            lr: Some(0.5),
            seed: Some(3),
            planner: false,
            data: headroom_core::spec::DataSpec {
                root: Some("elsewhere".into()),
                machine_type: Some("pump".into()),
                test_clips_per_id: Some(2),
                ..Default::default()
            },
            memory: MemorySpec {
                budget: BudgetSpec::Simulated {
                    device: "t4".into(),
                },
                fraction: 0.1,
                checkpointing: Some(false),
                ..MemorySpec::default()
            },
            split: SplitSpec {
                micro_batch: Some(9),
                ..SplitSpec::default()
            },
            ..RunSpec::default()
        };
        let lines: [&[&str]; 2] = [
            &[
                "--model",
                "spec-gan",
                "--gan-size",
                "seed-96",
                "--backend",
                "flex",
                "--batch-size",
                "2",
                "--n-patches",
                "3",
                "--gradient-accumulation-steps",
                "4",
                "--stride",
                "5",
                "--placement",
                "even",
                "--steps",
                "6",
                "--lr",
                "0.25",
                "--clip-norm",
                "2",
                "--seed",
                "7",
                "--checkpoint-every",
                "8",
                "--validate-every",
                "9",
                "--empty-cache-every",
                "10",
                "--machine-ids",
                "2",
                "--train-clips-per-id",
                "3",
                "--memory-budget",
                "1GiB",
                "--memory-fraction",
                "0.5",
                "--effective-batch",
                "24",
                "--use-gradient-checkpointing",
                "--precision",
                "f16",
                "--no-plan",
                "--classifier",
                "cnn",
                "--generator",
                "g",
                "--generated-share",
                "0.5",
                "--negatives",
                "micro-batch",
                "--asr-size",
                "small",
            ],
            &[
                "--device",
                "cpu",
                "--epochs",
                "2",
                "--data-root",
                "d",
                "--machine-type",
                "fan",
                "--n-mels",
                "128",
                "--sample-rate",
                "8000",
                "--resample",
                "--simulate-device",
                "h100",
                "--no-gradient-checkpointing",
            ],
        ];
        let merged = |line: &[&str]| {
            let args = train_args(line);
            let flags = args.spec().unwrap();
            let mut into = file.clone();
            let taken = args.given.iter().filter(|id| take(id, &flags, &mut into));
            assert_eq!(taken.count(), args.given.len(), "{line:?}");
            (flags, into)
        };
        // Every setting but the source of clips: the flags', the file's source kept.
        let (flags, into) = merged(lines[0]);
        let expected = RunSpec {
            data: headroom_core::spec::DataSpec {
                root: file.data.root.clone(),
                machine_type: file.data.machine_type.clone(),
                test_clips_per_id: file.data.test_clips_per_id,
                ..flags.data.clone()
            },
            ..flags
        };
        assert_eq!(into, expected);
        // The rest: those the flags set, the file's settings beside them.
        let (flags, into) = merged(lines[1]);
        let expected = RunSpec {
            backend: None,
            device: Some("cpu".into()),
            length: flags.length,
            data: flags.data.clone(),
            memory: MemorySpec {
                budget: flags.memory.budget.clone(),
                checkpointing: Some(false),
                ..file.memory.clone()
            },
            ..file.clone()
        };
        assert_eq!(into, expected);
        assert_eq!(into.data.test_clips_per_id, None);
    }

    #[test]
    fn only_the_flags_on_the_command_line_are_given() {
        let args = train_args(&["--steps", "3", "--json", "--memory-fraction", "0.5"]);
        let mut given = args.given.clone();
        given.sort();
        assert_eq!(given, ["json", "memory_fraction", "steps"]);
        // A default value is no flag given.
        assert!(train_args(&[]).given.is_empty());
    }
}
