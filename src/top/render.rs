//! One frame as plain text: a pure function of two scrapes, the time between them and the
//! width to fit. No escape codes; the screen loop draws it as it is.

use std::fmt::Write;
use std::time::Duration;

use super::endpoints_view::render_endpoints;
use super::snapshot::Snapshot;
use super::window::{in_flight, label_values, Group, Window};

/// One column of every table. Columns with a `drop` rank are left out, lowest rank first,
/// when the frame would be wider than the screen.
struct Column {
    header: &'static str,
    /// Including the gap before it; cells are right-aligned.
    width: usize,
    drop: Option<u8>,
    cell: fn(&Window, f64) -> String,
}

const COLUMNS: &[Column] = &[
    Column {
        header: "req/s",
        width: 8,
        drop: None,
        cell: |w, secs| rate(w.requests, secs, 2),
    },
    Column {
        header: "in tok/s",
        width: 10,
        drop: None,
        cell: |w, secs| rate(w.prompt_tokens, secs, 1),
    },
    Column {
        header: "out tok/s",
        width: 11,
        drop: None,
        cell: |w, secs| rate(w.generation_tokens, secs, 1),
    },
    Column {
        header: "TTFT p50",
        width: 10,
        drop: Some(5),
        cell: |w, _| latency(w.ttft_quantile(0.5)),
    },
    Column {
        header: "TTFT p99",
        width: 10,
        drop: None,
        cell: |w, _| latency(w.ttft_quantile(0.99)),
    },
    Column {
        header: "ITL p50",
        width: 10,
        drop: Some(4),
        cell: |w, _| latency(w.itl_quantile(0.5)),
    },
    Column {
        header: "ITL p99",
        width: 10,
        drop: None,
        cell: |w, _| latency(w.itl_quantile(0.99)),
    },
    Column {
        header: "err/s",
        width: 8,
        drop: None,
        cell: |w, secs| rate(w.errors, secs, 2),
    },
    Column {
        header: "reqs",
        width: 7,
        drop: Some(3),
        cell: |w, _| count(w.requests),
    },
    Column {
        header: "in tok",
        width: 9,
        drop: Some(2),
        cell: |w, _| count(w.prompt_tokens),
    },
    Column {
        header: "out tok",
        width: 9,
        drop: Some(1),
        cell: |w, _| count(w.generation_tokens),
    },
];

/// Which frame `lingo top` shows: traffic by model and dialect, by endpoint of a fleet, or
/// by upstream group (two deployments side by side, a pool's mirror included).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum View {
    #[default]
    Models,
    Endpoints,
    Groups,
}

impl View {
    pub fn render(self, prev: &Snapshot, cur: &Snapshot, elapsed: Duration, width: u16) -> String {
        match self {
            View::Models => render(prev, cur, elapsed, width),
            View::Endpoints => render_endpoints(prev, cur, elapsed, width),
            View::Groups => render_groups(prev, cur, elapsed, width),
        }
    }

    /// The next view (the terminal's `e` key): models, endpoints, groups, and round again.
    pub fn toggled(self) -> View {
        match self {
            View::Models => View::Endpoints,
            View::Endpoints => View::Groups,
            View::Groups => View::Models,
        }
    }
}

/// The name column is at least this wide, and at most `NAME_MAX` unless the screen is wide.
const NAME_MIN: usize = 8;
const NAME_MAX: usize = 24;

/// The frame: a summary line, then one table each for the total, every model and every
/// dialect. Rates are the increase over `elapsed`; `reqs`, `in tok` and `out tok` are the
/// increases themselves. Every line fits in `width` characters.
pub fn render(prev: &Snapshot, cur: &Snapshot, elapsed: Duration, width: u16) -> String {
    let tables = [
        (
            "total",
            vec![("all".to_string(), Window::between(prev, cur, Group::All))],
        ),
        ("model", rows(prev, cur, "model", |m| Group::Model(m))),
        ("dialect", rows(prev, cur, "dialect", |d| Group::Dialect(d))),
    ];
    frame(cur, elapsed, width, &tables)
}

