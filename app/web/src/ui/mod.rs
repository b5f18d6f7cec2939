//! The page's window onto a run, drawn with egui: the data, Start/Pause/Stop, the backend
//! and the plan, the memory bar, the loss curve, the scores and the run's files. The run's
//! events arrive from the worker as the JSON lines `trainer-cli --json` prints and are folded
//! by the desktop app's [`Session`]. No browser in here: tests draw it natively, as the page
//! does (`canvas` runs it in eframe's web runner).
//!
//! The window's state and what it says in words live here; `rows` draws it, `painted` reads
//! back what was drawn.

use headroom_core::events::Event;
use headroom_ui::session::{RunState, Session};

use crate::settings::PageSettings;

mod painted;
mod rows;
#[cfg(test)]
mod tests;

pub use painted::{Painted, painted_texts};

/// What the user asked for in a frame; the page carries it out (`www/main.js`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Start a run with these settings: the address' with the budget typed in the page.
    Start(String),
    /// Pause (`true`) or resume (`false`) at the next step boundary.
    Pause(bool),
    Stop,
    /// Open the browser's folder chooser.
    PickFolder,
    /// Open the browser's file chooser for a checkpoint's files, to resume from.
    PickCheckpoint,
    /// Start the next run afresh, not from the chosen checkpoint.
    ForgetCheckpoint,
    /// Save one of the run's files.
    Download(String),
}

/// The page as it stands: one run at a time.
#[derive(Debug)]
pub struct PageUi {
    /// The address' settings (its query, without the `?`).
    query: String,
    /// The budget the user types, as they type it: the address' `budget` until they do.
    budget: String,
    data: String,
    /// The checkpoint the next Start resumes from, in words; `None`: a new run.
    checkpoint: Option<String>,
    session: Session,
    /// Between Start and the worker's end (which comes after scoring, past `finished`,
    /// where the session's state says the run is over).
    running: bool,
    backend: Option<String>,
    budget_source: Option<String>,
    /// The run's end in words, from its `finished` event, and whether the test split is
    /// scored after it.
    ended: Option<(String, bool)>,
    /// Whether the address lets a run score the test split (`eval=0` does not).
    scores: bool,
    files: Vec<String>,
    note: Option<String>,
    /// The run's newest picture of what its networks make (a GAN's generated patches).
    picture: headroom_ui::picture_view::PictureView,
}

const BUILT_IN: &str = "the built-in dataset";

impl PageUi {
    pub fn new(query: &str) -> Self {
        let query = query.strip_prefix('?').unwrap_or(query);
        let budget = form_urlencoded::parse(query.as_bytes())
            .filter(|(key, _)| key == "budget")
            .last()
            .map_or_else(String::new, |(_, value)| value.into_owned());
        Self {
            budget,
            query: query.into(),
            data: BUILT_IN.into(),
            checkpoint: None,
            session: Session::default(),
            running: false,
            backend: None,
            budget_source: None,
            ended: None,
            scores: PageSettings::parse(query).is_ok_and(|s| s.eval),
            files: Vec::new(),
            note: None,
            picture: Default::default(),
        }
    }

    /// What the run will train on, in words ("20 .wav/.npy files picked (fan)").
    pub fn set_data(&mut self, words: &str) {
        self.data = if words.is_empty() {
            BUILT_IN.into()
        } else {
            words.into()
        };
    }

    /// The checkpoint the next Start resumes from, in words ("model.safetensors,
    /// optimizer.burnpack, state.json (step 40)"); empty: a new run.
    pub fn set_checkpoint(&mut self, words: &str) {
        self.checkpoint = (!words.is_empty()).then(|| words.into());
    }

    /// Start was pressed: what the last run showed goes.
    pub fn starting(&mut self) {
        let data = std::mem::take(&mut self.data);
        *self = Self {
            data,
            checkpoint: self.checkpoint.take(),
            query: std::mem::take(&mut self.query),
            budget: std::mem::take(&mut self.budget),
            scores: self.scores,
            session: Session::starting(),
            running: true,
            ..Self::new("")
        };
    }

