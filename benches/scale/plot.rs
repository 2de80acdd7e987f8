//! The benchmark's plot (a PNG drawn by the run itself with `plotters` into a pixel buffer,
//! encoded with `png`): on the left the hot
//! tenant's write latency (p50, p99) against the number of tenants open beside it, on the right
//! the stages of one `Shipped` batch with 1 caller and with many. Text is drawn with a TrueType
//! font read at run time (DejaVu Sans, or `LEASEHOLD_BENCH_FONT`); without one the plot is
//! skipped and the run says so.

use std::path::Path;
use std::time::Duration;

use plotters::prelude::*;
use plotters::style::{FontStyle, register_font};

use crate::shipped::Stage;

/// The font files tried, in order.
const FONTS: [&str; 3] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
];

fn font() -> Result<(), String> {
    let candidates = std::env::var("LEASEHOLD_BENCH_FONT")
        .into_iter()
        .chain(FONTS.iter().map(|f| f.to_string()));
    for path in candidates {
        if let Ok(bytes) = std::fs::read(&path) {
            // The font lives as long as the process (plotters keeps a 'static reference).
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            return register_font("sans-serif", FontStyle::Normal, bytes)
                .map_err(|_| format!("{path} is not a font plotters can read"));
        }
    }
    Err("no TrueType font found (set LEASEHOLD_BENCH_FONT)".into())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Draws the plot into `path`: `latency` is (open tenants, p50, p99) per level, `stages` the
/// stages of a batch per configuration.
pub fn draw(
    path: &Path,
    latency: &[(usize, Duration, Duration)],
    stages: &[(String, Vec<Stage>)],
) -> Result<(), String> {
    font()?;
    draw_both(path, latency, stages).map_err(|e| e.to_string())
}

fn draw_both(
    path: &Path,
    latency: &[(usize, Duration, Duration)],
    stages: &[(String, Vec<Stage>)],
) -> Result<(), Box<dyn std::error::Error>> {
    let (width, height) = (1200u32, 500u32);
    let mut pixels = vec![0u8; (width * height * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut pixels, (width, height)).into_drawing_area();
        draw_charts(&root, latency, stages)?;
        root.present()?;
    }
    let file = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut encoder = png::Encoder::new(file, width, height);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    encoder.write_header()?.write_image_data(&pixels)?;
    Ok(())
}

fn draw_charts(
    root: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
    latency: &[(usize, Duration, Duration)],
    stages: &[(String, Vec<Stage>)],
) -> Result<(), Box<dyn std::error::Error>> {
    root.fill(&WHITE)?;
    let (left, right) = root.split_horizontally(600);

    let most = latency.iter().map(|l| l.0).max().unwrap_or(1).max(10) as f64;
    let top = latency.iter().map(|l| ms(l.2)).fold(0.1, f64::max) * 1.15;
    let mut chart = ChartBuilder::on(&left)
        .caption(
            "Shipped write latency of one hot tenant",
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(55)
        .build_cartesian_2d((1f64..most * 1.5).log_scale(), 0f64..top)?;
    chart
        .configure_mesh()
        .x_label_formatter(&|x| format!("{x:.0}"))
        .x_desc("tenants open on the replica (log)")
        .y_desc("ms")
        .draw()?;
    for (name, color, pick) in [("p50", BLUE, 1), ("p99", RED, 2)] {
        let points: Vec<(f64, f64)> = latency
            .iter()
            .map(|l| (l.0 as f64, ms(if pick == 1 { l.1 } else { l.2 })))
            .collect();
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        chart.draw_series(points.iter().map(|p| Circle::new(*p, 4, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE)
        .border_style(BLACK)
        .draw()?;

    let total = |s: &[Stage]| s.iter().map(|(_, d)| ms(*d)).sum::<f64>();
    let top = stages.iter().map(|(_, s)| total(s)).fold(0.1, f64::max) * 1.15;
    let names: Vec<String> = stages.iter().map(|(n, _)| n.clone()).collect();
    let mut chart = ChartBuilder::on(&right)
        .caption("One Shipped batch, by stage (mean)", ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(55)
        .build_cartesian_2d(0f64..stages.len() as f64, 0f64..top)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(stages.len() * 2 + 1)
        .x_label_formatter(&|x| {
            let i = x.floor() as usize;
            if (x - i as f64 - 0.5).abs() < 0.01 {
                names.get(i).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_desc("ms per batch")
        .draw()?;
    let stage_names: Vec<&'static str> = stages
        .first()
        .map(|(_, s)| s.iter().map(|(n, _)| *n).collect())
        .unwrap_or_default();
    for (k, stage) in stage_names.iter().enumerate() {
        let color = Palette99::pick(k).to_rgba();
        let bars: Vec<Rectangle<(f64, f64)>> = stages
            .iter()
            .enumerate()
            .map(|(i, (_, s))| {
                let below: f64 = s[..k].iter().map(|(_, d)| ms(*d)).sum();
                let x = i as f64;
                Rectangle::new(
                    [(x + 0.2, below), (x + 0.8, below + ms(s[k].1))],
                    color.filled(),
                )
            })
            .collect();
        chart
            .draw_series(bars)?
            .label(*stage)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 15, y + 5)], color.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE)
        .border_style(BLACK)
        .draw()?;
    Ok(())
}
