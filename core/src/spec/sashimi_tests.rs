//! The `sashimi` model's own settings: its size, crop, quantiser and recordings.

use super::*;
use crate::BackendKind;

fn flex() -> Target {
    BackendKind::Flex.into()
}

#[test]
fn the_sashimi_model_takes_its_size_and_crop_and_no_other_model_does() {
    use crate::spec::SashimiSpec;
    use crate::waveform::{SashimiConfig, SashimiSize};
    use headroom_datasets::waveform::Quantizer;
    let asked = |model: Option<&str>, size, sample_len| RunSpec {
        model: model.map(String::from),
        sashimi: SashimiSpec {
            size,
            sample_len,
            ..SashimiSpec::default()
        },
        ..RunSpec::default()
    };
    let mut spec = asked(Some("sashimi"), Some(SashimiSize::Seed), Some(131_072));
    spec.sashimi.quantizer = Some(Quantizer::Linear);
    let config = spec.train_config(flex()).unwrap();
    let task: SashimiConfig = config.model.config().unwrap();
    assert_eq!(task.shape, SashimiSize::Seed.shape());
    assert_eq!(task.sample_len, 131_072);
    assert_eq!(task.quantizer, Quantizer::Linear);
    // A plan made without a run (a what-if) is for the same model.
    assert_eq!(spec.sized(SashimiConfig::default()).unwrap(), task);
    let uneven = asked(Some("sashimi"), None, Some(1_000))
        .train_config(flex())
        .unwrap_err();
    assert!(
        uneven
            .to_string()
            .contains("the crop's length in samples: a crop of 1000"),
        "{uneven}"
    );
    for model in [None, Some("asr-transformer")] {
        let other = asked(model, None, Some(16_000)).train_config(flex());
        assert!(
            matches!(
                other,
                Err(SpecError::ForSashimi {
                    setting: Setting::SampleLen,
                    ..
                })
            ),
            "{model:?}: {other:?}"
        );
    }
}

#[test]
fn waveform_recordings_take_the_sample_rate_and_resampling_and_no_machine_sounds() {
    use crate::spec::SashimiSpec;
    use crate::waveform::{SashimiConfig, WaveformFolder};
    let mut spec = RunSpec {
        model: Some("sashimi".into()),
        sashimi: SashimiSpec {
            waveforms: Some("recordings".into()),
            ..SashimiSpec::default()
        },
        ..RunSpec::default()
    };
    let folder = |spec: &RunSpec| {
        let config = spec.train_config(flex()).unwrap();
        config.model.config::<SashimiConfig>().unwrap().folder
    };
    let at = |sample_rate, resample| WaveformFolder {
        root: "recordings".into(),
        sample_rate,
        resample,
        stereo: false,
    };
    assert_eq!(folder(&spec), Some(at(16_000, false)));
    spec.data.sample_rate = Some(22_050);
    spec.data.resample = true;
    assert_eq!(folder(&spec), Some(at(22_050, true)));
    spec.sashimi.stereo = true;
    assert!(folder(&spec).is_some_and(|f| f.stereo));
    spec.sashimi.stereo = false;
    spec.data.machine_type = Some("fan".into());
    assert!(matches!(
        spec.train_config(flex()),
        Err(SpecError::WaveformsWith(Setting::MachineType))
    ));
    // Without recordings the rate is still the DCASE recordings' setting, and the built-in
    // digits are mono.
    spec.data.machine_type = None;
    spec.sashimi.waveforms = None;
    assert!(matches!(
        spec.train_config(flex()),
        Err(SpecError::ForRecordings(Setting::SampleRate))
    ));
    spec.data = Default::default();
    spec.sashimi.stereo = true;
    assert!(matches!(
        spec.train_config(flex()),
        Err(SpecError::StereoWithoutRecordings)
    ));
    spec.sashimi.stereo = false;
    spec.model = Some("asr-transformer".into());
    spec.sashimi.waveforms = Some("recordings".into());
    assert!(matches!(
        spec.train_config(flex()),
        Err(SpecError::ForSashimi {
            setting: Setting::Waveforms,
            ..
        })
    ));
}
