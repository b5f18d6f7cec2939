//! trainer-gui: Headroom's desktop app, a thin eframe layer over headroom-core's API and
//! event stream. Panels draw; [`session`] folds events into what they draw; [`jobs`] runs
//! everything slow on background threads.

pub mod app;
pub mod dataset;
pub mod draw_cost;
pub mod jobs;
pub mod pacer;

// Shared with the web page (headroom-ui); here under their old paths.
pub use headroom_ui::{memory_bar, session};

pub use app::{HeadroomApp, Settings};
