//! The page's own thread: the egui window ([`PageUi`]) in eframe's web runner on the page's
//! canvas. The page's script (www/main.js) hands it the worker's events and the data the user
//! picked, and carries out what the user asks for in it (Start, Pause, a download...).

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use eframe::egui;
use eframe::web_sys::HtmlCanvasElement;
use wasm_bindgen::prelude::*;

use crate::ui::{Action, PageUi, Painted, painted_texts};

/// How soon a run's event is shown. Its own frame for each event cost a third of a core
/// where the browser draws in software (SwiftShader, a machine without a GPU: two frames per
/// event, by egui's rule for an immediate repaint) and took it from a run on the CPU's
/// threads (docs/BENCHMARKS.md, the web page); within half a second, a frame shows every
/// event since the last.
const EVENTS_SHOWN_WITHIN: Duration = Duration::from_millis(500);

/// What the script and the window share: the page, and what the last frame painted.
struct Shared {
    page: PageUi,
    painted: Vec<Painted>,
    /// The window's context, once eframe made it: the script's news asks it for a frame.
    ctx: Option<egui::Context>,
}

/// The page's window, as the script holds it.
#[wasm_bindgen]
pub struct PageWindow {
    shared: Rc<RefCell<Shared>>,
    // Kept: dropping the runner would stop the window.
    _runner: eframe::WebRunner,
}

#[wasm_bindgen]
impl PageWindow {
    /// Opens the window on `canvas`, for the settings of the address `query`. `act(what,
    /// value)` is called with what the user asks for: `("start", settings)` (the address'
    /// query, with the budget typed in the page), `("pause", true|false)`,
    /// `("stop")`, `("pick")` (the folder chooser), `("pick-checkpoint")` (the file chooser
    /// for a checkpoint), `("forget-checkpoint")`, `("download", name)`.
    pub async fn open(
        canvas: HtmlCanvasElement,
        query: String,
        act: js_sys::Function,
    ) -> Result<PageWindow, JsValue> {
        let shared = Rc::new(RefCell::new(Shared {
            page: PageUi::new(&query),
            painted: Vec::new(),
            ctx: None,
        }));
        let app = PageApp {
            shared: shared.clone(),
            act,
        };
        let runner = eframe::WebRunner::new();
        let ctx_slot = shared.clone();
        runner
            .start(
                canvas,
                eframe::WebOptions::default(),
                Box::new(move |cc| {
                    ctx_slot.borrow_mut().ctx = Some(cc.egui_ctx.clone());
                    Ok(Box::new(app))
                }),
            )
            .await?;
        Ok(PageWindow {
            shared,
            _runner: runner,
        })
    }

    /// One of the worker's JSON lines; an error names a line that is not an event.
    pub fn event(&self, line: &str) -> Result<(), JsError> {
        self.change_within(EVENTS_SHOWN_WITHIN, |page| page.event_line(line))
            .map_err(|e| JsError::new(&e))
    }

    /// What the run will train on, in words; empty for the built-in dataset.
    pub fn data(&self, words: &str) {
        self.change(|page| page.set_data(words));
    }

    /// The checkpoint the next Start resumes from, in words; empty for a new run.
    pub fn checkpoint(&self, words: &str) {
        self.change(|page| page.set_checkpoint(words));
    }

    /// A run is starting.
    pub fn starting(&self) {
        self.change(PageUi::starting);
    }

    /// A file of the run is ready to save.
    pub fn offered(&self, name: &str) {
        self.change(|page| page.offered(name));
    }

    pub fn note(&self, words: &str) {
        self.change(|page| page.note(words));
    }

    /// The run stopped on `error`.
    pub fn fail(&self, error: &str) {
        self.change(|page| page.fail(error));
    }

    /// The worker is done.
    pub fn ended(&self) {
        self.change(PageUi::ended);
    }

    /// `losses.csv` of the run shown, a row per step; `undefined` before its first step.
    pub fn losses_csv(&self) -> Option<String> {
        self.shared.borrow().page.losses_csv()
    }

    pub fn running(&self) -> bool {
        self.shared.borrow().page.is_running()
    }

    /// The texts the last frame painted, with where (CSS pixels from the canvas' corner), as
    /// JSON `[{text, x, y, w, h}]`: what the page shows, for its tests.
    pub fn shown(&self) -> String {
        let shared = self.shared.borrow();
        // A point is a CSS pixel times the page's egui zoom (1 unless the user zooms).
        let zoom = shared.ctx.as_ref().map_or(1.0, egui::Context::zoom_factor);
        let painted: Vec<Painted> = shared
            .painted
            .iter()
            .map(|p| Painted {
                text: p.text.clone(),
                x: p.x * zoom,
                y: p.y * zoom,
                w: p.w * zoom,
                h: p.h * zoom,
            })
            .collect();
        serde_json::to_string(&painted).unwrap_or_default()
    }

    fn change<R>(&self, change: impl FnOnce(&mut PageUi) -> R) -> R {
        self.change_within(Duration::ZERO, change)
    }

    /// A change shown in a frame at most `delay` later: the changes within it share the
    /// frame. A delay of zero paints at once (and, egui's rule, once more after).
    fn change_within<R>(&self, delay: Duration, change: impl FnOnce(&mut PageUi) -> R) -> R {
        let mut shared = self.shared.borrow_mut();
        let result = change(&mut shared.page);
        if let Some(ctx) = &shared.ctx {
            ctx.request_repaint_after(delay);
        }
        result
    }
}

struct PageApp {
    shared: Rc<RefCell<Shared>>,
    act: js_sys::Function,
}

impl eframe::App for PageApp {
    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        let actions = {
            let mut shared = self.shared.borrow_mut();
            let actions = egui::CentralPanel::default_margins()
                .show(ui, |ui| {
                    egui::ScrollArea::vertical()
                        .show(ui, |ui| shared.page.show(ui))
                        .inner
                })
                .inner;
            shared.painted = painted_texts(ui.ctx());
            actions
        };
        // Outside the borrow: the script's handler may call back into the window.
        for action in actions {
            let (what, value) = match action {
                Action::Start(query) => ("start", JsValue::from_str(&query)),
                Action::Pause(paused) => ("pause", JsValue::from_bool(paused)),
                Action::Stop => ("stop", JsValue::UNDEFINED),
                Action::PickFolder => ("pick", JsValue::UNDEFINED),
                Action::PickCheckpoint => ("pick-checkpoint", JsValue::UNDEFINED),
                Action::ForgetCheckpoint => ("forget-checkpoint", JsValue::UNDEFINED),
                Action::Download(name) => ("download", JsValue::from_str(&name)),
            };
            if let Err(error) = self
                .act
                .call2(&JsValue::NULL, &JsValue::from_str(what), &value)
            {
                self.shared
                    .borrow_mut()
                    .page
                    .fail(&format!("the page could not {what}: {error:?}"));
            }
        }
    }
}
