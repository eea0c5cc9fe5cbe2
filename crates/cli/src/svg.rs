//! A small SVG writer and a line chart on top of it, for `uswap bench compare --plot DIR`
//! and `uswap run --plot FILE`.
//!
//! A few charts only (latency CDFs, memory over time, a run's budget), so a plotting crate
//! would be mostly unused weight. The chart has a linear or log10 x axis, a linear y axis, "nice"
//! ticks (1, 2, 5 x 10^k), one polyline per series and a legend.
//!
//! ```text
//!   +----------------------------------------------+
//!   | title                                        |
//!   |  y ^                            -- series a  |
//!   |    |      ____/----             -- series b  |
//!   |    |  ___/                                   |
//!   |    +-------------------------> x             |
//!   +----------------------------------------------+
//! ```

use std::fmt::Write as _;

const WIDTH: f64 = 800.0;
const HEIGHT: f64 = 480.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 200.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;
const COLORS: [&str; 6] = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"];

const XMLNS: &str = "xmlns=\"http://www.w3.org/2000/svg\"";

/// Charts one above the other in one SVG document, sharing nothing but the page (each has
/// its own axes): a run's memory in MiB above its fault stall in percent.
pub fn stack(charts: &[LineChart]) -> String {
    let height = HEIGHT * charts.len().max(1) as f64;
    let mut svg = format!("<svg {XMLNS} width=\"{WIDTH}\" height=\"{height}\">\n");
    for (i, chart) in charts.iter().enumerate() {
        svg.push_str(&chart.render_at(Some(HEIGHT * i as f64)));
    }
    svg.push_str("</svg>\n");
    svg
}

/// Escapes text for an SVG text node or attribute.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

/// One named line of a chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// A line chart.
#[derive(Debug, Clone, PartialEq)]
pub struct LineChart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub x_log: bool,
    /// The top of the y axis; values above it are drawn at the top. `None`: the highest.
    pub y_max: Option<f64>,
    pub series: Vec<Series>,
}

/// Tick positions covering [lo, hi] at a 1-2-5 step (about `target` ticks).
pub fn nice_ticks(lo: f64, hi: f64, target: usize) -> Vec<f64> {
    if !(lo.is_finite() && hi.is_finite()) || hi <= lo {
        return vec![lo];
    }
    let raw = (hi - lo) / target.max(1) as f64;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * magnitude);
    let first = (lo / step).ceil();
    (0..100)
        .map(|i| (first + f64::from(i)) * step)
        .take_while(|tick| *tick <= hi + step * 1e-9)
        .collect()
}

fn format_tick(value: f64) -> String {
    if value.abs() >= 1e6 {
        format!("{:.0e}", value)
    } else if value.fract().abs() < 1e-9 {
        format!("{value:.0}")
    } else {
        format!("{value:.2}")
    }
}

impl LineChart {
    /// The chart as a standalone SVG document.
    pub fn render(&self) -> String {
        self.render_at(None)
    }

