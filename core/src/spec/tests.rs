use super::*;
use crate::BackendKind;
use crate::config::{DatasetSource, ResumeChanges};
use crate::model::{IdClassifierConfig, ModelConfig};

fn flex() -> Target {
    BackendKind::Flex.into()
}

#[test]
fn an_empty_spec_is_the_engines_default_run() {
    let spec = RunSpec::default();
    assert_eq!(spec.train_config(flex()).unwrap(), TrainConfig::default());
    let planning = spec.planning(1 << 30).unwrap().unwrap();
    let defaults = info_of(VqAutoencoderConfig::NAME).unwrap().default_batch;
    assert_eq!(
        planning,
        Planning::new(1 << 30, None, Fixed::default(), defaults).unwrap()
    );
}

#[test]
fn every_setting_given_reaches_the_configuration() {
    let spec = RunSpec {
        model: Some(IdClassifierConfig::NAME.into()),
        data: DataSpec {
            machine_ids: Some(3),
            train_clips_per_id: Some(5),
            test_clips_per_id: Some(2),
            ..DataSpec::default()
        },
        split: SplitSpec {
            micro_batch: Some(6),
            n_patches: Some(2),
            accumulation: Some(3),
            stride: Some(7),
            placement: Some(PatchPlacement::Even),
        },
        memory: MemorySpec {
            checkpointing: Some(true),
            precision: Some(Precision::F16),
            ..MemorySpec::default()
        },
        length: Some(RunLength::Epochs(2)),
        lr: Some(0.01),
        clip_norm: Some(2.0),
        seed: Some(9),
        checkpoint_every: Some(4),
        validate_every: Some(5),
        empty_cache_every: Some(6),
        ..RunSpec::default()
    };
    let c = spec.train_config(flex()).unwrap();
    let mut model = TrainConfig::default();
    model.set_model(&IdClassifierConfig::default());
    assert_eq!(c.model, model.model);
    assert_eq!((c.micro_batch, c.n_patches, c.accumulation), (6, 2, 3));
    assert_eq!((c.stride, c.placement), (7, PatchPlacement::Even));
    assert!(c.checkpointing);
    assert_eq!(c.precision, Precision::F16);
    assert_eq!(c.length, RunLength::Epochs(2));
    assert_eq!((c.lr, c.clip_norm, c.seed), (0.01, Some(2.0), 9));
    assert_eq!(
        (c.checkpoint_every, c.validate_every, c.empty_cache_every),
        (4, 5, 6)
    );
    let DatasetSource::Synthetic(synthetic) = &c.dataset else {
        panic!("the built-in dataset: {:?}", c.dataset);
    };
    assert_eq!(
        (
            synthetic.machine_ids,
            synthetic.train_per_id,
            synthetic.test_normal_per_id,
            synthetic.test_anomaly_per_id
        ),
        (3, 5, 2, 2)
    );
    let fixed = spec
        .planning(1 << 30)
        .unwrap()
        .unwrap()
        .request(0, Default::default());
    assert_eq!(fixed.fixed.micro_batch, Some(6));
    assert_eq!(fixed.fixed.checkpointing, Some(true));
    assert_eq!(fixed.fixed.precision, Some(Precision::F16));
}

#[test]
fn a_setting_of_the_other_kind_of_dataset_is_refused_by_name() {
    let folder_only = RunSpec {
        data: DataSpec {
            sample_rate: Some(22_050),
            ..DataSpec::default()
        },
        ..RunSpec::default()
    };
    assert_eq!(
        folder_only.train_config(flex()),
        Err(SpecError::ForRecordings(Setting::SampleRate))
    );
    let built_in_only = RunSpec {
        data: DataSpec {
            root: Some("dev_data".into()),
            train_clips_per_id: Some(4),
            ..DataSpec::default()
        },
        ..RunSpec::default()
    };
    assert_eq!(
        built_in_only.dataset(),
        Err(SpecError::ForBuiltIn(Setting::TrainClipsPerId))
    );
}

#[test]
fn recordings_take_the_models_mel_bands_and_refuse_others() {
    let mut spec = RunSpec {
        model: Some(VqAutoencoderConfig::NAME.into()),
        data: DataSpec {
            root: Some("dev_data".into()),
            sample_rate: Some(22_050),
            resample: true,
            ..DataSpec::default()
        },
        ..RunSpec::default()
    };
    let c = spec.train_config(flex()).unwrap();
    let DatasetSource::Dcase { features, .. } = &c.dataset else {
        panic!("the recordings: {:?}", c.dataset);
    };
    assert_eq!(features.logmel.sample_rate, 22_050);
    assert!(features.resample);
    let mels = c.dataset.mels();
    spec.data.n_mels = Some(mels * 2);
    assert_eq!(
        spec.train_config(flex()),
        Err(SpecError::MelsDoNotFit {
            asked: mels * 2,
            model: VqAutoencoderConfig::NAME.into(),
            mels
        })
    );
}

