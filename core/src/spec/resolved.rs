//! A run's spec as it trains: what a run file keeps (`trainer-cli train` writes one into its
//! run directory as `run.toml`), so that giving the file back re-runs the run.

use super::RunSpec;
use crate::config::{DatasetSource, TrainConfig};

impl RunSpec {
    /// This spec with what its run trains with filled in from `config`, the run's
    /// configuration as it starts (the model's defaults, the seed, the length, the learning
    /// rate): a run file of it re-runs the run as it trained, also where a later version's
    /// defaults differ. What depends on the machine stays as it was asked for, so that the
    /// file re-runs on another machine too: the backend and device, the memory budget and,
    /// with the planner on, the split, checkpointing and precision (the plan's, for this
    /// machine's budget; the planner chooses them again where the file is given back).
    pub fn resolved(&self, config: &TrainConfig) -> RunSpec {
        let mut spec = self.clone();
        spec.model = Some(config.model.name.clone());
        spec.length = Some(config.length);
        spec.lr = Some(config.lr);
        // A run without clipping keeps the spec's word for it: none given is the model's.
        spec.clip_norm = config.clip_norm.or(self.clip_norm);
        spec.ema = config.ema;
        spec.seed = Some(config.seed);
        spec.checkpoint_every = Some(config.checkpoint_every);
        spec.validate_every = Some(config.validate_every);
        spec.empty_cache_every = Some(config.empty_cache_every);
        spec.split.stride = Some(config.stride);
        spec.split.placement = Some(config.placement);
        if !self.planner {
            spec.split.micro_batch = Some(config.micro_batch);
            spec.split.n_patches = Some(config.n_patches);
            spec.split.accumulation = Some(config.accumulation);
            spec.memory.checkpointing = Some(config.checkpointing);
            spec.memory.precision = Some(config.precision);
        }
        // The built-in dataset's sizes, where the run reads it.
        let recordings = spec.sashimi.waveforms.is_some();
        let data = &mut spec.data;
        if let (None, None, false, DatasetSource::Synthetic(built_in)) =
            (&data.root, &data.speech, recordings, &config.dataset)
        {
            data.machine_ids = Some(built_in.machine_ids);
            data.train_clips_per_id = Some(built_in.train_per_id);
            data.test_clips_per_id = (built_in.test_normal_per_id == built_in.test_anomaly_per_id)
                .then_some(built_in.test_normal_per_id)
                .or(data.test_clips_per_id);
        }
        spec
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::config::RunLength;
    use crate::gan::GanSize;
    use crate::precision::Precision;
    use crate::spec::{BudgetSpec, DataSpec, MemorySpec, SplitSpec};
    use crate::speech::AsrSize;
    use crate::{BackendKind, Target};

    fn flex() -> Target {
        BackendKind::Flex.into()
    }

    /// `spec`'s run, and the run of its resolved spec: the same configuration.
    fn same_run(spec: &RunSpec) -> RunSpec {
        let config = spec.train_config(flex()).unwrap();
        let resolved = spec.resolved(&config);
        assert_eq!(
            resolved.train_config(flex()).unwrap(),
            config,
            "{spec:?} resolved as {resolved:?}"
        );
        // Resolving it again changes nothing.
        assert_eq!(resolved.resolved(&config), resolved);
        resolved
    }

    #[test]
    fn every_models_resolved_spec_trains_its_run() {
        for info in crate::registry::built_in() {
            for planner in [true, false] {
                let spec = RunSpec {
                    model: Some(info.name.to_string()),
                    planner,
                    ..RunSpec::default()
                };
                let resolved = same_run(&spec);
                assert_eq!(resolved.model.as_deref(), Some(info.name));
                assert_eq!(resolved.split.micro_batch.is_some(), !planner);
            }
        }
        // A run of recordings keeps no sizes of the built-in machine sounds, which it refuses.
        let waveforms = RunSpec {
            model: Some("sashimi".into()),
            sashimi: crate::spec::SashimiSpec {
                waveforms: Some("recordings".into()),
                ..Default::default()
            },
            ..RunSpec::default()
        };
        assert_eq!(same_run(&waveforms).data.machine_ids, None);
        // The default model, unnamed: named in the file.
        let resolved = same_run(&RunSpec::default());
        assert_eq!(resolved.model_name(), RunSpec::default().model_name());
        assert!(resolved.model.is_some());
    }

    #[test]
    fn the_settings_a_run_trains_with_are_written_out() {
        let resolved = same_run(&RunSpec::default());
        let c = TrainConfig::default();
        assert_eq!(resolved.length, Some(c.length));
        assert_eq!(resolved.lr, Some(c.lr));
        assert_eq!(resolved.seed, Some(c.seed));
        assert_eq!(resolved.clip_norm, c.clip_norm);
        assert_eq!(resolved.split.stride, Some(c.stride));
        assert_eq!(resolved.split.placement, Some(c.placement));
        assert_eq!(resolved.data.machine_ids, Some(4));
        assert_eq!(resolved.data.train_clips_per_id, Some(40));
        assert_eq!(resolved.data.test_clips_per_id, Some(12));
        // The planner's choices are this machine's: left to the planner.
        assert_eq!(resolved.split.micro_batch, None);
        assert_eq!(resolved.memory.precision, None);
        assert!(resolved.planner);
    }

    #[test]
    fn what_depends_on_the_machine_stays_as_asked() {
        let spec = RunSpec {
            backend: None,
            device: Some("cuda:1".into()),
            memory: MemorySpec {
                fraction: 0.5,
                effective_batch: Some(16),
                ..MemorySpec::default()
            },
            split: SplitSpec {
                micro_batch: Some(4),
                ..SplitSpec::default()
            },
            ..RunSpec::default()
        };
        let resolved = same_run(&spec);
        assert_eq!(resolved.device.as_deref(), Some("cuda:1"));
        assert_eq!(resolved.backend, None);
        assert_eq!(resolved.memory.budget, BudgetSpec::FreeMemory);
        assert_eq!(resolved.memory.fraction, 0.5);
        assert_eq!(resolved.memory.effective_batch, Some(16));
        assert_eq!(resolved.split.micro_batch, Some(4));
        assert_eq!(resolved.split.n_patches, None);
    }

    #[test]
    fn settings_given_and_presets_resolve_to_their_run() {
        let asr = RunSpec {
            model: Some("asr-transformer".into()),
            asr_size: Some(AsrSize::Small),
            length: Some(RunLength::Steps(3)),
            ..RunSpec::default()
        };
        assert_eq!(same_run(&asr).asr_size, Some(AsrSize::Small));
        let gan = RunSpec {
            model: Some("spec-gan".into()),
            gan_size: Some(GanSize::Seed96),
            planner: false,
            ..RunSpec::default()
        };
        same_run(&gan);
        let fixed = RunSpec {
            planner: false,
            lr: Some(0.01),
            seed: Some(7),
            memory: MemorySpec {
                precision: Some(Precision::Bf16),
                checkpointing: Some(true),
                ..MemorySpec::default()
            },
            data: DataSpec {
                machine_ids: Some(1),
                ..DataSpec::default()
            },
            ..RunSpec::default()
        };
        let resolved = same_run(&fixed);
        assert_eq!((resolved.lr, resolved.seed), (Some(0.01), Some(7)));
        assert_eq!(resolved.data.machine_ids, Some(1));
        // Recordings: their folder as given, no built-in sizes.
        let recordings = RunSpec {
            data: DataSpec {
                root: Some(PathBuf::from("data/dcase")),
                ..DataSpec::default()
            },
            ..RunSpec::default()
        };
        let resolved = same_run(&recordings);
        assert_eq!(resolved.data.machine_ids, None);
        assert_eq!(resolved.data.root, Some(PathBuf::from("data/dcase")));
    }
}
