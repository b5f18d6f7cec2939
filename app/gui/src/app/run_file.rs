//! Run files in the app: *Open run file...* takes one (a run's OUT/run.toml, or one saved here)
//! as the app's choices, *Save run file...* writes the choices as one, which `trainer-cli train
//! --config` trains too. What the app has no control for (the learning rate, the seed, the
//! built-in dataset's sizes...) is kept from the file opened, for runs of its model.

use std::path::Path;

use headroom_core::RunLength;
use headroom_core::budget::simulated as devices;
use headroom_core::spec::file::{self, RunFileError};
use headroom_core::spec::{BudgetSpec, RunSpec};

use super::{BudgetChoice, HeadroomApp, Pin};

/// The run file at `path`, as a spec.
pub fn read(path: &Path) -> Result<RunSpec, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("Cannot read {}: {e}", path.display()))?;
    toml::from_str(&text).map_err(|e| {
        RunFileError::new(path, &text, e.span().map(|s| s.start), e.message()).to_string()
    })
}

/// A budget in bytes as the plan panel's figure: whole GiB or MiB where it is one.
fn figure(bytes: u64) -> String {
    match bytes {
        b if b > 0 && b % (1 << 30) == 0 => format!("{}GiB", b >> 30),
        b if b > 0 && b % (1 << 20) == 0 => format!("{}MiB", b >> 20),
        b => b.to_string(),
    }
}

fn pin<T: Copy>(pin: &mut Pin<T>, value: Option<T>) {
    pin.pinned = value.is_some();
    if let Some(value) = value {
        pin.value = value;
    }
}

impl HeadroomApp {
    /// Opens the run file at `path`: its settings become the app's choices.
    pub fn open_run_file(&mut self, path: &Path) {
        self.status = match read(path).and_then(|spec| self.use_run_spec(spec)) {
            Ok(note) => format!("Opened {}{note}", path.display()),
            Err(e) => e,
        };
    }

    /// Takes `spec` as the app's choices: the model, the data, the pins, the effective batch,
    /// the budget, the length and, where this machine has it, the device. Returns what could
    /// not be taken as it is, in words for the status line.
    pub fn use_run_spec(&mut self, spec: RunSpec) -> Result<String, String> {
        let model = spec.model_name().to_string();
        let defaults = headroom_core::registry::info_of(&model)
            .map_err(|e| e.to_string())?
            .default_batch;
        self.budget_choice = match &spec.memory.budget {
            BudgetSpec::FreeMemory => BudgetChoice::FreeMemory,
            BudgetSpec::Given { bytes } => BudgetChoice::Custom(figure(*bytes)),
            BudgetSpec::Simulated { device } => BudgetChoice::Simulated(
                devices::DEVICES
                    .iter()
                    .position(|d| d.name == device)
                    .ok_or_else(|| format!("No simulated GPU {device}"))?,
            ),
        };
        let split = spec.split;
        pin(&mut self.pins.micro_batch, split.micro_batch);
        pin(&mut self.pins.n_patches, split.n_patches);
        pin(&mut self.pins.accumulation, split.accumulation);
        pin(&mut self.pins.precision, spec.memory.precision);
        pin(&mut self.pins.checkpointing, spec.memory.checkpointing);
        // The planner's default: the split given, the model's where it is open.
        self.effective_batch = spec.memory.effective_batch.unwrap_or(
            split.micro_batch.unwrap_or(defaults.spectrograms)
                * split.n_patches.unwrap_or(defaults.patches)
                * split.accumulation.unwrap_or(1),
        );
        self.model = model;
        self.recordings = spec.data.speech.as_ref().map(|s| s.train.clone());
        match &spec.data.root {
            Some(root) => self.open_dataset(root.clone()),
            None => {
                let sizes = &spec.data;
                let synthetic = &mut self.synthetic;
                synthetic.machine_ids = sizes.machine_ids.unwrap_or(synthetic.machine_ids);
                synthetic.train_per_id = sizes.train_clips_per_id.unwrap_or(synthetic.train_per_id);
                if let Some(n) = sizes.test_clips_per_id {
                    synthetic.test_normal_per_id = n;
                    synthetic.test_anomaly_per_id = n;
                }
                self.use_synthetic();
            }
        }
        let mut note = String::new();
        if !spec.planner {
            note.push_str("; the app plans, with the file's split pinned");
        }
        if let Some(wanted) = spec.device.as_deref() {
            note.push_str(&self.select_device(wanted));
        }
        self.base = spec;
        if let Some(RunLength::Steps(steps)) = self.base.length {
            // The steps' own control holds them.
            self.settings.steps = steps;
            self.base.length = None;
        }
        self.calibrate_selected();
        Ok(note)
    }