    /// One of the worker's JSON lines.
    pub fn event_line(&mut self, line: &str) -> Result<(), String> {
        let event: Event =
            serde_json::from_str(line).map_err(|e| format!("cannot read the event {line}: {e}"))?;
        self.apply(&event);
        Ok(())
    }

    pub fn apply(&mut self, event: &Event) {
        match event {
            Event::BackendChoice { backend, reason } => {
                self.backend = Some(format!("{backend}: {reason}"))
            }
            Event::Budget { source, .. } => self.budget_source = Some(source.clone()),
            Event::Finished {
                step,
                total_steps,
                stopped_early,
                elapsed_s,
                ..
            } => {
                let how = if *stopped_early {
                    "stopped"
                } else {
                    "finished"
                };
                self.ended = Some((
                    format!("{how} at step {step}/{total_steps} in {elapsed_s:.1} s"),
                    self.scores && !stopped_early,
                ));
            }
            _ => {}
        }
        self.session.apply(event);
    }

    /// A file of the run is ready to save.
    pub fn offered(&mut self, name: &str) {
        if !self.files.iter().any(|f| f == name) {
            self.files.push(name.into());
        }
    }

    /// What to say beside the run's files (why there is no checkpoint).
    pub fn note(&mut self, words: &str) {
        self.note = Some(words.into());
    }

    /// The run stopped on an error.
    pub fn fail(&mut self, error: &str) {
        self.session.fail(error.into());
        self.running = false;
    }

    /// The worker is done: the run, and its scoring, are over.
    pub fn ended(&mut self) {
        self.running = false;
    }

    pub fn is_running(&self) -> bool {
        self.running
    }

    /// `losses.csv`: a row per step the window has shown (step, loss, patches/s, memory in
    /// use and the step's peak, in bytes); `None` before the first step.
    pub fn losses_csv(&self) -> Option<String> {
        let session = &self.session;
        if session.loss.is_empty() {
            return None;
        }
        let mut csv = String::from("step,loss,patches_per_s,mem_allocated_bytes,mem_peak_bytes\n");
        let rows = session
            .loss
            .iter()
            .zip(&session.throughput)
            .zip(&session.memory);
        for ((&[step, loss], &[_, speed]), memory) in rows {
            csv += &format!(
                "{step},{loss},{speed},{},{}\n",
                memory.allocated, memory.peak
            );
        }
        Some(csv)
    }

    /// The status line: what the run is doing now.
    pub fn status(&self) -> String {
        let session = &self.session;
        if session.state == RunState::Failed {
            return "stopped by an error".into();
        }
        if let Some((ended, scoring)) = &self.ended {
            return if self.running && *scoring {
                format!("{ended}; scoring the test split")
            } else {
                ended.clone()
            };
        }
        let paused = session.state == RunState::Paused;
        if session.state == RunState::Stopping && self.running {
            return "stopping (after the step under way)".into();
        }
        match (session.loss.last(), session.total_steps()) {
            (Some(&[step, loss]), total) if total > 0 => {
                let speed = session.throughput.last().map_or(0.0, |t| t[1]);
                let paused = if paused { "paused after " } else { "" };
                format!("{paused}step {step}/{total}, loss {loss:.4}, {speed:.0} patches/s")
            }
            _ if paused => "paused (after the step under way)".into(),
            _ if self.running => session
                .log
                .last()
                .cloned()
                .unwrap_or_else(|| "loading the engine".into()),
            _ => "idle".into(),
        }
    }

    /// The settings to start with: the address', its budget replaced by the one typed
    /// (none: the page's own, from the device); an error names a setting that does not fit.
    fn start_query(&self) -> Result<String, String> {
        let mut settings = form_urlencoded::Serializer::new(String::new());
        for (key, value) in form_urlencoded::parse(self.query.as_bytes()) {
            if key != "budget" {
                settings.append_pair(&key, &value);
            }
        }
        let budget = self.budget.trim();
        if !budget.is_empty() {
            settings.append_pair("budget", budget);
        }
        let settings = settings.finish();
        PageSettings::parse(&settings).map_err(|e| e.to_string())?;
        Ok(settings)
    }
}
