//! The Prometheus text exposition format (version 0.0.4), as far as `lingo top` reads it:
//! sample lines `name{label="value",...} value [timestamp]`; `#` lines (HELP, TYPE, comments)
//! and blank lines are skipped. The timestamp, when present, is read past and dropped.

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    /// In the order written; values unescaped.
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct ParseError {
    /// 1-based.
    pub line: usize,
    pub message: String,
}

/// Every sample in `text`, in order.
pub fn parse(text: &str) -> Result<Vec<Sample>, ParseError> {
    let mut samples = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let sample = Cursor { rest: line }
            .sample()
            .map_err(|message| ParseError {
                line: i + 1,
                message,
            })?;
        samples.push(sample);
    }
    Ok(samples)
}

/// Reads one line front to back.
struct Cursor<'a> {
    rest: &'a str,
}

impl Cursor<'_> {
    fn sample(&mut self) -> Result<Sample, String> {
        let name = self.name()?;
        let labels = match self.rest.starts_with('{') {
            true => self.labels()?,
            false => Vec::new(),
        };
        if !self.rest.starts_with(|c: char| c.is_ascii_whitespace()) {
            return Err("expected a space, then the value".into());
        }
        let mut fields = self.rest.split_ascii_whitespace();
        let value = fields.next().ok_or("missing value")?;
        let value = parse_value(value).ok_or_else(|| format!("bad value `{value}`"))?;
        if let Some(ts) = fields.next() {
            ts.parse::<i64>()
                .map_err(|_| format!("bad timestamp `{ts}`"))?;
        }
        if let Some(extra) = fields.next() {
            return Err(format!("unexpected `{extra}` after the value"));
        }
        Ok(Sample {
            name,
            labels,
            value,
        })
    }

    /// `[a-zA-Z_:][a-zA-Z0-9_:]*`
    fn name(&mut self) -> Result<String, String> {
        let end = self
            .rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(self.rest.len());
        let name = &self.rest[..end];
        if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
            return Err("expected a metric name".into());
        }
        self.rest = &self.rest[end..];
        Ok(name.to_string())
    }

    /// `{a="x",b="y"}`, a trailing comma allowed; leaves `rest` after the `}`.
    fn labels(&mut self) -> Result<Vec<(String, String)>, String> {
        self.rest = &self.rest[1..];
        let mut labels = Vec::new();
        loop {
            self.rest = self.rest.trim_start();
            if let Some(after) = self.rest.strip_prefix('}') {
                self.rest = after;
                return Ok(labels);
            }
            let name = self
                .name()
                .map_err(|_| "expected a label name".to_string())?;
            self.rest = self.rest.trim_start();
            self.rest = self
                .rest
                .strip_prefix('=')
                .ok_or_else(|| format!("expected `=` after label `{name}`"))?;
            let value = self.quoted()?;
            labels.push((name, value));
            self.rest = self.rest.trim_start();
            match self.rest.strip_prefix(',') {
                Some(after) => self.rest = after,
                None if self.rest.starts_with('}') => {}
                None => return Err("expected `,` or `}` in labels".into()),
            }
        }
    }

    /// A double-quoted label value with `\\`, `\"` and `\n` escapes.
    fn quoted(&mut self) -> Result<String, String> {
        let body = self
            .rest
            .trim_start()
            .strip_prefix('"')
            .ok_or("expected `\"` to open a label value")?;
        let mut out = String::new();
        let mut chars = body.char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '"' => {
                    self.rest = &body[i + 1..];
                    return Ok(out);
                }
                '\\' => match chars.next() {
                    Some((_, 'n')) => out.push('\n'),
                    Some((_, '\\')) => out.push('\\'),
                    Some((_, '"')) => out.push('"'),
                    Some((_, other)) => return Err(format!("unknown escape `\\{other}`")),
                    None => break,
                },
                c => out.push(c),
            }
        }
        Err("unterminated label value".into())
    }
}