    /// Selects the probed device `selector` names (`cpu`, `cuda:1`, `wgpu:0`, or a backend
    /// alone); what is said when this machine has none.
    fn select_device(&mut self, selector: &str) -> String {
        let devices = self.machine.as_ref().map(|m| m.devices.as_slice());
        let found = devices.unwrap_or_default().iter().position(|d| {
            d.usable && (d.selector == selector || d.selector.split(':').next() == Some(selector))
        });
        match found {
            Some(i) => {
                self.selected = Some(i);
                String::new()
            }
            None => format!("; no device {selector} here, training stays on the one selected"),
        }
    }

    /// The choices as a run file: the spec they ask for, with the selected device.
    pub fn run_file_text(&self, unix_secs: u64) -> Result<String, String> {
        let spec = RunSpec {
            device: self.device().map(|d| d.selector.clone()),
            ..self.spec()?
        };
        let body = toml::to_string(&spec).map_err(|e| e.to_string())?;
        Ok(format!(
            "{}# Open it here (Open run file...), or train it with `trainer-cli train --config \
             FILE`.\n\n{body}",
            file::header(&written_by(), unix_secs)
        ))
    }

    /// Saves the choices as the run file `path`.
    pub fn save_run_file(&mut self, path: &Path) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let written = self.run_file_text(now).and_then(|text| {
            headroom_datasets::error::write_atomically(path, |w| {
                std::io::Write::write_all(w, text.as_bytes())
            })
            .map_err(|e| e.to_string())
        });
        self.status = match written {
            Ok(()) => format!("Saved {}", path.display()),
            Err(e) => format!("Cannot save {}: {e}", path.display()),
        };
    }

    /// The header's buttons: open a run file, save the choices as one.
    pub(super) fn run_file_buttons(&mut self, ui: &mut eframe::egui::Ui) {
        let idle = !self.session.is_running();
        if ui
            .add_enabled(idle, eframe::egui::Button::new("Open run file..."))
            .on_hover_text("Take a run's settings from a run.toml (trainer-cli writes one per run)")
            .clicked()
            && let Some(path) = rfd::FileDialog::new()
                .add_filter("run file", &["toml"])
                .pick_file()
        {
            self.open_run_file(&path);
        }
        if ui
            .button("Save run file...")
            .on_hover_text("Save these settings; `trainer-cli train --config FILE` trains them")
            .clicked()
            && let Some(path) = rfd::FileDialog::new()
                .set_file_name(file::FILE_NAME)
                .save_file()
        {
            self.save_run_file(&path);
        }
    }
}