/// The groups frame: the summary line, then one row per upstream group (an endpoint's
/// `group`, a pool's name by default, a mirror's `group`) with the models frame's columns,
/// so two deployments of a model compare line by line.
pub fn render_groups(prev: &Snapshot, cur: &Snapshot, elapsed: Duration, width: u16) -> String {
    let tables = [("group", rows(prev, cur, "upstream", |u| Group::Upstream(u)))];
    frame(cur, elapsed, width, &tables)
}

/// One row per value of `label` in `cur`, each the window for `group(value)`.
fn rows(
    prev: &Snapshot,
    cur: &Snapshot,
    label: &str,
    group: fn(&str) -> Group<'_>,
) -> Vec<(String, Window)> {
    label_values(cur, label)
        .into_iter()
        .map(|v| {
            let w = Window::between(prev, cur, group(&v));
            (v, w)
        })
        .collect()
}

/// The summary line and `tables`, columns dropped to fit `width`.
fn frame(
    cur: &Snapshot,
    elapsed: Duration,
    width: u16,
    tables: &[(&str, Vec<(String, Window)>)],
) -> String {
    let secs = elapsed.as_secs_f64();
    let (name_w, columns) = fit(tables, usize::from(width));
    let mut out = summary(cur, secs);
    for (title, rows) in tables {
        out.push('\n');
        let header = columns.iter().map(|c| (c.width, c.header.to_string()));
        line(&mut out, name_w, title, header);
        if rows.is_empty() {
            out.push_str("  (none yet)\n");
        }
        for (name, w) in rows {
            let cells = columns.iter().map(|c| (c.width, (c.cell)(w, secs)));
            line(&mut out, name_w, name, cells);
        }
    }
    out.lines()
        .map(|l| l.chars().take(usize::from(width)).collect::<String>() + "\n")
        .collect()
}

/// The first line of either view, and a warning when the scrape is not lingo's.
pub(super) fn summary(cur: &Snapshot, secs: f64) -> String {
    let mut out = format!("window {secs:.2}s   in flight {}\n", in_flight(cur));
    if !cur.iter().any(|(s, _)| s.name.starts_with("lingo_")) {
        out.push_str("no lingo_ metrics in this scrape: is this a lingo proxy?\n");
    }
    out
}

/// The name column's width and the columns that fit in `width`: columns are dropped to make
/// room for names up to `NAME_MAX`; longer names get what room is left.
fn fit(tables: &[(&str, Vec<(String, Window)>)], width: usize) -> (usize, Vec<&'static Column>) {
    let longest = tables
        .iter()
        .flat_map(|(title, rows)| {
            let names = rows.iter().map(|(name, _)| name.chars().count());
            names.chain([title.len()])
        })
        .max()
        .unwrap_or(0);
    let mut columns: Vec<&Column> = COLUMNS.iter().collect();
    let used = |columns: &[&Column]| 1 + columns.iter().map(|c| c.width).sum::<usize>();
    while used(&columns) + longest.clamp(NAME_MIN, NAME_MAX) > width {
        let droppable = (0..columns.len()).filter(|&i| columns[i].drop.is_some());
        let Some(i) = droppable.min_by_key(|&i| columns[i].drop) else {
            break;
        };
        columns.remove(i);
    }
    let room = width.saturating_sub(used(&columns));
    (longest.min(room).max(NAME_MIN), columns)
}

fn line(out: &mut String, name_w: usize, name: &str, cells: impl Iterator<Item = (usize, String)>) {
    out.push_str(&fit_name(name, name_w));
    out.push(' ');
    for (w, cell) in cells {
        let _ = write!(out, "{cell:>w$}");
    }
    out.push('\n');
}

