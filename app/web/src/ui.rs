//! The page's window onto a run, drawn with egui: the data, Start/Pause/Stop, the backend
//! and the plan, the memory bar, the loss curve, the scores and the run's files. The run's
//! events arrive from the worker as the JSON lines `trainer-cli --json` prints and are folded
//! by the desktop app's [`Session`]. No browser in here: tests draw it natively, as the page
//! does (`canvas` runs it in eframe's web runner).

use egui::{Color32, RichText};
use headroom_core::events::Event;
use headroom_core::memory::MemorySource;
use headroom_ui::memory_bar::{MemoryBar, Segment, legend, palette};
use headroom_ui::session::{RunState, Session, human};
use headroom_ui::{event_log, loss_plot, results_table};

use crate::settings::PageSettings;

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
}

const BUILT_IN: &str = "the built-in dataset";
const ERROR_COLOR: Color32 = Color32::from_rgb(190, 0, 32);

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

    /// Draws the page; returns what the user asked for.
    pub fn show(&mut self, ui: &mut egui::Ui) -> Vec<Action> {
        let mut actions = Vec::new();
        ui.heading("Headroom: training in this page");
        let settings = if self.query.is_empty() {
            "(the defaults; e.g. ?backend=cpu&steps=40&start=1)".into()
        } else {
            format!("?{}", self.query)
        };
        ui.label(RichText::new(format!("Settings: {settings}")).weak());
        self.data_row(ui, &mut actions);
        self.controls(ui, &mut actions);
        if let Some(error) = &self.session.error {
            ui.label(
                RichText::new(format!("Error: {error}"))
                    .color(ERROR_COLOR)
                    .strong(),
            );
        }
        if let Some(backend) = &self.backend {
            ui.label(format!("Backend {backend}"));
        }
        if let Some(plan) = &self.session.plan {
            let plan = &plan.plan;
            ui.label(format!(
                "Plan: {}; {}, checkpointing {}",
                plan.reason,
                plan.precision,
                if plan.checkpointing { "on" } else { "off" }
            ));
        }
        self.memory(ui);
        self.loss_curve(ui);
        if let Some(report) = &self.session.evaluation {
            ui.label(format!("Anomaly scores of {} test clips", report.clips));
            results_table::show(ui, report);
        }
        self.files_row(ui, &mut actions);
        event_log::show(ui, &self.session, false);
        actions
    }

    fn data_row(&self, ui: &mut egui::Ui, actions: &mut Vec<Action>) {
        ui.horizontal_wrapped(|ui| {
            ui.label(format!("Data: {}.", self.data));
            if ui
                .add_enabled(!self.running, egui::Button::new("Choose a folder..."))
                .clicked()
            {
                actions.push(Action::PickFolder);
            }
            ui.label(
                "or drop one on the page, in the DCASE layout: fan/train/normal_id_00_00000000.wav, \
                 fan/test/anomaly_id_00_00000000.wav (.npy spectrograms too)",
            );
        });
        ui.horizontal_wrapped(|ui| {
            match &self.checkpoint {
                Some(words) => ui.label(format!("Resume from: {words}.")),
                None => ui.label("Start: a new run."),
            };
            if ui
                .add_enabled(!self.running, egui::Button::new("Resume from a checkpoint..."))
                .clicked()
            {
                actions.push(Action::PickCheckpoint);
            }
            if self.checkpoint.is_some() {
                if ui
                    .add_enabled(!self.running, egui::Button::new("New run instead"))
                    .clicked()
                {
                    actions.push(Action::ForgetCheckpoint);
                }
                ui.label(
                    "(the run's model, data and settings are the checkpoint's; steps= is its \
                     new length; pick its data folder again if it trained on yours)",
                );
            } else {
                ui.label("(the three files a run offers: model.safetensors, optimizer.burnpack, state.json)");
            }
        });
    }

    fn controls(&mut self, ui: &mut egui::Ui, actions: &mut Vec<Action>) {
        ui.horizontal(|ui| {
            ui.label("Memory budget:");
            ui.add_enabled(
                !self.running,
                egui::TextEdit::singleline(&mut self.budget)
                    .hint_text("from the device")
                    .desired_width(110.0),
            );
            if ui
                .add_enabled(!self.running, egui::Button::new("Start"))
                .clicked()
            {
                match self.start_query() {
                    Ok(query) => actions.push(Action::Start(query)),
                    Err(error) => self.session.fail(error),
                }
            }
            let state = self.session.state;
            let paused = state == RunState::Paused;
            let can_pause = self.running
                && self.ended.is_none()
                && matches!(
                    state,
                    RunState::Preparing | RunState::Training | RunState::Paused
                );
            let pause = if paused { "Resume" } else { "Pause" };
            if ui
                .add_enabled(can_pause, egui::Button::new(pause))
                .clicked()
            {
                self.session.state = if paused {
                    RunState::Training
                } else {
                    RunState::Paused
                };
                actions.push(Action::Pause(!paused));
            }
            if ui
                .add_enabled(can_pause, egui::Button::new("Stop"))
                .clicked()
            {
                self.session.state = RunState::Stopping;
                actions.push(Action::Stop);
                // A paused run must go on to reach the boundary where it stops.
                if paused {
                    actions.push(Action::Pause(false));
                }
            }
            ui.label(self.status());
        });
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

    fn memory(&self, ui: &mut egui::Ui) {
        let source = match self.session.info.as_ref().map(|info| info.memory_source) {
            Some(MemorySource::HostAllocator) => "the page's heap, counted",
            Some(MemorySource::DevicePool) => "the WebGPU device pool",
            Some(MemorySource::Unmeasured) => "not measured",
            None => "-",
        };
        let Some(latest) = self.session.latest_memory() else {
            ui.label(format!("Memory ({source}): -"));
            return;
        };
        let budget = latest.budget.or(self.session.budget);
        let mut words = format!(
            "Memory ({source}): in use {}, step peak {}",
            human(latest.allocated),
            human(latest.peak)
        );
        if let Some(reserved) = latest.reserved {
            words += &format!(", pool {}", human(reserved));
        }
        if let Some(budget) = budget {
            words += &format!(", budget {}", human(budget));
        }
        ui.label(words);
        let mut segments = vec![
            Segment {
                label: format!("in use {}", human(latest.allocated)),
                bytes: latest.allocated,
                color: palette("allocated"),
            },
            Segment {
                label: format!("up to the step's peak, {}", human(latest.peak)),
                bytes: latest.peak.saturating_sub(latest.allocated),
                color: palette("peak"),
            },
        ];
        // A device pool keeps what it once allocated: what the device has given the run.
        let reserved = latest.reserved.unwrap_or(0);
        if reserved > latest.peak {
            segments.push(Segment {
                label: format!("held by the pool, {}", human(reserved)),
                bytes: reserved - latest.peak,
                color: palette("reserved"),
            });
        }
        MemoryBar {
            capacity: budget.unwrap_or(0).max(latest.peak).max(reserved),
            budget,
            segments: &segments,
            peak: Some(latest.peak),
        }
        .show(ui);
        legend(ui, &segments);
        if let Some(source) = &self.budget_source {
            ui.label(RichText::new(format!("budget: {source}")).weak());
        }
    }

    fn loss_curve(&self, ui: &mut egui::Ui) {
        ui.label("Loss per step");
        loss_plot::show(ui, &self.session, 180.0);
    }

    fn files_row(&self, ui: &mut egui::Ui, actions: &mut Vec<Action>) {
        ui.horizontal_wrapped(|ui| {
            ui.label("Files of the run:");
            if self.files.is_empty() {
                ui.label("none yet");
            }
            for name in &self.files {
                if ui.button(name).clicked() {
                    actions.push(Action::Download(name.clone()));
                }
            }
        });
        if let Some(note) = &self.note {
            ui.label(RichText::new(note).weak());
        }
    }
}

