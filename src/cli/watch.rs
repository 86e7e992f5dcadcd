//! `--watch` for the views (`state`, `live`, `groups`, `slots`, `claims`): redraw every
//! `--interval` until interrupted. A table on a terminal redraws in place; JSON is one document a
//! line. A read that fails (Redis restarting, a network blip) is shown where the view would be, and
//! the watch keeps trying until Redis answers again, as `watch(1)` would.

use std::io::Write;
use std::time::Duration;

use super::{Ctx, Error, args};

#[derive(Clone, Debug, clap::Args)]
pub struct Watch {
    /// Redraw every --interval until interrupted; a failed read is shown and retried.
    #[arg(short, long)]
    pub watch: bool,
    /// How often --watch redraws (100ms to 1h).
    #[arg(long, default_value = "1s", value_parser = args::watch_interval, allow_hyphen_values = true)]
    pub interval: Duration,
}

impl Watch {
    /// Draws `frame` once, or, with `--watch`, every interval until shutdown.
    pub async fn run<F>(
        &self,
        ctx: &Ctx,
        out: &mut (dyn Write + Send),
        json: bool,
        mut frame: F,
    ) -> Result<(), Error>
    where
        F: AsyncFnMut(&mut (dyn Write + Send)) -> Result<(), Error>,
    {
        if !self.watch {
            return frame(out).await;
        }
        loop {
            // Drawn off-screen first, so a redraw never shows half a frame.
            let mut page: Vec<u8> = Vec::new();
            let drawn = frame(&mut page).await;
            if ctx.tty && !json {
                // Redraw in place: home the cursor and clear the screen.
                write!(out, "\x1b[H\x1b[2J")?;
            }
            match drawn {
                Ok(()) => out.write_all(&page)?,
                // Bad input stays bad: no point redrawing it.
                Err(e @ Error::Usage(_)) => return Err(e),
                Err(e) => {
                    let text = format!(
                        "error: {e}\n(retrying every {}; Ctrl-C to stop)",
                        humantime::format_duration(self.interval)
                    );
                    if json {
                        eprintln!("{text}");
                    } else {
                        writeln!(out, "{text}")?;
                    }
                }
            }
            if !json {
                writeln!(out)?;
            }
            out.flush()?;
            tokio::select! {
                _ = ctx.shutdown.cancelled() => return Ok(()),
                _ = tokio::time::sleep(self.interval) => {}
            }
        }
    }
}
