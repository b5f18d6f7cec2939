//! The settings that only one built-in model takes (the contrastive model's negatives, the
//! classifier's network and generator, the recogniser's recordings and size), given to a
//! run's configuration, each refused with words for any other model.

use crate::classifier::{ClassifierConfig, DEFAULT_SHARE, GeneratedPatches};
use crate::config::TrainConfig;
use crate::contrastive::ContrastiveConfig;
use crate::setting::Setting;
use crate::speech::AsrConfig;

use crate::waveform::{SashimiConfig, WaveformFolder};

use super::{CLASSIFIER, CONTRASTIVE, RECOGNISER, RunSpec, SASHIMI, SpecError, given};

impl RunSpec {
    /// Gives `c`'s contrastive model the negatives asked for; only it takes them.
    pub(super) fn negatives_into(&self, c: &mut TrainConfig) -> Result<(), SpecError> {
        let Some(negatives) = self.negatives else {
            return Ok(());
        };
        if self.model_name() != CONTRASTIVE {
            return Err(SpecError::ForContrastive(self.model_name().to_string()));
        }
        let task = ContrastiveConfig {
            negatives,
            ..c.model.config()?
        };
        c.model = crate::model::ModelSpec::of(&task);
        Ok(())
    }

    /// Gives `c`'s classifier the network and generated patches asked for; only the
    /// classifier takes them.
    pub(super) fn classifier_into(&self, c: &mut TrainConfig) -> Result<(), SpecError> {
        let spec = &self.classifier;
        let asked = [
            (Setting::ClassifierArch, spec.arch.is_some()),
            (Setting::Generator, spec.generator.is_some()),
            (Setting::GeneratedShare, spec.generated_share.is_some()),
        ];
        let Some(&(first, _)) = asked.iter().find(|(_, given)| *given) else {
            return Ok(());
        };
        if self.model_name() != CLASSIFIER {
            return Err(SpecError::ForClassifier {
                setting: first,
                model: self.model_name().to_string(),
            });
        }
        let share = spec.generated_share.unwrap_or(DEFAULT_SHARE);
        if spec.generator.is_none() && spec.generated_share.is_some() {
            return Err(SpecError::GeneratedShare(None));
        }
        if !(share > 0.0 && share <= 1.0) {
            return Err(SpecError::GeneratedShare(Some(share)));
        }
        let mut task: ClassifierConfig = c.model.config()?;
        given(&mut task.arch, spec.arch);
        if let Some(generator) = &spec.generator {
            task.generated = Some(GeneratedPatches::from(generator.clone(), share));
        }
        c.model = crate::model::ModelSpec::of(&task);
        Ok(())
    }

    /// Gives `c`'s recogniser the recordings and size asked for: only the speech model takes
    /// them, and no setting of machine sounds goes with recordings.
    pub(super) fn recogniser_into(&self, c: &mut TrainConfig) -> Result<(), SpecError> {
        let d = &self.data;
        let asked = [
            (Setting::SpeechTrain, d.speech.is_some()),
            (Setting::AsrSize, self.asr_size.is_some()),
        ];
        let Some(&(first, _)) = asked.iter().find(|(_, given)| *given) else {
            return Ok(());
        };
        // The contrastive model reads the recogniser's recordings (utterances and their
        // transcripts as its pairs); its towers have their own size.
        let contrastive = self.model_name() == CONTRASTIVE;
        if self.model_name() != RECOGNISER && !(contrastive && first == Setting::SpeechTrain) {
            return Err(SpecError::ForRecogniser {
                setting: if contrastive { Setting::AsrSize } else { first },
                model: self.model_name().to_string(),
            });
        }
        if contrastive && self.asr_size.is_some() {
            return Err(SpecError::ForRecogniser {
                setting: Setting::AsrSize,
                model: self.model_name().to_string(),
            });
        }
        if d.speech.is_some() {
            let machine_sounds = [
                (Setting::DataRoot, d.root.is_some()),
                (Setting::MachineType, d.machine_type.is_some()),
                (Setting::NMels, d.n_mels.is_some()),
                (Setting::SampleRate, d.sample_rate.is_some()),
                (Setting::Resample, d.resample),
                (Setting::MachineIds, d.machine_ids.is_some()),
                (Setting::TrainClipsPerId, d.train_clips_per_id.is_some()),
                (Setting::TestClipsPerId, d.test_clips_per_id.is_some()),
            ];
            if let Some((setting, _)) = machine_sounds.iter().find(|(_, given)| *given) {
                return Err(SpecError::SpeechWith(*setting));
            }
        }
        if contrastive {
            let mut task: ContrastiveConfig = c.model.config()?;
            task.speech.files = d.speech.clone();
            c.model = crate::model::ModelSpec::of(&task);
            return Ok(());
        }
        let mut task: AsrConfig = c.model.config()?;
        if let Some(files) = &d.speech {
            task.files = Some(files.clone());
        }
        if let Some(size) = self.asr_size {
            task.shape = size.shape();
        }
        c.model = crate::model::ModelSpec::of(&task);
        Ok(())
    }

