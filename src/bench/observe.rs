//! Hooks for watching a run as it goes (the CLI's progress bar); the library draws nothing.

use super::report::LevelReport;

/// Called from the run's tasks; implementations must be cheap and must not block.
pub trait Observer: Send + Sync {
    /// A level starts: its label, and its request count when bounded by count only.
    fn level_started(&self, _label: &str, _requests: Option<u64>) {}
    /// One request of the level ended.
    fn request_done(&self, _ok: bool) {}
    /// The level ended.
    fn level_done(&self, _report: &LevelReport) {}
}

/// Watches nothing.
pub struct Quiet;

impl Observer for Quiet {}