    /// The chart as an SVG element: a document of its own (`y` is `None`), or a nested
    /// `<svg>` placed `y` pixels down its parent ([`stack`]).
    fn render_at(&self, y: Option<f64>) -> String {
        let points = self.series.iter().flat_map(|s| s.points.iter());
        let usable =
            |&&(x, y): &&(f64, f64)| x.is_finite() && y.is_finite() && (!self.x_log || x > 0.0);
        let (mut x_lo, mut x_hi, mut y_hi) = (f64::MAX, f64::MIN, 0.0f64);
        for &(x, y) in points.filter(usable) {
            let x = if self.x_log { x.log10() } else { x };
            x_lo = x_lo.min(x);
            x_hi = x_hi.max(x);
            y_hi = y_hi.max(y);
        }
        if x_lo > x_hi {
            (x_lo, x_hi) = (0.0, 1.0);
        }
        if self.x_log {
            (x_lo, x_hi) = (x_lo.floor(), x_hi.ceil().max(x_lo.floor() + 1.0));
        } else if x_hi <= x_lo {
            x_hi = x_lo + 1.0;
        }
        let y_hi = self.y_max.unwrap_or(y_hi);
        let y_hi = if y_hi > 0.0 { y_hi * 1.05 } else { 1.0 };
        let plot_w = WIDTH - LEFT - RIGHT;
        let plot_h = HEIGHT - TOP - BOTTOM;
        let sx = |x: f64| LEFT + (x - x_lo) / (x_hi - x_lo) * plot_w;
        let sy = |y: f64| TOP + plot_h - y.min(y_hi) / y_hi * plot_h;
        let mut svg = String::new();
        let place = y.map_or_else(|| XMLNS.to_string(), |y| format!("x=\"0\" y=\"{y}\""));
        let _ = writeln!(
            svg,
            "<svg {place} width=\"{WIDTH}\" height=\"{HEIGHT}\" font-family=\"sans-serif\" \
             font-size=\"12\">"
        );
        let _ = writeln!(svg, "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>");
        let _ = writeln!(
            svg,
            "<text x=\"{}\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">{}</text>",
            LEFT + plot_w / 2.0,
            escape(&self.title)
        );
        self.axes(&mut svg, (x_lo, x_hi, y_hi), &sx, &sy);
        for (i, series) in self.series.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let mut path = String::new();
            for &(x, y) in series.points.iter().filter(|p| usable(p)) {
                let x = if self.x_log { x.log10() } else { x };
                let _ = write!(path, "{:.1},{:.1} ", sx(x), sy(y));
            }
            let _ = writeln!(
                svg,
                "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\" points=\"{}\"/>",
                path.trim_end()
            );
            let ly = TOP + 10.0 + 18.0 * i as f64;
            let lx = WIDTH - RIGHT + 15.0;
            let _ = writeln!(
                svg,
                "<line x1=\"{lx}\" y1=\"{ly}\" x2=\"{}\" y2=\"{ly}\" stroke=\"{color}\" \
                 stroke-width=\"2\"/><text x=\"{}\" y=\"{}\">{}</text>",
                lx + 20.0,
                lx + 26.0,
                ly + 4.0,
                escape(&series.name)
            );
        }
        svg.push_str("</svg>\n");
        svg
    }

    fn axes(
        &self,
        svg: &mut String,
        (x_lo, x_hi, y_hi): (f64, f64, f64),
        sx: &dyn Fn(f64) -> f64,
        sy: &dyn Fn(f64) -> f64,
    ) {
        let (bottom, top) = (sy(0.0), sy(y_hi));
        let _ = writeln!(
            svg,
            "<path fill=\"none\" stroke=\"black\" d=\"M{l},{top} L{l},{bottom} L{r},{bottom}\"/>",
            l = sx(x_lo),
            r = sx(x_hi)
        );
        for y in nice_ticks(0.0, y_hi, 5) {
            let _ = writeln!(
                svg,
                "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
                LEFT - 6.0,
                sy(y) + 4.0,
                format_tick(y)
            );
        }
        let x_ticks: Vec<(f64, String)> = if self.x_log {
            (x_lo as i32..=x_hi as i32)
                .map(|e| (f64::from(e), format_tick(10f64.powi(e))))
                .collect()
        } else {
            nice_ticks(x_lo, x_hi, 6).into_iter().map(|x| (x, format_tick(x))).collect()
        };
        for (x, label) in x_ticks {
            let _ = writeln!(
                svg,
                "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
                sx(x),
                bottom + 18.0,
                escape(&label)
            );
        }
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            (sx(x_lo) + sx(x_hi)) / 2.0,
            HEIGHT - 15.0,
            escape(&self.x_label)
        );
        let _ = writeln!(
            svg,
            "<text transform=\"translate(18,{:.1}) rotate(-90)\" text-anchor=\"middle\">{}</text>",
            (top + bottom) / 2.0,
            escape(&self.y_label)
        );
    }
}