/// A text egui painted this frame, and where (in points from the canvas' corner).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Painted {
    pub text: String,
    pub x: f32,
    pub y: f32,
    pub w: f32,
    pub h: f32,
}

/// Every text painted so far this frame, as it will be on the screen: what the page shows,
/// read back by its tests (and a user's script) without guessing at pixels.
pub fn painted_texts(ctx: &egui::Context) -> Vec<Painted> {
    let mut layers: Vec<egui::LayerId> = ctx.memory(|m| m.layer_ids().collect());
    // The central panel's layer, before it is in the order (the first frame).
    if !layers.contains(&egui::LayerId::background()) {
        layers.insert(0, egui::LayerId::background());
    }
    let mut found = Vec::new();
    ctx.graphics(|graphics| {
        for layer in &layers {
            if let Some(list) = graphics.get(*layer) {
                for clipped in list.all_entries() {
                    collect(&clipped.shape, clipped.clip_rect, &mut found);
                }
            }
        }
    });
    found
}

fn collect(shape: &egui::Shape, clip: egui::Rect, found: &mut Vec<Painted>) {
    match shape {
        egui::Shape::Text(text) => {
            let rect = text.visual_bounding_rect();
            if !text.galley.text().trim().is_empty() && clip.intersects(rect) {
                found.push(Painted {
                    text: text.galley.text().to_string(),
                    x: rect.min.x,
                    y: rect.min.y,
                    w: rect.width(),
                    h: rect.height(),
                });
            }
        }
        egui::Shape::Vec(shapes) => {
            for shape in shapes {
                collect(shape, clip, found);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One frame of the page at 1000 x 900 points, with `input`'s events; the texts it
    /// painted and what the user asked for.
    fn frame(
        page: &mut PageUi,
        ctx: &egui::Context,
        events: Vec<egui::Event>,
    ) -> (Vec<Painted>, Vec<Action>) {
        let input = egui::RawInput {
            screen_rect: Some(egui::Rect::from_min_size(
                egui::Pos2::ZERO,
                egui::vec2(1000.0, 900.0),
            )),
            events,
            ..Default::default()
        };
        let mut painted = Vec::new();
        let mut actions = Vec::new();
        let _ = ctx.run_ui(input, |ui| {
            actions = page.show(ui);
            painted = painted_texts(ui.ctx());
        });
        (painted, actions)
    }

    fn texts(painted: &[Painted]) -> String {
        painted
            .iter()
            .map(|p| p.text.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn run_lines() -> Vec<String> {
        let step = |step: u64, loss: f64| {
            format!(
                r#"{{"event":"step","step":{step},"total_steps":3,"epoch":0,"loss":{loss},"reconstruction_loss":{loss},"lr":0.001,"grad_norm":1.0,"patches_per_s":120.0,"step_ms":50.0,"micro_batch":2,"accumulation":1,"mem_allocated_bytes":41943040,"mem_peak_bytes":104857600,"mem_budget_bytes":536870912}}"#
            )
        };
        vec![
            r#"{"event":"backend_choice","backend":"flex","reason":"no WebGPU adapter in this browser"}"#.into(),
            r#"{"event":"budget","bytes":536870912,"source":"given as 512 MiB"}"#.into(),
            r#"{"event":"config","model":"vq-autoencoder","backend":"flex","device":"cpu","micro_batch":2,"accumulation":1,"n_patches":4,"stride":4,"effective_batch":8,"total_steps":3,"start_step":0,"steps_per_epoch":3,"lr":0.001,"seed":5,"train_clips":6,"validation_clips":2,"test_clips":4,"parameters":1000,"memory_source":"host_allocator","precision":"f32","checkpointing":false}"#.into(),
            step(1, 0.9),
            step(2, 0.7),
        ]
    }

    #[test]
    fn the_runs_events_are_drawn() {
        let ctx = egui::Context::default();
        let mut page = PageUi::new("?start=1");
        page.starting();
        for line in run_lines() {
            page.event_line(&line).unwrap();
        }
        // The first frame lays out; what it draws is the second's.
        frame(&mut page, &ctx, vec![]);
        let (painted, _) = frame(&mut page, &ctx, vec![]);
        let shown = texts(&painted);
        assert!(shown.contains("Backend flex: no WebGPU adapter"), "{shown}");
        assert!(
            shown.contains("Memory (the page's heap, counted): in use"),
            "{shown}"
        );
        assert!(
            shown.contains("in use 40 MiB, step peak 100 MiB, budget 512 MiB"),
            "{shown}"
        );
        assert!(shown.contains("loss 0.7000"), "{shown}");
        assert!(shown.contains("Files of the run:\nnone yet"), "{shown}");
    }

    #[test]
    fn the_budget_typed_replaces_the_addresss() {
        let mut page = PageUi::new("?steps=4&budget=1GiB&backend=cpu");
        assert_eq!(page.budget, "1GiB");
        assert_eq!(
            page.start_query().unwrap(),
            "steps=4&backend=cpu&budget=1GiB"
        );
        page.budget = " 300MiB ".into();
        assert_eq!(
            page.start_query().unwrap(),
            "steps=4&backend=cpu&budget=300MiB"
        );
        page.budget.clear();
        assert_eq!(page.start_query().unwrap(), "steps=4&backend=cpu");
        page.budget = "lots".into();
        let error = page.start_query().unwrap_err();
        assert!(
            error.contains("budget") && error.contains("lots"),
            "{error}"
        );
    }

    #[test]
    fn losses_csv_has_a_row_per_step_shown() {
        let mut page = PageUi::new("");
        assert_eq!(page.losses_csv(), None);
        page.starting();
        for line in run_lines() {
            page.event_line(&line).unwrap();
        }
        assert_eq!(
            page.losses_csv().unwrap(),
            "step,loss,patches_per_s,mem_allocated_bytes,mem_peak_bytes\n\
             1,0.9,120,41943040,104857600\n\
             2,0.7,120,41943040,104857600\n"
        );
    }

    #[test]
    fn a_bad_line_names_itself() {
        let mut page = PageUi::new("");
        let error = page.event_line("{\"event\":\"nonsense\"}").unwrap_err();
        assert!(error.contains("nonsense"), "{error}");
    }

    #[test]
    fn buttons_are_clicked_where_they_are_painted() {
        let ctx = egui::Context::default();
        let mut page = PageUi::new("");
        frame(&mut page, &ctx, vec![]);
        assert_eq!(
            click(&mut page, &ctx, "Start"),
            vec![Action::Start(String::new())]
        );
    }

    /// A click at the middle of the painted `label`; what the user asked for.
    fn click(page: &mut PageUi, ctx: &egui::Context, label: &str) -> Vec<Action> {
        let (painted, _) = frame(page, ctx, vec![]);
        let Some(button) = painted.iter().find(|p| p.text == label) else {
            panic!("no {label} in {}", texts(&painted));
        };
        let at = egui::pos2(button.x + button.w / 2.0, button.y + button.h / 2.0);
        let press = |pressed| egui::Event::PointerButton {
            pos: at,
            button: egui::PointerButton::Primary,
            pressed,
            modifiers: Default::default(),
        };
        frame(page, ctx, vec![egui::Event::PointerMoved(at)]);
        frame(page, ctx, vec![press(true), press(false)]).1
    }

    #[test]
    fn a_chosen_checkpoint_is_said_until_a_new_run_is_asked_for() {
        let ctx = egui::Context::default();
        let mut page = PageUi::new("");
        frame(&mut page, &ctx, vec![]);
        assert_eq!(
            click(&mut page, &ctx, "Resume from a checkpoint..."),
            vec![Action::PickCheckpoint]
        );
        page.set_checkpoint("model.safetensors, optimizer.burnpack, state.json (step 2)");
        // A run keeps it: Start again resumes from it again.
        page.starting();
        page.ended();
        let (painted, _) = frame(&mut page, &ctx, vec![]);
        let shown = texts(&painted);
        assert!(
            shown.contains(
                "Resume from: model.safetensors, optimizer.burnpack, state.json (step 2)."
            ),
            "{shown}"
        );
        assert_eq!(
            click(&mut page, &ctx, "New run instead"),
            vec![Action::ForgetCheckpoint]
        );
        page.set_checkpoint("");
        let (painted, _) = frame(&mut page, &ctx, vec![]);
        let shown = texts(&painted);
        assert!(
            shown.contains("Start: a new run.") && !shown.contains("New run instead"),
            "{shown}"
        );
    }

    #[test]
    fn a_finished_run_says_it_scores_unless_the_address_says_eval_0() {
        let finished = r#"{"event":"finished","step":3,"total_steps":3,"stopped_early":false,"elapsed_s":2.0}"#;
        for (query, status) in [
            (
                "?steps=3",
                "finished at step 3/3 in 2.0 s; scoring the test split",
            ),
            ("?steps=3&eval=0", "finished at step 3/3 in 2.0 s"),
        ] {
            let mut page = PageUi::new(query);
            page.starting();
            page.event_line(finished).unwrap();
            assert_eq!(page.status(), status, "{query}");
            page.ended();
            assert_eq!(page.status(), "finished at step 3/3 in 2.0 s", "{query}");
        }
    }

    #[test]
    fn a_pause_while_the_run_prepares_outlasts_its_config() {
        let mut page = PageUi::new("");
        page.starting();
        page.session.state = RunState::Paused;
        for line in run_lines() {
            page.event_line(&line).unwrap();
        }
        assert_eq!(page.session.state, RunState::Paused);
        assert!(
            page.status().starts_with("paused after step 2/3"),
            "{}",
            page.status()
        );
    }

    #[test]
    fn pause_stop_and_the_end_show_in_the_status() {
        let mut page = PageUi::new("");
        page.starting();
        for line in run_lines() {
            page.event_line(&line).unwrap();
        }
        page.session.state = RunState::Paused;
        assert!(
            page.status().starts_with("paused after step 2/3"),
            "{}",
            page.status()
        );
        page.session.state = RunState::Stopping;
        assert_eq!(page.status(), "stopping (after the step under way)");
        page.event_line(
            r#"{"event":"finished","step":2,"total_steps":3,"stopped_early":true,"elapsed_s":1.5}"#,
        )
        .unwrap();
        page.ended();
        assert_eq!(page.status(), "stopped at step 2/3 in 1.5 s");
        page.fail("out of patience");
        assert_eq!(page.status(), "stopped by an error");
    }
}
