//! `uswap run --plot FILE`: the run's budget, its resident memory and the time its
//! processes lost to faults, over time, as one SVG of two charts (`crate::svg`).
//!
//! ```text
//!   MiB  ^  budget ----\____/‾‾‾‾\_____        (the tree's budget; --budget auto moves it)
//!        |  resident  ~~~~~~~~~~~~~~~~~        (the tree's resident memory, as the broker
//!        +------------------------> s           charges it)
//!   %    ^  fault stall  _/\__/\___            (fault stall of refaulted pages per member
//!        |  thrashing    __/\______            over the last second, as a share of it:
//!        |  target     - - - - - - -            --budget auto's loss; of it, the stall on
//!        +------------------------> s           thrashing faults, what raises the budget)
//! ```
//!
//! The broker adds a point every tick. The stall is drawn as the controller sees it, over
//! the last [`WINDOW_NS`]: the members report once a second each, so one tick's stall can
//! be a second's worth (many times the tick). The series is bounded: past [`POINTS_MAX`]
//! points, neighbours are merged in pairs (the later one's budget and resident set, the
//! loss averaged over the time of both), so a run of any length keeps between half and all
//! of [`POINTS_MAX`] points at a resolution that halves as it doubles. The memory chart's
//! axis stops at twice the highest resident set, so that the budget's start at its ceiling
//! (the first second is measured there) does not flatten the rest.

use crate::svg::{LineChart, Series};

/// The most points kept: 2,048 ticks of 50 ms are 102 s at full resolution; a day's run
/// keeps a point every 42 s or better.
pub const POINTS_MAX: usize = 2048;
/// The stall is summed over this long, as `--budget auto`'s controller sums it.
pub const WINDOW_NS: u64 = runstat::auto::WINDOW_NS;

/// One stretch of the run.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Point {
    /// Its end, nanoseconds since the broker started.
    pub end_ns: u64,
    /// Its length.
    pub span_ns: u64,
    /// Fault stall of refaulted pages reported in it, summed over the members.
    pub stall_ns: u64,
    /// Of that, on thrashing faults (runstat's `auto` module essay).
    pub thrash_ns: u64,
    /// The most members that reported in it.
    pub members: u32,
    /// The share of the time each member lost to faults over the window that ends with
    /// it (a mean over the point, once merged); set by [`Recording::push`].
    pub loss: f64,
    /// The same, of the thrashing stall.
    pub thrash_loss: f64,
    /// The budget at its end.
    pub budget_bytes: u64,
    /// The tree's resident memory at its end.
    pub resident_bytes: u64,
}

impl Point {
    /// `self` followed by `later`, as one point.
    fn merge(self, later: Point) -> Point {
        let span_ns = self.span_ns + later.span_ns;
        let mean = |a: f64, b: f64| {
            let weighted = a * self.span_ns as f64 + b * later.span_ns as f64;
            if span_ns == 0 {
                b
            } else {
                weighted / span_ns as f64
            }
        };
        Point {
            end_ns: later.end_ns,
            span_ns,
            stall_ns: self.stall_ns + later.stall_ns,
            thrash_ns: self.thrash_ns + later.thrash_ns,
            members: self.members.max(later.members),
            loss: mean(self.loss, later.loss),
            thrash_loss: mean(self.thrash_loss, later.thrash_loss),
            ..later
        }
    }
}

/// The points of a run (module essay).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Recording {
    points: Vec<Point>,
    /// The stall of the last [`WINDOW_NS`]: (end, stall, thrashing stall) of each tick in
    /// it.
    window: std::collections::VecDeque<(u64, u64, u64)>,
    /// `--budget auto`'s target, percent, drawn as a line.
    pub target_percent: Option<f64>,
}

impl Recording {
    /// An empty recording; `target_percent` under `--budget auto`.
    pub fn new(target_percent: Option<f64>) -> Recording {
        let window = std::collections::VecDeque::new();
        Recording { points: Vec::with_capacity(POINTS_MAX), window, target_percent }
    }

    /// Adds the stretch ending at `point.end_ns` (its span from the last point's end).
    pub fn push(&mut self, mut point: Point) {
        let last_end = self.points.last().map_or(0, |p| p.end_ns);
        point.span_ns = point.end_ns.saturating_sub(last_end);
        self.window.push_back((point.end_ns, point.stall_ns, point.thrash_ns));
        while self.window.front().is_some_and(|&(end, ..)| end + WINDOW_NS <= point.end_ns) {
            self.window.pop_front();
        }
        let stall: u64 = self.window.iter().map(|&(_, stall, _)| stall).sum();
        let thrash: u64 = self.window.iter().map(|&(.., thrash)| thrash).sum();
        let per_member =
            WINDOW_NS.min(point.end_ns).max(1) as f64 * f64::from(point.members.max(1));
        point.loss = stall as f64 / per_member;
        point.thrash_loss = thrash as f64 / per_member;
        if self.points.len() == POINTS_MAX {
            let pairs = self.points.chunks(2);
            let merged = pairs.filter_map(|pair| pair.iter().copied().reduce(Point::merge));
            self.points = merged.collect();
        }
        self.points.push(point);
        debug_assert!(self.points.len() <= POINTS_MAX);
    }