#[test]
fn a_gan_size_sizes_the_gan_and_its_features_and_no_other_model() {
    let spec = RunSpec {
        model: Some("spec-gan".into()),
        gan_size: Some(GanSize::Seed96),
        ..RunSpec::default()
    };
    let config = spec.train_config(flex()).unwrap();
    let gan: GanConfig = config.model.config().unwrap();
    assert_eq!((gan.shape.mels, gan.shape.frames), (96, 1292));
    assert_eq!(config.dataset.mels(), 96);
    // The built-in clips hold a whole 1,292-frame spectrogram: 1 + samples / 512 frames.
    let DatasetSource::Synthetic(clips) = &config.dataset else {
        panic!("the built-in dataset: {:?}", config.dataset)
    };
    let samples = (f64::from(clips.seconds) * f64::from(clips.sample_rate)) as usize;
    assert!(1 + samples / 512 >= 1292, "{} s", clips.seconds);
    // A plan made without a run (a what-if) is for the same model.
    assert_eq!(spec.sized(GanConfig::default()).unwrap(), gan);
    assert_eq!(
        RunSpec::default().sized(GanConfig::default()).unwrap(),
        GanConfig::default()
    );
    // Whole spectrograms: one patch each, the seed's 24 a step.
    assert_eq!((config.micro_batch, config.n_patches), (24, 1));
    for model in [None, Some("asr-transformer".to_string())] {
        let other = RunSpec {
            model,
            gan_size: Some(GanSize::Seed),
            ..RunSpec::default()
        };
        assert!(
            matches!(
                other.train_config(flex()),
                Err(SpecError::ForGan {
                    setting: Setting::GanSize,
                    ..
                })
            ),
            "{:?}",
            other.model
        );
    }
}

#[test]
fn the_classifier_takes_its_network_and_generator_and_no_other_model_does() {
    use crate::classifier::{ClassifierArch, ClassifierConfig, DEFAULT_SHARE};
    let classifier = |arch, generator: Option<&str>, generated_share| RunSpec {
        model: Some("spec-classifier".into()),
        classifier: ClassifierSpec {
            arch,
            generator: generator.map(Into::into),
            generated_share,
        },
        ..RunSpec::default()
    };
    let config = classifier(Some(ClassifierArch::Cnn), Some("runs/gan"), None)
        .train_config(flex())
        .unwrap();
    let task: ClassifierConfig = config.model.config().unwrap();
    assert_eq!(task.arch, ClassifierArch::Cnn);
    let generated = task.generated.expect("patches from the generator");
    assert_eq!(
        (generated.checkpoint.to_str(), generated.share),
        (Some("runs/gan"), DEFAULT_SHARE)
    );
    let alone: ClassifierConfig = classifier(None, None, None)
        .train_config(flex())
        .unwrap()
        .model
        .config()
        .unwrap();
    assert_eq!(alone, ClassifierConfig::default());
    assert_eq!(
        classifier(None, None, Some(0.3)).train_config(flex()),
        Err(SpecError::GeneratedShare(None))
    );
    for share in [0.0, 1.5, f64::NAN] {
        assert!(matches!(
            classifier(None, Some("runs/gan"), Some(share)).train_config(flex()),
            Err(SpecError::GeneratedShare(Some(_)))
        ));
    }
    let other = RunSpec {
        model: Some("spec-gan".into()),
        classifier: ClassifierSpec {
            generator: Some("runs/gan".into()),
            ..ClassifierSpec::default()
        },
        ..RunSpec::default()
    };
    assert_eq!(
        other.train_config(flex()),
        Err(SpecError::ForClassifier {
            setting: Setting::Generator,
            model: "spec-gan".into()
        })
    );
}

#[test]
fn negatives_are_the_contrastive_models_alone() {
    use crate::contrastive::{ContrastiveConfig, Negatives};
    let spec = |model: &str| RunSpec {
        model: Some(model.into()),
        negatives: Some(Negatives::MicroBatch),
        ..RunSpec::default()
    };
    let task: ContrastiveConfig = spec("speech-clap")
        .train_config(flex())
        .unwrap()
        .model
        .config()
        .unwrap();
    assert_eq!(task.negatives, Negatives::MicroBatch);
    assert_eq!(
        spec("asr-transformer").train_config(flex()),
        Err(SpecError::ForContrastive("asr-transformer".into()))
    );
}

