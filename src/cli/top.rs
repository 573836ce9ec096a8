//! `lingo top`: a live view of a running lingo proxy from its `/metrics`. On a terminal it
//! redraws in the alternate screen until `q` or Ctrl-C (`e` goes through the models,
//! endpoints and groups views, `g` to and from groups); otherwise, or with `--once`, it prints
//! plain frames. Everything shown comes from `lingo::top::render`; this file only scrapes,
//! waits and draws.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use crossterm::event::{Event, EventStream, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use crossterm::{cursor, execute, queue, terminal};
use futures_util::StreamExt;
use tokio::time::MissedTickBehavior;

use lingo::config::Timeouts;
use lingo::top::{scrape, Snapshot, View};
use lingo::upstream::Client;

#[derive(Debug, Args)]
pub struct TopArgs {
    /// Base URL of the lingo proxy to watch.
    #[arg(long, env = "LINGO_TOP_URL", default_value = "http://127.0.0.1:30000")]
    pub url: String,
    /// Time between scrapes, e.g. 1s or 500ms; rates are over this window.
    #[arg(long, env = "LINGO_TOP_INTERVAL", default_value = "1s", value_parser = parse_interval)]
    pub interval: Duration,
    /// Print one frame (two scrapes one interval apart) as plain text and exit.
    #[arg(long, env = "LINGO_TOP_ONCE")]
    pub once: bool,
    /// What to show: traffic by model and dialect, by endpoint of each pool, or by upstream
    /// group.
    #[arg(long, env = "LINGO_TOP_VIEW", value_enum, default_value_t = View::Models)]
    pub view: View,
    /// Start on the groups view (`--view groups`): each deployment, a mirror's included, side
    /// by side.
    #[arg(long, conflicts_with = "view")]
    pub groups: bool,
}

impl TopArgs {
    fn first_view(&self) -> View {
        match self.groups {
            true => View::Groups,
            false => self.view,
        }
    }
}

fn parse_interval(s: &str) -> Result<Duration, String> {
    match humantime::parse_duration(s).map_err(|e| e.to_string())? {
        d if d.is_zero() => Err("the interval must be longer than zero".into()),
        d => Ok(d),
    }
}

pub async fn run(args: TopArgs) -> anyhow::Result<()> {
    // A stuck proxy should show up as an error line within a few intervals, not hang the view
    // for the default ten minutes.
    let timeouts = Timeouts {
        response_headers: args.interval.max(Duration::from_secs(5)),
        ..Timeouts::default()
    };
    let client = Client::new(&args.url, &timeouts);
    let first = scrape(&client)
        .await
        .with_context(|| format!("is a lingo proxy listening at {}?", args.url))?;
    let base = (first, Instant::now());
    let terminal = std::io::stdout().is_terminal();
    match (args.once, terminal) {
        (true, _) => once(&client, base, &args, terminal).await,
        (false, false) => plain(&client, base, &args).await,
        (false, true) => live(&client, base, &args).await,
    }
}

/// Columns and rows of the terminal; 80 x 24 when it reports none (a pty nobody sized).
fn screen_size() -> (u16, u16) {
    let size = terminal::size().ok();
    size.filter(|&(w, h)| w > 0 && h > 0).unwrap_or((80, 24))
}

async fn once(
    client: &Client,
    (prev, at): (Snapshot, Instant),
    args: &TopArgs,
    terminal: bool,
) -> anyhow::Result<()> {
    tokio::time::sleep(args.interval).await;
    let cur = scrape(client).await?;
    let width = if terminal { screen_size().0 } else { u16::MAX };
    print!(
        "{}",
        args.first_view().render(&prev, &cur, at.elapsed(), width)
    );
    Ok(())
}

/// Frames separated by blank lines, without escape codes, until Ctrl-C. A failed scrape is
/// reported on stderr and the next frame spans the gap.
async fn plain(
    client: &Client,
    (mut prev, mut at): (Snapshot, Instant),
    args: &TopArgs,
) -> anyhow::Result<()> {
    let mut tick = ticker(args.interval);
    let stop = super::shutdown_signal();
    tokio::pin!(stop);
    let mut first = true;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = &mut stop => return Ok(()),
        }
        match scrape(client).await {
            Ok(cur) => {
                let sep = if first { "" } else { "\n" };
                let frame = args
                    .first_view()
                    .render(&prev, &cur, at.elapsed(), u16::MAX);
                print!("{sep}{frame}");
                (prev, at, first) = (cur, Instant::now(), false);
            }
            Err(e) => eprintln!("lingo top: {:#}", anyhow::Error::from(e)),
        }
    }
}

