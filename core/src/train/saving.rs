//! Saving a run: checkpoints to its output folder, or the same files in memory (what a web
//! page offers as downloads).

use crate::checkpoint::{self, CheckpointFiles, CheckpointState, RngState};
use crate::events::{Event, EventSink, PictureReport};
use crate::readback::LocalFuture;

use super::run_task::{RunTask, TaskData};
use super::{TaskTrainer, TrainError};

impl<T: RunTask> TaskTrainer<T> {
    pub(super) fn checkpoint(&mut self, sink: &mut dyn EventSink) -> Result<(), TrainError> {
        let Some(out) = &self.options.out_dir else {
            return Ok(());
        };
        let average = self.average.as_ref().map(|a| a.applied(&self.networks));
        let path = checkpoint::save(
            out,
            &self.checkpoint_state(),
            &self.networks,
            average.as_ref(),
            &self.optimizer,
        )?;
        sink.emit(Event::Checkpoint {
            step: self.step,
            path: path.display().to_string(),
        });
        Ok(())
    }

    /// Draws what the networks make now, when the task draws anything, and writes it as
    /// `samples/step-NNNNNNNN.png` in the run's folder. A picture that cannot be written is
    /// a warning: the run goes on, and the event carries the picture without a path.
    pub(super) fn draw_picture<'a>(
        &'a mut self,
        sink: &'a mut dyn EventSink,
    ) -> LocalFuture<'a, Result<(), TrainError>> {
        Box::pin(async move {
            let plain = self.device.clone().without_autodiff();
            let Some((picture, about)) = self
                .task
                .picture(&self.measured_model(), &self.data, &plain)
                .await?
            else {
                return Ok(());
            };
            let path = self.options.out_dir.as_ref().and_then(|out| {
            let path = out
                .join("samples")
                .join(format!("step-{:08}.png", self.step));
            let written = picture
                .png()
                .map_err(|e| e.to_string())
                .and_then(|bytes| {
                    std::fs::create_dir_all(out.join("samples"))
                        .and_then(|()| std::fs::write(&path, bytes))
                        .map_err(|e| e.to_string())
                });
            match written {
                Ok(()) => Some(path.display().to_string()),
                Err(reason) => {
                    tracing::warn!(path = %path.display(), %reason, "the picture could not be written");
                    None
                }
            }
        });
            sink.emit(Event::Picture(PictureReport {
                step: self.step,
                about,
                path,
                picture,
            }));
            Ok(())
        })
    }

    /// The checkpoint of the run as it stands, in memory (what a web page offers as
    /// downloads); the files `--out` gets at a checkpoint.
    pub fn checkpoint_files(&self) -> Result<CheckpointFiles, TrainError> {
        if cfg!(target_arch = "wasm32") && !self.config.backend.is_host() {
            return Err(TrainError::CheckpointOnWebGpu);
        }
        let dir = std::path::Path::new("checkpoint");
        let average = self.average.as_ref().map(|a| a.applied(&self.networks));
        Ok(CheckpointFiles::encode(
            &self.checkpoint_state(),
            &self.networks,
            average.as_ref(),
            &self.optimizer,
            dir,
        )?)
    }

    fn checkpoint_state(&self) -> CheckpointState {
        CheckpointState {
            format_version: 1,
            step: self.step,
            total_steps: self.total_steps,
            config: self.config.clone(),
            normalization: self.data.normalization(),
            rng: RngState {
                seed: self.config.seed,
                stream_position: self.step * self.config.clips_per_step() as u64,
            },
            param_ids: checkpoint::param_ids(&self.networks),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::Trainer;
    use crate::checkpoint::CheckpointFiles;
    use crate::train::{DatasetSource, RunLength, RunOptions, TrainConfig};

    /// A web page's download: the checkpoint in memory is the one `--out` holds.
    #[test]
    fn the_checkpoint_in_memory_is_the_one_out_holds() {
        let mut config = TrainConfig {
            micro_batch: 2,
            n_patches: 2,
            accumulation: 1,
            length: RunLength::Steps(2),
            quantizer_warmup_steps: Some(1),
            validation_every_nth_clip: 0,
            ..TrainConfig::default()
        };
        config.dataset = DatasetSource::Synthetic(headroom_datasets::SyntheticConfig {
            machine_ids: 1,
            train_per_id: 4,
            test_normal_per_id: 1,
            test_anomaly_per_id: 1,
            ..Default::default()
        });
        let dir = tempfile::tempdir().unwrap();
        let mut run = Trainer::new(
            config,
            RunOptions {
                out_dir: Some(dir.path().to_path_buf()),
                ..RunOptions::default()
            },
        )
        .unwrap();
        run.run(&mut Vec::new()).unwrap();
        let (on_disk, _) = CheckpointFiles::read(dir.path()).unwrap();
        let in_memory = run.checkpoint_files().unwrap();
        assert_eq!(in_memory.state, on_disk.state);
        assert_eq!(in_memory.optimizer, on_disk.optimizer);
        assert_eq!(on_disk.state(dir.path()).unwrap().step, 2);
        // safetensors' header lists its metadata in a hash map's order: compare the weights.
        let device = crate::BackendKind::Flex.device().unwrap().autodiff();
        let weights = |files: &CheckpointFiles| {
            let loaded = files
                .clone()
                .decode::<crate::model::VqAutoencoderConfig>(dir.path(), &device)
                .unwrap();
            crate::model::flat_parameters(&loaded.model)
        };
        assert_eq!(weights(&in_memory), weights(&on_disk));
        assert_eq!(run.parameters(), weights(&in_memory));
    }
}
