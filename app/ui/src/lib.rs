//! What Headroom's front-ends show, shared by the desktop app (trainer-gui) and the web page
//! (headroom-web): [`session`] folds core's events into a run as the app sees it, with no egui
//! in it; [`memory_bar`] draws device memory against the budget, [`loss_plot`] the loss
//! curves, [`results_table`] the anomaly scores, [`picture_view`] what a run draws (a GAN's
//! generated spectrograms), [`event_log`] the run's events in words; [`thin`] thins long curves
//! for drawing.

pub mod event_log;
pub mod loss_plot;
pub mod memory_bar;
pub mod picture_view;
pub mod results_table;
pub mod session;
pub mod thin;
