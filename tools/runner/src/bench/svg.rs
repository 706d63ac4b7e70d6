//! The bench report's plot (`bench-ARCH.svg`): the distribution of the flips' times per mode
//! and size, drawn as SVG text by hand.

use std::fmt::Write as _;

use crate::bench::flips::{
    mode_label, mode_rank, ratio_cell, times, FlipsReport, IDLE, LISTENED, TEXTPOKE,
};
use crate::bench::section::{human_ns, SEED};
use crate::bench::stats::SplitMix64;

/// Mode colours in the plot, in [`crate::bench::flips::MODES`] order.
const COLOURS: [&str; 5] = ["#1f77b4", "#ff7f0e", "#d62728", "#2ca02c", "#9467bd"];

fn colour(mode: &str) -> &'static str {
    COLOURS.get(mode_rank(mode)).copied().unwrap_or("#7f7f7f")
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Ticks for a log axis from `lo` to `hi` (positive): powers of ten, with 2 and 5 (or every
/// digit) in between when the range is narrow.
pub fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let steps: [&[f64]; 3] = [
        &[1.0],
        &[1.0, 2.0, 5.0],
        &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0],
    ];
    let mut best = Vec::new();
    for mantissas in steps {
        let mut ticks = Vec::new();
        for e in (lo.log10().floor() as i32)..=(hi.log10().ceil() as i32) {
            for m in mantissas {
                let t = m * 10f64.powi(e);
                if t >= lo && t <= hi {
                    ticks.push(t);
                }
            }
        }
        best = ticks;
        if best.len() >= 3 {
            break;
        }
    }
    best
}

