//! The charts `scripts/bench.sh --plot` writes (SVG, with `plotters`): hand-off latency
//! distributions per topology, and throughput against the number of tasks.

use std::path::Path;
use std::time::Duration;

use plotters::prelude::*;

const COLORS: [RGBColor; 5] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
];

/// The distribution (CDF) of each series' hand-off times, in µs, up to its 99th percentile
/// (the maximum is in the table).
pub fn handoff_cdf(
    path: &Path,
    title: &str,
    series: &[(String, Vec<Duration>)],
) -> Result<(), Box<dyn std::error::Error>> {
    let mut sorted: Vec<(String, Vec<f64>)> = series
        .iter()
        .map(|(name, t)| {
            let mut us: Vec<f64> = t.iter().map(|d| d.as_secs_f64() * 1e6).collect();
            us.sort_by(f64::total_cmp);
            (name.clone(), us)
        })
        .collect();
    sorted.retain(|(_, v)| !v.is_empty());
    let p99 = |v: &[f64]| v[((v.len() - 1) as f64 * 0.99) as usize];
    let x_max = sorted.iter().map(|(_, v)| p99(v)).fold(1.0, f64::max) * 1.05;
    let root = SVGBackend::new(path, (760, 440)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..x_max, 0.0..1.0)?;
    chart
        .configure_mesh()
        .x_desc("release -> waiter holds the lock (µs)")
        .y_desc("fraction of hand-offs")
        .draw()?;
    for (i, (name, v)) in sorted.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let n = v.len() as f64;
        let label = format!("{name} (p50 {:.0} µs)", v[v.len() / 2]);
        chart
            .draw_series(LineSeries::new(
                v.iter()
                    .enumerate()
                    .filter(|(_, x)| **x <= x_max)
                    .map(|(k, x)| (*x, (k + 1) as f64 / n)),
                color.stroke_width(2),
            ))?
            .label(label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

/// Pairs per second against the number of concurrent tasks, one line per series.
pub fn throughput(
    path: &Path,
    title: &str,
    series: &[(String, Vec<(usize, f64)>)],
) -> Result<(), Box<dyn std::error::Error>> {
    let x_max = series
        .iter()
        .flat_map(|(_, v)| v.iter().map(|(t, _)| *t))
        .max()
        .unwrap_or(1) as f64;
    let y_max = series
        .iter()
        .flat_map(|(_, v)| v.iter().map(|(_, y)| *y))
        .fold(1.0, f64::max)
        * 1.1;
    let root = SVGBackend::new(path, (760, 440)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((1.0..x_max).log_scale(), 0.0..y_max)?;
    chart
        .configure_mesh()
        .x_desc("concurrent tasks, distinct keys (log scale)")
        .y_desc("lock+unlock pairs per second")
        .draw()?;
    for (i, (name, v)) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let points: Vec<(f64, f64)> = v.iter().map(|(t, y)| (*t as f64, *y)).collect();
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?
            .label(name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
        chart.draw_series(points.iter().map(|p| Circle::new(*p, 3, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}