#[test]
fn without_the_planner_there_is_no_request_and_no_effective_batch() {
    let mut spec = RunSpec {
        planner: false,
        ..RunSpec::default()
    };
    assert_eq!(spec.planning(1 << 30), Ok(None));
    spec.memory.effective_batch = Some(64);
    assert_eq!(
        spec.planning(1 << 30),
        Err(SpecError::EffectiveBatchWithoutPlanner)
    );
    let zero = RunSpec {
        split: SplitSpec {
            n_patches: Some(0),
            ..SplitSpec::default()
        },
        ..RunSpec::default()
    };
    assert_eq!(
        zero.planning(1 << 30),
        Err(SpecError::Request(RequestError::Zero(
            Setting::PatchesPerSpectrogram
        )))
    );
}

#[test]
fn a_budget_names_its_source() {
    let mut spec = RunSpec::default();
    assert_eq!(spec.budget_source(), Ok(BudgetSource::FreeMemory));
    spec.memory.budget = BudgetSpec::Given { bytes: 512 << 20 };
    assert_eq!(spec.budget_source(), Ok(BudgetSource::Given(512 << 20)));
    spec.memory.budget = BudgetSpec::Simulated {
        device: "T4".into(),
    };
    assert_eq!(
        spec.budget_source(),
        Ok(BudgetSource::Simulated(simulated::find("t4").unwrap()))
    );
    spec.memory.budget = BudgetSpec::Simulated {
        device: "abacus".into(),
    };
    assert!(matches!(
        spec.budget_source(),
        Err(SpecError::UnknownDevice(_))
    ));
}

#[test]
fn a_spec_reads_back_from_json_and_an_empty_object_is_the_default() {
    let spec = RunSpec {
        model: Some("dcase-ae".into()),
        memory: MemorySpec {
            budget: BudgetSpec::Simulated {
                device: "t4".into(),
            },
            effective_batch: Some(64),
            ..MemorySpec::default()
        },
        length: Some(RunLength::Steps(40)),
        ..RunSpec::default()
    };
    let json = serde_json::to_string(&spec).unwrap();
    assert_eq!(serde_json::from_str::<RunSpec>(&json).unwrap(), spec);
    assert_eq!(
        serde_json::from_str::<RunSpec>("{}").unwrap(),
        RunSpec::default()
    );
}

mod resuming {
    use super::*;

    fn built_in_ids(config: &TrainConfig) -> u32 {
        match &config.dataset {
            DatasetSource::Synthetic(synthetic) => synthetic.machine_ids,
            other => panic!("the built-in dataset: {other:?}"),
        }
    }

    /// The CLI's flags, to see refusals worded as a front-end words them.
    struct Dashes;
    impl Wording for Dashes {
        fn setting(&self, setting: Setting) -> String {
            format!("--{setting:?}")
        }
    }

    #[test]
    fn the_saved_values_given_again_change_nothing() {
        let saved = TrainConfig::default();
        let again = RunSpec {
            lr: Some(saved.lr),
            seed: Some(saved.seed),
            split: SplitSpec {
                n_patches: Some(saved.n_patches),
                micro_batch: Some(saved.micro_batch),
                accumulation: Some(saved.accumulation),
                ..SplitSpec::default()
            },
            length: Some(saved.length),
            checkpoint_every: Some(saved.checkpoint_every),
            ..RunSpec::default()
        };
        let resumed = again.resume(&saved, Some(saved.target())).unwrap();
        assert_eq!(resumed.changes, ResumeChanges::default());
        // The split given goes to the planner, and is said.
        assert_eq!(resumed.said.len(), 1, "{:?}", resumed.said);
    }

    #[test]
    fn safe_changes_are_applied_and_said() {
        let saved = TrainConfig::default();
        let spec = RunSpec {
            length: Some(RunLength::Steps(999)),
            checkpoint_every: Some(7),
            split: SplitSpec {
                micro_batch: Some(2),
                ..SplitSpec::default()
            },
            ..RunSpec::default()
        };
        let wgpu = Target::from(BackendKind::Wgpu);
        let resumed = spec.resume(&saved, Some(wgpu)).unwrap();
        assert_eq!(resumed.changes.length, Some(RunLength::Steps(999)));
        assert_eq!(resumed.changes.checkpoint_every, Some(7));
        assert_eq!(resumed.changes.target, Some(wgpu));
        let said = resumed.said(&Dashes).join("; ");
        assert!(said.contains("--Steps 999 (was --Epochs"), "{said}");
        assert!(said.contains("--CheckpointEvery 7 (was"), "{said}");
        assert!(said.contains("--MicroBatch 2 for the plan"), "{said}");
        assert!(said.contains("backend wgpu (was flex)"), "{said}");
    }