/// The plot of the flips of `arch` (`cpus` CPUs): per N a panel with a log-scale time axis, and
/// per mode its samples (jittered), a box from p25 to p75 with the median, and whiskers to min
/// and max.
pub fn plot(arch: &str, cpus: u32, r: &FlipsReport) -> String {
    let sizes = r.sizes();
    let modes = r.modes();
    let (panel_w, panel_h, gap) = (230.0, 360.0, 60.0);
    let (left, top, bottom) = (70.0, 100.0, 56.0);
    let width = left + sizes.len().max(1) as f64 * (panel_w + gap);
    let height = top + panel_h + bottom;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{height:.0}\" \
         viewBox=\"0 0 {width:.0} {height:.0}\" font-family=\"sans-serif\" font-size=\"12\">"
    );
    let _ = writeln!(
        out,
        "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"{left}\" y=\"24\" \
         font-size=\"16\" font-weight=\"bold\">{}, {} CPUs, QEMU TCG: time per batch of N sites \
         (log scale)</text>",
        xml_escape(arch),
        cpus
    );
    let _ = writeln!(
        out,
        "<text x=\"{left}\" y=\"44\" fill=\"#555\">each dot one flip; box p25–p75, thick line \
         the median, whiskers min–max; modes interleaved round by round in one boot</text>"
    );
    let mut lx = left;
    for mode in &modes {
        let _ = writeln!(
            out,
            "<rect x=\"{lx}\" y=\"58\" width=\"14\" height=\"14\" fill=\"{}\"/><text x=\"{}\" \
             y=\"70\">{}</text>",
            colour(mode),
            lx + 20.0,
            xml_escape(mode_label(mode))
        );
        lx += 40.0 + 7.5 * mode_label(mode).chars().count() as f64;
    }
    let mut jitter = SplitMix64::new(SEED);
    for (p, &n) in sizes.iter().enumerate() {
        let x0 = left + p as f64 * (panel_w + gap);
        let values: Vec<f64> = r
            .samples
            .iter()
            .filter(|s| s.n == n && s.mode != IDLE && s.ns > 0)
            .map(|s| s.ns as f64)
            .collect();
        let (Some(lo), Some(hi)) = (
            values.iter().copied().reduce(f64::min),
            values.iter().copied().reduce(f64::max),
        ) else {
            continue;
        };
        let flips = r
            .configs
            .iter()
            .filter(|c| c.n == n && c.mode != IDLE)
            .map(|c| c.time_ns.samples)
            .min()
            .unwrap_or(0);
        let (llo, lhi) = (lo.log10(), hi.log10());
        let pad = ((lhi - llo) * 0.06).max(0.03);
        let (llo, lhi) = (llo - pad, lhi + pad);
        let y = |ns: f64| top + panel_h * (1.0 - (ns.max(1.0).log10() - llo) / (lhi - llo));
        let _ = writeln!(
            out,
            "<rect x=\"{x0}\" y=\"{top}\" width=\"{panel_w}\" height=\"{panel_h}\" fill=\"none\" \
             stroke=\"#999\"/>\n<text x=\"{x0}\" y=\"{:.1}\" font-weight=\"bold\">N = {n}</text>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"#555\">{flips} flips \
             per mode</text>",
            top - 8.0,
            x0 + panel_w,
            top - 8.0
        );
        for t in log_ticks(10f64.powf(llo), 10f64.powf(lhi)) {
            let ty = y(t);
            let _ = writeln!(
                out,
                "<line x1=\"{x0}\" x2=\"{:.1}\" y1=\"{ty:.1}\" y2=\"{ty:.1}\" stroke=\"#e5e5e5\"/>\
                 <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"#555\">{}</text>",
                x0 + panel_w,
                x0 - 4.0,
                ty + 4.0,
                human_ns(t)
            );
        }
        let col_w = panel_w / modes.len().max(1) as f64;
        for (m, mode) in modes.iter().enumerate() {
            let Some(c) = r.config(mode, n) else {
                continue;
            };
            let cx = x0 + col_w * (m as f64 + 0.5);
            let colour = colour(mode);
            let s = &c.time_ns;
            let half = col_w * 0.3;
            let _ = writeln!(
                out,
                "<g><title>{} N={n}: median {}, p25–p75 {}–{}, min {}, max {}, {} samples</title>",
                xml_escape(mode_label(mode)),
                human_ns(s.median),
                human_ns(s.p25),
                human_ns(s.p75),
                human_ns(s.min),
                human_ns(s.max),
                s.samples
            );
            let _ = writeln!(
                out,
                "<line x1=\"{cx:.1}\" x2=\"{cx:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"{colour}\"/>\
                 <line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"{colour}\"/>\
                 <line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"{colour}\"/>",
                y(s.min),
                y(s.max),
                cx - half / 2.0,
                cx + half / 2.0,
                y(s.min),
                y(s.min),
                cx - half / 2.0,
                cx + half / 2.0,
                y(s.max),
                y(s.max),
            );
            let _ = writeln!(
                out,
                "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{colour}\" \
                 fill-opacity=\"0.12\" stroke=\"{colour}\"/><line x1=\"{:.1}\" x2=\"{:.1}\" \
                 y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"{colour}\" stroke-width=\"3\"/>",
                cx - half,
                y(s.p75),
                2.0 * half,
                (y(s.p25) - y(s.p75)).max(0.5),
                cx - half,
                cx + half,
                y(s.median),
                y(s.median),
            );
            for v in times(&r.samples, mode, n) {
                let dx = (jitter.next_u64() as f64 / u64::MAX as f64 - 0.5) * half * 1.6;
                let _ = writeln!(
                    out,
                    "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"2.5\" fill=\"{colour}\" \
                     fill-opacity=\"0.55\"/>",
                    cx + dx,
                    y(v)
                );
            }
            let _ = writeln!(out, "</g>");
        }
        for (line, (of, what)) in [(TEXTPOKE, "textpoke"), (LISTENED, "listened")]
            .into_iter()
            .enumerate()
        {
            if let Some(ratio) = r.ratio(of, "static_key", n) {
                let _ = writeln!(
                    out,
                    "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#333\">{what} ÷ \
                     static key: {}</text>",
                    x0 + panel_w / 2.0,
                    top + panel_h + 20.0 + 16.0 * line as f64,
                    ratio_cell(Some(ratio))
                );
            }
        }
    }
    let _ = writeln!(
        out,
        "<text transform=\"translate(16 {:.1}) rotate(-90)\" text-anchor=\"middle\" \
         fill=\"#555\">time per batch</text>\n</svg>",
        top + panel_h / 2.0
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::flips::{analyse, tests::idle_baseline_samples};

    #[test]
    fn a_dot_per_flip() {
        let r = analyse(idle_baseline_samples(), Vec::new());
        let svg = plot("x86_64", 4, &r);
        assert!(svg.starts_with("<svg ") && svg.trim_end().ends_with("</svg>"));
        // Three modes but idle, three flips each.
        assert_eq!(svg.matches("<circle").count(), 9);
        assert!(svg.contains("listened ÷ static key: 5.90"), "{svg}");
    }

    #[test]
    fn axis_ticks() {
        assert_eq!(log_ticks(1e4, 1e8), [1e4, 1e5, 1e6, 1e7, 1e8]);
        assert_eq!(log_ticks(8e6, 3.1e7), [8e6, 9e6, 1e7, 2e7, 3e7]);
        assert_eq!(log_ticks(9e6, 2.1e7), [9e6, 1e7, 2e7]);
    }
}