/// `name` padded or cut to `width` characters; a cut name ends in `~`.
pub(super) fn fit_name(name: &str, width: usize) -> String {
    match name.chars().count() <= width {
        true => format!("{name:<width$}"),
        false => name
            .chars()
            .take(width.saturating_sub(1))
            .chain(['~'])
            .collect(),
    }
}

pub(super) fn rate(increase: f64, secs: f64, decimals: usize) -> String {
    match secs > 0.0 {
        true => format!("{:.decimals$}", increase / secs),
        false => "-".into(),
    }
}

fn count(increase: f64) -> String {
    format!("{increase:.0}")
}

/// Seconds as `0.52ms`, `12.3ms` or `1.25s`; `-` when there was nothing to measure.
pub(super) fn latency(seconds: Option<f64>) -> String {
    match seconds {
        None => "-".into(),
        Some(s) if s < 0.01 => format!("{:.2}ms", s * 1e3),
        Some(s) if s < 1.0 => format!("{:.1}ms", s * 1e3),
        Some(s) => format!("{s:.2}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PREV: &str = r#"
lingo_requests_total{dialect="sglang",model="mock-model",outcome="ok",upstream="u"} 10
lingo_prompt_tokens_total{dialect="sglang",model="mock-model",upstream="u"} 30
lingo_generation_tokens_total{dialect="sglang",model="mock-model",upstream="u"} 80
"#;

    const CUR: &str = r#"
lingo_requests_total{dialect="sglang",model="mock-model",outcome="ok",upstream="u"} 14
lingo_requests_total{dialect="openai-completions",model="a-model-with-a-rather-long-name",outcome="timeout",upstream="u"} 1
lingo_prompt_tokens_total{dialect="sglang",model="mock-model",upstream="u"} 42
lingo_generation_tokens_total{dialect="sglang",model="mock-model",upstream="u"} 112
lingo_errors_total{dialect="openai-completions",kind="upstream_timeout",upstream="u"} 1
lingo_inter_token_latency_seconds_bucket{dialect="sglang",model="mock-model",upstream="u",le="0.005"} 8
lingo_inter_token_latency_seconds_bucket{dialect="sglang",model="mock-model",upstream="u",le="0.01"} 32
lingo_inter_token_latency_seconds_bucket{dialect="sglang",model="mock-model",upstream="u",le="+Inf"} 32
lingo_requests_in_flight{upstream="u"} 2
"#;

    fn frame(elapsed: Duration, width: u16) -> String {
        let prev = Snapshot::parse(PREV).unwrap();
        let cur = Snapshot::parse(CUR).unwrap();
        render(&prev, &cur, elapsed, width)
    }

    /// The cells of the row named `name` under the table titled `title`.
    fn row(frame: &str, title: &str, name: &str) -> Vec<String> {
        let table = frame.split("\n\n").find(|t| t.starts_with(title)).unwrap();
        let line = table.lines().find(|l| l.starts_with(name)).unwrap();
        line.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn a_wide_frame_has_every_column() {
        let f = frame(Duration::from_secs(2), 200);
        assert!(f.starts_with("window 2.00s   in flight 2\n"), "{f}");
        let header = row(&f, "total", "total").join(" ");
        assert_eq!(
            header,
            "total req/s in tok/s out tok/s TTFT p50 TTFT p99 ITL p50 ITL p99 err/s reqs in tok out tok"
        );
        // 5 requests, 12 prompt and 32 generated tokens, 1 error, in 2 seconds.
        let all = row(&f, "total", "all");
        assert_eq!(
            all,
            ["all", "2.50", "6.0", "16.0", "-", "-", "6.67ms", "9.93ms", "0.50", "5", "12", "32"]
        );
        let model = row(&f, "model", "mock-model");
        assert_eq!(
            model,
            [
                "mock-model",
                "2.00",
                "6.0",
                "16.0",
                "-",
                "-",
                "6.67ms",
                "9.93ms",
                "0.00",
                "4",
                "12",
                "32"
            ]
        );
        let long = row(&f, "model", "a-model-with-a-rather-long-name");
        assert_eq!(long[1..3], ["0.50", "0.0"]);
        assert_eq!(long[8..], ["0.50", "1", "0", "0"]);
        let dialect = row(&f, "dialect", "openai-completions");
        assert_eq!(dialect[8..], ["0.50", "1", "0", "0"]);
        assert_eq!(row(&f, "dialect", "sglang")[9..], ["4", "12", "32"]);
    }

    #[test]
    fn narrow_frames_drop_counts_first_and_fit() {
        for width in [100, 80, 60, 20] {
            let f = frame(Duration::from_secs(1), width);
            for l in f.lines() {
                assert!(l.chars().count() <= usize::from(width), "{width}: {l:?}");
            }
        }
        // At 100 the counts go, and ITL p50 to make room for a name of up to 24 characters.
        let f = frame(Duration::from_secs(1), 100);
        let header = row(&f, "model", "model").join(" ");
        assert_eq!(
            header,
            "model req/s in tok/s out tok/s TTFT p50 TTFT p99 ITL p99 err/s"
        );
        assert!(f.contains("a-model-with-a-rather-long-name "), "{f}");
        // At 80 nothing more can go; the name is cut.
        let f = frame(Duration::from_secs(1), 80);
        let header = row(&f, "model", "model").join(" ");
        assert_eq!(
            header,
            "model req/s in tok/s out tok/s TTFT p99 ITL p99 err/s"
        );
        assert!(f.contains("\na-model-with-a-rather~ "), "{f}");
    }

    #[test]
    fn nothing_to_show() {
        let empty = Snapshot::default();
        let f = render(&empty, &empty, Duration::ZERO, 120);
        assert!(f.contains("no lingo_ metrics"), "{f}");
        assert_eq!(row(&f, "total", "all")[1..4], ["-", "-", "-"]);
        assert!(f.contains("model") && f.contains("(none yet)"), "{f}");
    }

    #[test]
    fn the_groups_frame_has_a_row_per_upstream_group() {
        let prev = Snapshot::parse(PREV).unwrap();
        let cur = format!(
            "{CUR}{}",
            r#"lingo_requests_total{dialect="sglang",model="mock-model",outcome="ok",upstream="shadow"} 3
lingo_generation_tokens_total{dialect="sglang",model="mock-model",upstream="shadow"} 12
lingo_errors_total{dialect="sglang",kind="upstream_status",upstream="shadow"} 1
"#
        );
        let cur = Snapshot::parse(&cur).unwrap();
        let f = View::Groups.render(&prev, &cur, Duration::from_secs(2), 200);
        assert!(f.starts_with("window 2.00s"), "{f}");
        assert!(
            !f.contains(
                "
model "
            ) && !f.contains(
                "
dialect "
            ),
            "{f}"
        );
        let header = row(&f, "group", "group").join(" ");
        assert!(
            header.starts_with("group req/s in tok/s out tok/s TTFT p50"),
            "{header}"
        );
        // `u`: 5 requests, 32 generated tokens, 1 error in 2 s; `shadow`: 3, 12 and 1.
        let u = row(&f, "group", "u");
        assert_eq!(
            (u[1].as_str(), u[3].as_str(), u[8].as_str()),
            ("2.50", "16.0", "0.50")
        );
        let shadow = row(&f, "group", "shadow");
        assert_eq!(
            (shadow[1].as_str(), shadow[3].as_str(), shadow[8].as_str()),
            ("1.50", "6.0", "0.50")
        );
        assert_eq!(View::Endpoints.toggled(), View::Groups);
        assert_eq!(View::Groups.toggled(), View::Models);
    }

    #[test]
    fn latency_units() {
        assert_eq!(latency(Some(0.000_52)), "0.52ms");
        assert_eq!(latency(Some(0.0123)), "12.3ms");
        assert_eq!(latency(Some(1.254)), "1.25s");
        assert_eq!(latency(None), "-");
    }
}