/// A Go-style float as Prometheus writes it, including `+Inf`, `-Inf` and `NaN` (also the
/// form of a histogram's `le` label).
pub fn parse_value(s: &str) -> Option<f64> {
    match s {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        // Rust would also take `inf`, `infinity` and `nan` in any case; Prometheus writes none.
        _ if s
            .bytes()
            .any(|b| b.is_ascii_alphabetic() && !matches!(b, b'e' | b'E')) =>
        {
            None
        }
        _ => s.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(line: &str) -> Sample {
        let mut all = parse(line).unwrap();
        assert_eq!(all.len(), 1, "{line}");
        all.remove(0)
    }

    fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn names_labels_and_values() {
        let text = "\
# HELP lingo_requests_total Generation requests by outcome and finish reason.
# TYPE lingo_requests_total counter
lingo_requests_total{dialect=\"sglang\",model=\"mock-model\",outcome=\"ok\"} 3

lingo_requests_in_flight{upstream=\"default\"} -1
process_start_time_seconds 1.7e9
";
        let s = parse(text).unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!(s[0].name, "lingo_requests_total");
        assert_eq!(
            s[0].labels,
            labels(&[
                ("dialect", "sglang"),
                ("model", "mock-model"),
                ("outcome", "ok")
            ])
        );
        assert_eq!(s[0].value, 3.0);
        assert_eq!(s[1].value, -1.0);
        assert_eq!(s[2].name, "process_start_time_seconds");
        assert!(s[2].labels.is_empty());
        assert_eq!(s[2].value, 1.7e9);
    }

    #[test]
    fn special_values() {
        assert_eq!(one("a{le=\"+Inf\"} +Inf").value, f64::INFINITY);
        assert_eq!(one("a -Inf").value, f64::NEG_INFINITY);
        assert!(one("a NaN").value.is_nan());
        assert_eq!(one("a{le=\"+Inf\"} 7").labels, labels(&[("le", "+Inf")]));
        assert_eq!(one("a 0.0025").value, 0.0025);
        assert_eq!(one("a 1E-3").value, 0.001);
        for bad in [
            "a inf",
            "a nan",
            "a infinity",
            "a 1x",
            "a",
            "a 1 2 3",
            "a 1 x",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn escaped_label_values() {
        let s = one(r#"m{path="C:\\dir",q="say \"hi\"",nl="a\nb",comma="x,}y"} 1"#);
        assert_eq!(
            s.labels,
            labels(&[
                ("path", r"C:\dir"),
                ("q", r#"say "hi""#),
                ("nl", "a\nb"),
                ("comma", "x,}y"),
            ])
        );
    }

    #[test]
    fn spacing_trailing_comma_empty_braces_and_timestamps() {
        let s = one(r#"  m{ a = "1" , b="2", }   5   1712345678000  "#);
        assert_eq!(s.labels, labels(&[("a", "1"), ("b", "2")]));
        assert_eq!(s.value, 5.0);
        assert!(one("m{} 2").labels.is_empty());
        assert_eq!(one("ns:m_total 2").name, "ns:m_total");
    }

    #[test]
    fn errors_name_the_line() {
        let err = parse("ok 1\n# c\nbad{a=\"1\" 2\n").unwrap_err();
        assert_eq!(err.line, 3);
        assert!(err.message.contains("`,` or `}`"), "{err}");
        for bad in [
            "1m 2",
            "m{a=1} 2",
            "m{a=\"1} 2",
            "m{a=\"\\t\"} 2",
            "m{=\"1\"} 2",
            "m{a\"1\"} 2",
            "{a=\"1\"} 2",
            "m-1 2",
            "m{a=\"1\"}2",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    /// Parsing reads bytes from the network: no input may panic it. Mutations of a real
    /// exposition, cut at every position and with bytes swapped for the format's own
    /// punctuation, stand in for a fuzzer.
    #[test]
    fn mangled_input_never_panics() {
        use rand::{Rng, SeedableRng};
        let text = "# TYPE x counter\nx_bucket{a=\"q\\\"\\\\\",le=\"+Inf\"} 1 17\ny NaN\n";
        for end in 0..=text.len() {
            if text.is_char_boundary(end) {
                let _ = parse(&text[..end]);
            }
        }
        let alphabet = b"{}=\",\\ \n#+-.e0aI";
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for _ in 0..20_000 {
            let mut bytes = text.as_bytes().to_vec();
            for _ in 0..rng.random_range(1..4) {
                let i = rng.random_range(0..bytes.len());
                bytes[i] = alphabet[rng.random_range(0..alphabet.len())];
            }
            let _ = parse(&String::from_utf8_lossy(&bytes));
        }
    }
}