fn ticker(interval: Duration) -> tokio::time::Interval {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    tick
}

/// The alternate screen, redrawn every interval, on resize and on `e` (the other view),
/// until `q`, Esc or Ctrl-C.
async fn live(
    client: &Client,
    (mut prev, mut at): (Snapshot, Instant),
    args: &TopArgs,
) -> anyhow::Result<()> {
    let title = format!(
        "lingo top   {}   every {}   e next view   g groups   q quits",
        args.url,
        humantime::format_duration(args.interval)
    );
    let _screen = Screen::enter().context("setting up the terminal")?;
    let mut events = EventStream::new();
    let mut tick = ticker(args.interval);
    let mut shown: Option<(Snapshot, Snapshot, Duration)> = None;
    let mut error: Option<String> = None;
    let mut view = args.first_view();
    loop {
        let (width, height) = screen_size();
        let body = match &shown {
            Some((p, c, elapsed)) => view.render(p, c, *elapsed, width),
            None => "waiting for the second scrape\n".into(),
        };
        let status = error.as_deref().map(|e| format!("scrape failed: {e}\n"));
        let text = format!("{title}\n{}\n{body}", status.unwrap_or_default());
        draw(&text, width, height)?;
        tokio::select! {
            _ = tick.tick() => {
                let scraped = tokio::select! {
                    scraped = scrape(client) => scraped,
                    // A slow scrape must not keep `q` waiting.
                    quit = quit_requested(&mut events) => return quit,
                };
                match scraped {
                    Ok(cur) => {
                        let elapsed = at.elapsed();
                        (at, error) = (Instant::now(), None);
                        shown = Some((std::mem::replace(&mut prev, cur.clone()), cur, elapsed));
                    }
                    Err(e) => error = Some(format!("{:#}", anyhow::Error::from(e))),
                }
            }
            event = events.next() => match event {
                Some(Ok(Event::Key(key))) if quits(key) => return Ok(()),
                Some(Ok(Event::Key(key))) if switches(key) => view = view.toggled(),
                Some(Ok(Event::Key(key))) if pressed(key, 'g') => view = match view {
                    View::Groups => View::Models,
                    _ => View::Groups,
                },
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e).context("reading the terminal"),
                None => return Ok(()),
            },
        }
    }
}

/// Resolves when the user asks to quit or the terminal's input ends.
async fn quit_requested(events: &mut EventStream) -> anyhow::Result<()> {
    while let Some(event) = events.next().await {
        match event.context("reading the terminal")? {
            Event::Key(key) if quits(key) => return Ok(()),
            _ => {}
        }
    }
    Ok(())
}

fn quits(key: KeyEvent) -> bool {
    let ctrl_c = key.code == KeyCode::Char('c') && key.modifiers.contains(KeyModifiers::CONTROL);
    let q = matches!(key.code, KeyCode::Char('q') | KeyCode::Esc);
    key.kind == KeyEventKind::Press && (q || ctrl_c)
}

fn switches(key: KeyEvent) -> bool {
    pressed(key, 'e')
}

fn pressed(key: KeyEvent, c: char) -> bool {
    key.kind == KeyEventKind::Press && key.code == KeyCode::Char(c)
}

/// Raw mode (keys arrive unbuffered, Ctrl-C as a key) in the alternate screen with the cursor
/// hidden; all undone on drop, and before a panic message is printed.
struct Screen;

impl Screen {
    fn enter() -> std::io::Result<Screen> {
        terminal::enable_raw_mode()?;
        let screen = Screen;
        execute!(
            std::io::stdout(),
            terminal::EnterAlternateScreen,
            cursor::Hide
        )?;
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            hook(info);
        }));
        Ok(screen)
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        restore();
    }
}

fn restore() {
    let _ = execute!(
        std::io::stdout(),
        cursor::Show,
        terminal::LeaveAlternateScreen
    );
    let _ = terminal::disable_raw_mode();
}

/// Replace the screen with `text`, cut to the screen (raw mode needs `\r\n`).
fn draw(text: &str, width: u16, height: u16) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    queue!(
        out,
        cursor::MoveTo(0, 0),
        terminal::Clear(terminal::ClearType::All)
    )?;
    for (i, line) in text.lines().take(usize::from(height)).enumerate() {
        let line: String = line.chars().take(usize::from(width)).collect();
        let sep = if i == 0 { "" } else { "\r\n" };
        write!(out, "{sep}{line}")?;
    }
    out.flush()
}
