//! Progress bar on stderr for long loads, only when stderr is a terminal.

use std::io::IsTerminal;

/// A progress bar that is a no-op unless enabled and stderr is a TTY.
pub struct Progress {
    bar: Option<indicatif::ProgressBar>,
}

impl Progress {
    /// `len` is the total amount of work (rows or bytes); `bytes` picks the display style.
    pub fn new(enabled: bool, len: u64, msg: &str, bytes: bool) -> Self {
        if !enabled || !std::io::stderr().is_terminal() || len == 0 {
            return Progress { bar: None };
        }
        let bar = indicatif::ProgressBar::with_draw_target(
            Some(len),
            indicatif::ProgressDrawTarget::stderr_with_hz(8),
        );
        let tpl = if bytes {
            "{msg} [{bar:30}] {bytes}/{total_bytes} ({eta})"
        } else {
            "{msg} [{bar:30}] {human_pos}/{human_len} rows ({eta})"
        };
        if let Ok(style) = indicatif::ProgressStyle::with_template(tpl) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_message(msg.to_string());
        Progress { bar: Some(bar) }
    }
    pub fn disabled() -> Self {
        Progress { bar: None }
    }
    #[inline]
    pub fn set(&self, pos: u64) {
        if let Some(b) = &self.bar {
            b.set_position(pos);
        }
    }
    #[inline]
    pub fn is_enabled(&self) -> bool {
        self.bar.is_some()
    }
    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}