/// Checks that `svg` is one well-formed element: every tag closed in order, one root,
/// no bare `<` or `&` in text, attributes quoted. For tests of what writes SVG.
///
/// # Errors
/// Where and why it is not.
#[cfg(test)]
pub fn check_well_formed(svg: &str) -> Result<(), String> {
    let mut open: Vec<&str> = Vec::new();
    let (mut roots, mut rest) = (0, svg.trim());
    while let Some(start) = rest.find('<') {
        let text = &rest[..start];
        if text.contains('&') && !text.contains(';') || !text.trim().is_empty() && open.is_empty() {
            return Err(format!("text {text:?} outside an element or with a bare &"));
        }
        let end = rest[start..].find('>').ok_or("a tag never ends")? + start;
        let tag = &rest[start + 1..end];
        if tag.matches('"').count() % 2 == 1 || tag.contains('<') {
            return Err(format!("tag <{tag}> has an unquoted or broken attribute"));
        }
        let name = tag.split_whitespace().next().unwrap_or("");
        if let Some(closing) = tag.strip_prefix('/') {
            match open.pop() {
                Some(opened) if opened == closing.trim() => {}
                other => return Err(format!("</{closing}> closes {other:?}")),
            }
        } else if !tag.ends_with('/') {
            roots += usize::from(open.is_empty());
            open.push(name);
        } else {
            roots += usize::from(open.is_empty());
        }
        rest = &rest[end + 1..];
    }
    match (open.as_slice(), roots, rest.trim()) {
        ([], 1, "") => Ok(()),
        (still, roots, tail) => Err(format!("open {still:?}, {roots} roots, tail {tail:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart(x_log: bool) -> LineChart {
        LineChart {
            title: "latency <CDF> & more".into(),
            x_label: "ns".into(),
            y_label: "fraction".into(),
            x_log,
            y_max: None,
            series: vec![
                Series { name: "zram lz4".into(), points: vec![(100.0, 0.5), (10_000.0, 1.0)] },
                Series { name: "zswap".into(), points: vec![(200.0, 0.2), (0.0, 0.3)] },
            ],
        }
    }

    #[test]
    fn svg_is_well_formed_and_escaped() {
        let svg = chart(true).render();
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("latency &lt;CDF&gt; &amp; more"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains(">zram lz4</text>"));
        // Log axis: decades 10^2 .. 10^4 labelled; the x = 0 point is dropped, not NaN.
        assert!(svg.contains(">100</text>") && svg.contains(">10000</text>"));
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
        let opens = svg.matches('<').count();
        let closes = svg.matches("</").count() + svg.matches("/>").count();
        assert!(closes * 2 >= opens, "unbalanced tags");
    }

    #[test]
    fn polyline_points_are_scaled_into_the_plot() {
        let svg = chart(false).render();
        let line = svg.lines().find(|l| l.starts_with("<polyline")).unwrap();
        let points = line.split("points=\"").nth(1).unwrap().trim_end_matches("\"/>");
        for pair in points.split_whitespace() {
            let (x, y) = pair.split_once(',').unwrap();
            let (x, y): (f64, f64) = (x.parse().unwrap(), y.parse().unwrap());
            assert!((LEFT..=WIDTH - RIGHT).contains(&x), "x {x}");
            assert!((TOP..=HEIGHT - BOTTOM).contains(&y), "y {y}");
        }
    }

    #[test]
    fn the_checker_finds_what_is_not_well_formed() {
        assert_eq!(check_well_formed("<a x=\"1\"><b/><c>t &amp; u</c></a>"), Ok(()));
        for bad in ["<a><b></a></b>", "<a>", "<a/><b/>", "<a x=\"1></a>", "<a>&</a>", "<a></a>x"] {
            assert!(check_well_formed(bad).is_err(), "{bad}");
        }
        assert_eq!(check_well_formed(&chart(true).render()), Ok(()));
    }

    #[test]
    fn stacked_charts_are_one_document_of_nested_charts() {
        let svg = stack(&[chart(false), chart(true)]);
        assert!(svg.starts_with(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"800\" height=\"960\">"
        ));
        assert_eq!(svg.matches("<svg ").count(), 3);
        assert_eq!(svg.matches("</svg>").count(), 3);
        assert!(svg.contains("<svg x=\"0\" y=\"480\" width="));
        assert_eq!(svg.matches("xmlns").count(), 1, "the nested charts inherit the namespace");
        assert_eq!(check_well_formed(&svg), Ok(()));
    }

    #[test]
    fn empty_chart_still_renders() {
        let empty = LineChart { series: Vec::new(), ..chart(true) };
        assert!(empty.render().contains("</svg>"));
    }

    #[test]
    fn ticks_are_nice() {
        assert_eq!(nice_ticks(0.0, 10.0, 5), [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        let ticks = nice_ticks(0.0, 1.0, 5);
        let expected = [0.0, 0.2, 0.4, 0.6, 0.8, 1.0];
        assert_eq!(ticks.len(), expected.len(), "{ticks:?}");
        assert!(ticks.iter().zip(expected).all(|(a, b)| (a - b).abs() < 1e-9), "{ticks:?}");
        assert_eq!(nice_ticks(0.0, 1.0, 4), [0.0, 0.5, 1.0]); // step at least the raw 0.25
        assert_eq!(nice_ticks(5.0, 5.0, 4), [5.0]);
    }
}