/// Who writes the app's run files: this program and its version.
pub(super) fn written_by() -> String {
    format!("trainer-gui {}", env!("CARGO_PKG_VERSION"))
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use eframe::egui;
    use headroom_core::precision::Precision;
    use headroom_core::spec::{MemorySpec, SplitSpec};

    use super::*;
    use crate::Settings;

    fn app() -> HeadroomApp {
        let settings = Settings {
            probe_gpus: false,
            runs_dir: PathBuf::from("runs"),
            ..Settings::default()
        };
        HeadroomApp::new(&egui::Context::default(), settings)
    }

    /// The spec a run file saved by `app` reads back as.
    fn saved(app: &HeadroomApp) -> RunSpec {
        let text = app.run_file_text(0).unwrap();
        assert!(text.starts_with("# A Headroom run: "), "{text}");
        toml::from_str(&text).unwrap()
    }

    #[test]
    fn the_choices_saved_open_as_the_same_choices() {
        let mut first = app();
        first.model = "dcase-ae".into();
        first.effective_batch = 48;
        first.budget_choice = BudgetChoice::Custom("3GiB".into());
        first.pins.micro_batch = Pin {
            pinned: true,
            value: 6,
        };
        first.pins.precision = Pin {
            pinned: true,
            value: Precision::F16,
        };
        first.settings.steps = 77;
        let spec = saved(&first);
        assert_eq!(spec.device.as_deref(), Some("cpu"));
        assert_eq!(spec.model.as_deref(), Some("dcase-ae"));

        let mut second = app();
        assert_eq!(second.use_run_spec(spec.clone()).unwrap(), "");
        assert_eq!(second.spec().unwrap(), first.spec().unwrap());
        assert_eq!(second.settings.steps, 77);
        assert_eq!(second.pins, first.pins);
        assert_eq!(second.budget_choice, first.budget_choice);
        assert_eq!(saved(&second), spec);
    }

    #[test]
    fn a_runs_file_keeps_what_the_app_has_no_control_for() {
        let spec = RunSpec {
            model: Some("vq-patch-ae".into()),
            planner: false,
            length: Some(RunLength::Epochs(3)),
            lr: Some(0.002),
            seed: Some(7),
            device: Some("cuda:3".into()),
            split: SplitSpec {
                micro_batch: Some(2),
                n_patches: Some(3),
                accumulation: Some(4),
                ..SplitSpec::default()
            },
            memory: MemorySpec {
                budget: BudgetSpec::Simulated {
                    device: devices::DEVICES[1].name.to_string(),
                },
                ..MemorySpec::default()
            },
            ..RunSpec::default()
        };
        let mut app = app();
        let note = app.use_run_spec(spec).unwrap();
        assert!(note.contains("the app plans"), "{note}");
        assert!(note.contains("no device cuda:3 here"), "{note}");
        assert_eq!(app.budget_choice, BudgetChoice::Simulated(1));
        assert_eq!(app.effective_batch, 24);
        let asked = app.spec().unwrap();
        assert!(asked.planner);
        assert_eq!((asked.lr, asked.seed), (Some(0.002), Some(7)));
        assert_eq!(asked.length, Some(RunLength::Epochs(3)));
        assert_eq!(asked.split.accumulation, Some(4));
        // Another model picked trains with its own defaults.
        app.model = "dcase-ae".into();
        let other = app.spec().unwrap();
        assert_eq!((other.lr, other.seed), (None, None));
        assert_eq!(other.length, Some(RunLength::Steps(app.settings.steps)));
    }

    #[test]
    fn a_bad_run_file_says_its_line_and_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.toml");
        std::fs::write(&path, "seed = 1\n[split]\nmicro_batch = \"x\"\n").unwrap();
        let mut app = app();
        app.open_run_file(&path);
        let said = app.status().to_string();
        assert!(said.contains("line 3"), "{said}");
        assert!(said.contains("key `split.micro_batch`"), "{said}");
        std::fs::write(&path, "model = \"dcase-ae\"\n").unwrap();
        app.open_run_file(&path);
        assert!(app.status().starts_with("Opened"), "{}", app.status());
        assert_eq!(app.model, "dcase-ae");
        app.save_run_file(&path);
        assert_eq!(read(&path).unwrap().model.as_deref(), Some("dcase-ae"));
        assert!(figure(3 << 30) == "3GiB" && figure(5 << 20) == "5MiB" && figure(7) == "7");
    }
}