    /// The points, oldest first.
    pub fn points(&self) -> &[Point] {
        &self.points
    }

    /// The two charts (module essay).
    pub fn charts(&self, title: &str) -> [LineChart; 2] {
        let seconds = |p: &Point| p.end_ns as f64 / 1e9;
        let mib = |bytes: u64| bytes as f64 / f64::from(1 << 20);
        let line = |name: &str, y: &dyn Fn(&Point) -> f64| Series {
            name: name.to_string(),
            points: self.points.iter().map(|p| (seconds(p), y(p))).collect(),
        };
        let resident_peak = self.points.iter().map(|p| p.resident_bytes).max().unwrap_or(0);
        let memory = LineChart {
            title: format!("{title}: budget and resident memory"),
            x_label: "time (s)".into(),
            y_label: "MiB".into(),
            x_log: false,
            y_max: (resident_peak > 0).then(|| 2.0 * mib(resident_peak)),
            series: vec![
                line("budget", &|p| mib(p.budget_bytes)),
                line("resident", &|p| mib(p.resident_bytes)),
            ],
        };
        let mut stall = LineChart {
            title: format!("{title}: time lost to faults on paged-out memory"),
            x_label: "time (s)".into(),
            y_label: "% of the time, per process".into(),
            x_log: false,
            y_max: None,
            series: vec![line("fault stall", &|p| 100.0 * p.loss)],
        };
        if let Some(target) = self.target_percent {
            stall.series.push(line("thrashing", &|p| 100.0 * p.thrash_loss));
            stall.series.push(line("target", &|_| target));
        }
        [memory, stall]
    }

    /// The SVG document.
    pub fn render(&self, title: &str) -> String {
        crate::svg::stack(&self.charts(title))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn point(end_ms: u64, stall_ms: u64, budget_mib: u64) -> Point {
        Point {
            end_ns: end_ms * MS,
            stall_ns: stall_ms * MS,
            thrash_ns: stall_ms / 2 * MS,
            members: 1,
            budget_bytes: budget_mib << 20,
            resident_bytes: (budget_mib - 1) << 20,
            ..Point::default()
        }
    }

    #[test]
    fn the_loss_is_the_last_seconds_stall_per_member() {
        let mut r = Recording::new(Some(1.0));
        r.push(point(50, 0, 100));
        // A member's report of a second's stall lands in one 50 ms tick: the loss is over
        // the second, not the tick.
        r.push(Point { members: 2, ..point(1000, 100, 90) });
        assert_eq!(r.points()[1].span_ns, 950 * MS);
        assert!((r.points()[1].loss - 0.05).abs() < 1e-12, "{}", r.points()[1].loss);
        assert!((r.points()[1].thrash_loss - 0.025).abs() < 1e-12, "half of it thrashing");
        r.push(Point { members: 2, ..point(1050, 0, 90) });
        assert!((r.points()[2].loss - 0.05).abs() < 1e-12, "still in the window");
        r.push(Point { members: 2, ..point(2050, 0, 90) });
        assert_eq!(r.points()[3].loss, 0.0, "out of the window");
    }

    #[test]
    fn a_long_run_is_merged_in_pairs_and_keeps_its_totals() {
        let mut r = Recording::new(None);
        let n = POINTS_MAX as u64 * 3 + 7;
        for i in 1..=n {
            r.push(point(i * 50, i % 3, 100 + i % 50));
        }
        let points = r.points();
        assert!(points.len() <= POINTS_MAX && points.len() > POINTS_MAX / 2, "{}", points.len());
        let span: u64 = points.iter().map(|p| p.span_ns).sum();
        assert_eq!(span, n * 50 * MS, "every stretch of time is in one point");
        let stall: u64 = points.iter().map(|p| p.stall_ns).sum();
        assert_eq!(stall, (1..=n).map(|i| i % 3).sum::<u64>() * MS, "and all the stall");
        let thrash: u64 = points.iter().map(|p| p.thrash_ns).sum();
        assert_eq!(thrash, (1..=n).map(|i| i % 3 / 2).sum::<u64>() * MS, "and the thrashing");
        assert!(points.windows(2).all(|w| w[0].end_ns < w[1].end_ns));
        assert_eq!(points.last().unwrap().end_ns, n * 50 * MS);
    }

    #[test]
    fn the_svg_holds_the_budget_the_resident_set_the_stall_and_the_target() {
        let mut r = Recording::new(Some(2.5));
        for i in 1..=40 {
            r.push(point(i * 50, if i > 30 { 20 } else { 0 }, 200 - i));
        }
        let svg = r.render("python3 <demo>");
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(svg.contains("python3 &lt;demo&gt;: budget and resident memory"));
        for name in ["budget", "resident", "fault stall", "thrashing", "target"] {
            assert!(svg.contains(&format!(">{name}</text>")), "{name}");
        }
        assert_eq!(svg.matches("<polyline").count(), 5);
        let budget = svg.lines().find(|l| l.starts_with("<polyline")).unwrap();
        assert_eq!(budget.split("points=\"").nth(1).unwrap().split_whitespace().count(), 40);
        assert_eq!(crate::svg::check_well_formed(&svg), Ok(()));
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
    }
}