    #[test]
    fn changes_to_what_the_run_learns_are_refused_by_setting() {
        let saved = TrainConfig::default();
        let spec = RunSpec {
            lr: Some(0.5),
            split: SplitSpec {
                micro_batch: Some(2),
                accumulation: Some(1),
                ..SplitSpec::default()
            },
            data: DataSpec {
                machine_ids: Some(9),
                ..DataSpec::default()
            },
            length: Some(RunLength::Steps(999)),
            ..RunSpec::default()
        };
        let refused = spec.resume(&saved, None).unwrap_err().refusals;
        assert_eq!(
            refused,
            [
                Refusal::Differs {
                    setting: Setting::LearningRate,
                    given: "0.5".into(),
                    saved: saved.lr.to_string()
                },
                Refusal::Split {
                    micro_batch: 2,
                    accumulation: 1,
                    effective_batch: 2 * saved.n_patches,
                    saved: saved.effective_batch()
                },
                Refusal::Differs {
                    setting: Setting::MachineIds,
                    given: "9".into(),
                    saved: built_in_ids(&saved).to_string()
                },
            ]
        );
        let words = spec.resume(&saved, None).unwrap_err().describe(&Dashes);
        assert!(
            words.starts_with("--Resume continues the saved run"),
            "{words}"
        );
        assert!(words.contains("--LearningRate 0.5 (the run has"), "{words}");
        assert!(
            !words.contains("--Steps"),
            "a safe change is not refused: {words}"
        );
    }

    #[test]
    fn without_the_planner_only_the_saved_split_may_be_given() {
        let saved = TrainConfig::default();
        let mut spec = RunSpec {
            planner: false,
            split: SplitSpec {
                micro_batch: Some(saved.micro_batch),
                ..SplitSpec::default()
            },
            ..RunSpec::default()
        };
        assert!(spec.resume(&saved, None).unwrap().said.is_empty());
        spec.split.micro_batch = Some(saved.micro_batch + 1);
        assert_eq!(
            spec.resume(&saved, None).unwrap_err().refusals,
            [Refusal::WithoutPlanner {
                setting: Setting::MicroBatch,
                given: (saved.micro_batch + 1).to_string()
            }]
        );
    }

    #[test]
    fn a_run_on_recordings_refuses_any_built_in_size_and_another_folder() {
        let saved = TrainConfig {
            dataset: DatasetSource::Dcase {
                root: "dev_data".into(),
                machine_type: None,
                features: Default::default(),
            },
            ..TrainConfig::default()
        };
        let same_folder = RunSpec {
            data: DataSpec {
                root: Some("dev_data".into()),
                ..DataSpec::default()
            },
            ..RunSpec::default()
        };
        assert_eq!(
            same_folder.resume(&saved, None).unwrap(),
            Resumed::default()
        );
        let moved = RunSpec {
            data: DataSpec {
                root: Some("/mnt/disk/dev_data".into()),
                ..DataSpec::default()
            },
            ..RunSpec::default()
        };
        let resumed = moved.resume(&saved, None).unwrap();
        assert_eq!(
            resumed.changes.data_root,
            Some(PathBuf::from("/mnt/disk/dev_data"))
        );
        let mut config = saved.clone();
        resumed.changes.apply(&mut config);
        assert!(
            matches!(&config.dataset, DatasetSource::Dcase { root, .. } if root == &PathBuf::from("/mnt/disk/dev_data"))
        );
        assert_eq!(
            resumed.said(&Dashes),
            ["--DataRoot /mnt/disk/dev_data (was dev_data: the same folder's name)"]
        );
        let asked = RunSpec {
            data: DataSpec {
                root: Some("other".into()),
                train_clips_per_id: Some(40),
                ..DataSpec::default()
            },
            ..RunSpec::default()
        };
        assert_eq!(
            asked.resume(&saved, None).unwrap_err().refusals,
            [
                Refusal::Differs {
                    setting: Setting::DataRoot,
                    given: "other".into(),
                    saved: "dev_data".into()
                },
                Refusal::Recordings {
                    setting: Setting::TrainClipsPerId,
                    given: "40".into(),
                    root: "dev_data".into(),
                }
            ]
        );
    }
}