    /// Gives `c`'s SaShiMi model the size, crop, quantiser and recordings asked for; only it
    /// takes them. A crop the network cannot pool is refused here, before any data is made,
    /// and so is a setting of another kind of data beside the recordings.
    pub(super) fn sashimi_into(&self, c: &mut TrainConfig) -> Result<(), SpecError> {
        let asked = &self.sashimi;
        let given_first = [
            (Setting::SashimiSize, asked.size.is_some()),
            (Setting::SampleLen, asked.sample_len.is_some()),
            (Setting::Quantizer, asked.quantizer.is_some()),
            (Setting::Waveforms, asked.waveforms.is_some()),
            (Setting::Mixtures, asked.mixtures.is_some()),
            (Setting::Stereo, asked.stereo),
        ];
        let Some(&(first, _)) = given_first.iter().find(|(_, given)| *given) else {
            return Ok(());
        };
        if self.model_name() != SASHIMI {
            return Err(SpecError::ForSashimi {
                setting: first,
                model: self.model_name().to_string(),
            });
        }
        let mut task: SashimiConfig = c.model.config()?;
        if let Some(size) = asked.size {
            task.shape = size.shape();
        }
        given(&mut task.sample_len, asked.sample_len);
        given(&mut task.quantizer, asked.quantizer);
        match asked.mixtures {
            Some(0) => return Err(SpecError::NoMixtures),
            Some(n) => task.shape.mixtures = n,
            None => {}
        }
        if let Some(root) = &asked.waveforms {
            let d = &self.data;
            let other_data = [
                (Setting::DataRoot, d.root.is_some()),
                (Setting::MachineType, d.machine_type.is_some()),
                (Setting::NMels, d.n_mels.is_some()),
                (Setting::MachineIds, d.machine_ids.is_some()),
                (Setting::TrainClipsPerId, d.train_clips_per_id.is_some()),
                (Setting::TestClipsPerId, d.test_clips_per_id.is_some()),
                (Setting::SpeechTrain, d.speech.is_some()),
            ];
            if let Some((setting, _)) = other_data.iter().find(|(_, given)| *given) {
                return Err(SpecError::WaveformsWith(*setting));
            }
            task.folder = Some(WaveformFolder {
                root: root.clone(),
                sample_rate: d.sample_rate.unwrap_or(task.digits.sample_rate),
                resample: d.resample,
                stereo: asked.stereo,
            });
        } else if asked.stereo {
            return Err(SpecError::StereoWithoutRecordings);
        }
        task.check_sample_len().map_err(SpecError::SampleLen)?;
        c.model = crate::model::ModelSpec::of(&task);
        Ok(())
    }
}
