//! `amprun report RUN.jsonl... -o report.html` and `amprun train --report FILE`: one
//! self-contained HTML page of a run's metrics (or several runs' on shared axes), with
//! inline SVG and CSS, a small inline script for the graph's zoom, and nothing fetched.
//!
//! Charts, each run in its own colour: the loss and the accuracy per epoch (training
//! solid, validation dashed), the validation accuracy over time, the learning rate, the training throughput over time, each
//! parameter group's staleness (mean solid, max dotted, the bound grey), for rolled-out
//! networks the accuracy per update step, and from a Chrome trace (`--trace`) each
//! worker's busy share over time beside the plan's prediction. A table gives each run's
//! last and best epoch and its plan, and each run's command line, build (version and
//! commit) and machine from its metrics' `run` object. `train --report` adds the model's
//! graph drawn with each node in its worker's colour, each fusion group as one box, the
//! measured time per instance on each box when the run measured (`--profile`, `--trace`,
//! `--report-utilization`), and the edges between workers marked (laid out in Rust by
//! layout-rs, no Graphviz needed; the drawing zooms and pans).

use crate::failure::Failure;
use serde_json::Value;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// One run: its name (the file's) and its metrics objects in order.
pub struct Run {
    pub name: String,
    pub rows: Vec<Value>,
}

impl Run {
    /// A `--metrics` file: one JSON object per line (blank lines skipped); a line that is
    /// not one is an error naming the file and line.
    pub fn read(path: &Path) -> Result<Run, Failure> {
        let bytes = amp_ir::limits::read_bounded(path, MAX_METRICS_BYTES).map_err(|e| Failure::io("read", path, &e))?;
        let text = String::from_utf8_lossy(&bytes);
        let mut rows = Vec::new();
        for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            match serde_json::from_str::<Value>(line) {
                Ok(value) if value.is_object() => rows.push(value),
                _ => {
                    let message = format!("{}:{}: not a metrics object", path.display(), i + 1);
                    return Err(Failure::bad_input(message));
                }
            }
        }
        Ok(Run { name: file_name(path), rows })
    }

    /// `(x, y)` of the rows of `split` that have both keys (a rollout's update-step rows
    /// have no `epoch`).
    fn pairs(&self, split: &str, x: &str, y: &str) -> Vec<(f64, f64)> {
        let rows = self.rows.iter().filter(|r| r["split"] == split);
        rows.filter_map(|r| Some((r[x].as_f64()?, r[y].as_f64()?))).collect()
    }

    /// Per parameter group, `(epoch, value)` of its staleness `key` (`mean`, `max`,
    /// `bound`).
    fn staleness(&self, key: &str) -> Vec<(String, Vec<(f64, f64)>)> {
        let mut groups: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
        for row in self.rows.iter().filter(|r| r["split"] == "train") {
            let Some(epoch) = row["epoch"].as_f64() else { continue };
            for group in row["staleness"].as_array().map_or(&[][..], Vec::as_slice) {
                let (Some(name), Some(x)) = (group["group"].as_str(), group[key].as_f64()) else { continue };
                match groups.iter_mut().find(|(n, _)| n == name) {
                    Some((_, points)) => points.push((epoch, x)),
                    None => groups.push((name.to_string(), vec![(epoch, x)])),
                }
            }
        }
        groups
    }
}

/// `amprun report`.
pub fn run(args: &crate::cli::ReportArgs) -> Result<(), Failure> {
    let runs = args.runs.iter().map(|p| Run::read(p)).collect::<Result<Vec<_>, _>>()?;
    let traces = args.trace.iter().map(|p| Busy::read(p)).collect::<Result<Vec<_>, _>>()?;
    write(&args.output, &runs, &traces, None)
}

/// A Chrome trace's work intervals (`amprun train --trace`): its name and, per event,
/// `(worker, start s, duration s)`.
pub struct Busy {
    pub name: String,
    pub intervals: Vec<(u32, f64, f64)>,
}

impl Busy {
    /// The complete events (`"ph": "X"`) of a Chrome trace file; anything else in it is
    /// skipped, and a file that is not a trace is an error.
    pub fn read(path: &Path) -> Result<Busy, Failure> {
        let bytes = amp_ir::limits::read_bounded(path, MAX_TRACE_BYTES).map_err(|e| Failure::io("read", path, &e))?;
        let not_a_trace = || Failure::bad_input(format!("{}: not a Chrome trace (`traceEvents`)", path.display()));
        let value: Value = serde_json::from_slice(&bytes).map_err(|_| not_a_trace())?;
        let events = value["traceEvents"].as_array().ok_or_else(not_a_trace)?;
        let intervals = events
            .iter()
            .filter(|e| e["ph"] == "X")
            .filter_map(|e| {
                let worker = u32::try_from(e["tid"].as_u64()?).ok()?;
                Some((worker, e["ts"].as_f64()? / 1e6, e["dur"].as_f64()? / 1e6))
            })
            .collect();
        Ok(Busy { name: file_name(path), intervals })
    }

    /// Per worker, its busy share in each of `bins` equal spans of the trace: `(span's
    /// middle s, share)`, and the workers in order.
    fn utilization(&self, bins: usize) -> Vec<(u32, Vec<(f64, f64)>)> {
        let start = self.intervals.iter().map(|i| i.1).fold(f64::INFINITY, f64::min);
        let end = self.intervals.iter().map(|i| i.1 + i.2).fold(f64::NEG_INFINITY, f64::max);
        if !(start.is_finite() && end > start) {
            return Vec::new();
        }
        let width = (end - start) / bins as f64;
        let mut workers: std::collections::BTreeMap<u32, Vec<f64>> = Default::default();
        for &(worker, from, dur) in &self.intervals {
            let busy = workers.entry(worker).or_insert_with(|| vec![0.0; bins]);
            // The interval's time in each bin it overlaps.
            let (a, b) = (from - start, from + dur - start);
            let first = ((a / width) as usize).min(bins - 1);
            let last = ((b / width) as usize).min(bins - 1);
            for (bin, time) in busy.iter_mut().enumerate().take(last + 1).skip(first) {
                let (lo, hi) = (bin as f64 * width, (bin + 1) as f64 * width);
                *time += (b.min(hi) - a.max(lo)).max(0.0);
            }
        }
        workers
            .into_iter()
            .map(|(w, busy)| {
                let points = busy.iter().enumerate().map(|(i, t)| ((i as f64 + 0.5) * width, (t / width).min(1.0)));
                (w, points.collect())
            })
            .collect()
    }
}

/// How a run or trace is named on the page: its file's name.
fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned())
}

/// A trace file larger than this is refused.
const MAX_TRACE_BYTES: u64 = 256 << 20;

/// A metrics file larger than this is refused (a run of many epochs writes kilobytes).
const MAX_METRICS_BYTES: u64 = 256 << 20;

/// Graphs of more nodes than this are not drawn: the layout's time grows faster than the
/// nodes, and a page of thousands of boxes shows nothing.
const MAX_DRAWN_NODES: usize = 400;

/// The graph laid out (layout-rs: layered, in Rust, no Graphviz needed), each node a box
/// labelled with its index and label and filled with its worker's colour, a fusion group
/// (run as one kernel) one box for all its members, the edges between workers (the plan's
/// cut) dashed red. `placement` gives each node index's worker (copy 0's); with a
/// `profile`, each box also shows its measured time per instance. `None` for a graph over
/// [`MAX_DRAWN_NODES`].
pub fn graph_svg(
    graph: &amp_ir::Graph,
    placement: &[Option<usize>],
    profile: Option<&amp_plan::Profile>,
) -> Option<String> {
    use layout::backends::svg::SVGWriter;
    use layout::core::base::Orientation;
    use layout::core::color::Color;
    use layout::core::style::{LineStyleKind, StyleAttr};
    use layout::std_shapes::render::get_shape_size;
    use layout::std_shapes::shapes::{Arrow, Element, LineEndKind, ShapeKind};
    use layout::topo::layout::VisualGraph;

    if graph.nodes.node_count() > MAX_DRAWN_NODES {
        return None;
    }
    let worker = |i: usize| placement.get(i).copied().flatten();
    // Each node's box: its own, or its fusion group's (the group's first node stands for it).
    let boxes = drawn_boxes(graph);
    let micros = |i: usize| -> Option<f64> {
        let node = profile?.nodes.iter().find(|n| n.id as usize == i)?;
        Some(node.forward_per_instance * node.forward_us + node.backward_per_instance * node.backward_us)
    };
    let mut drawn = VisualGraph::new(Orientation::TopToBottom);
    let mut handles = std::collections::HashMap::new();
    for (first, name, members) in &boxes.groups {
        let mut label = match members.len() {
            1 => format!("%{first} {name}"),
            n => format!("%{first} fused, {n} ops"),
        };
        if label.chars().count() > 28 {
            label = label.chars().take(27).chain(['…']).collect();
        }
        let time: Option<f64> = members.iter().map(|&m| micros(m)).sum();
        if let Some(us) = time {
            let _ = write!(label, " · {}", duration_us(us));
        }
        let fill = worker(*first).map_or(0xffff_ffff, |w| {
            let rgb = u32::from_str_radix(colour(w).trim_start_matches('#'), 16).unwrap_or(0x888888);
            (rgb << 8) | 0x55
        });
        let look = StyleAttr::new(Color::fast("black"), 1, Some(Color::new(fill)), 4, 12);
        let shape = ShapeKind::new_box(&label);
        let size = get_shape_size(Orientation::TopToBottom, &shape, 12, false);
        handles.insert(*first, drawn.add_node(Element::create(shape, look, Orientation::TopToBottom, size)));
    }
    let mut seen = std::collections::HashSet::new();
    for edge in graph.nodes.edge_indices() {
        let Some((from, to)) = graph.nodes.edge_endpoints(edge) else { continue };
        let (Some(&from), Some(&to)) = (boxes.of.get(&from.index()), boxes.of.get(&to.index())) else { continue };
        // Inside a group, or a second edge between the same two boxes: not drawn.
        if from == to || !seen.insert((from, to)) {
            continue;
        }
        let (Some(&a), Some(&b)) = (handles.get(&from), handles.get(&to)) else { continue };
        let cut = worker(from) != worker(to);
        let (style, colour) = if cut { (LineStyleKind::Dashed, "red") } else { (LineStyleKind::Normal, "gray") };
        let look = StyleAttr::new(Color::fast(colour), 1, None, 0, 10);
        let arrow = Arrow::new(LineEndKind::None, LineEndKind::Arrow, style, "", &look, &None, &None);
        drawn.add_edge(arrow, a, b);
    }
    let mut svg = SVGWriter::new();
    drawn.do_it(false, false, false, &mut svg);
    // Inline in HTML, an SVG needs no XML prolog nor namespace declaration (and names no
    // URL then).
    let svg = svg.finalize();
    let svg = svg.find("<svg").map_or(svg.as_str(), |at| &svg[at..]);
    Some(svg.replacen(" xmlns=\"http://www.w3.org/2000/svg\"", "", 1))
}

/// The boxes a graph is drawn with, by node index: each fusion group one box (its lowest
/// node standing for it), every other node its own.
struct Boxes<'g> {
    /// Each box's node, its label, and the nodes it stands for, in node order.
    groups: Vec<(usize, &'g str, Vec<usize>)>,
    /// Each node's box.
    of: std::collections::HashMap<usize, usize>,
}

fn drawn_boxes(graph: &amp_ir::Graph) -> Boxes<'_> {
    let mut nodes: Vec<(usize, &amp_ir::Node)> =
        graph.nodes.node_indices().map(|i| (i.index(), &graph.nodes[i])).collect();
    nodes.sort_by_key(|(i, _)| *i);
    let mut head_of_group = std::collections::HashMap::new();
    let mut position: std::collections::HashMap<usize, usize> = std::collections::HashMap::new();
    let mut boxes = Boxes { groups: Vec::new(), of: std::collections::HashMap::new() };
    for (index, node) in nodes {
        let head = node.fusion.map_or(index, |g| *head_of_group.entry(g).or_insert(index));
        boxes.of.insert(index, head);
        match position.get(&head) {
            Some(&at) => boxes.groups[at].2.push(index),
            None => {
                position.insert(head, boxes.groups.len());
                boxes.groups.push((head, node.label.as_str(), vec![index]));
            }
        }
    }
    boxes
}

/// `850 ns`, `12.3 µs`, `4.1 ms`.
fn duration_us(us: f64) -> String {
    if us < 1.0 {
        format!("{:.0} ns", us * 1e3)
    } else if us < 1e3 {
        format!("{us:.1} µs")
    } else {
        format!("{:.1} ms", us / 1e3)
    }
}

/// Writes the page for `runs` to `output` (atomically: a page is never half written), with
/// the model's graph when there is one ([`graph_svg`]).
pub fn write(output: &Path, runs: &[Run], traces: &[Busy], graph: Option<&str>) -> Result<(), Failure> {
    let page = render(runs, traces, graph);
    crate::setup::check_target("--report", output)?;
    let temporary = PathBuf::from(format!("{}.tmp", output.display()));
    std::fs::write(&temporary, page).map_err(|e| Failure::io("write", &temporary, &e))?;
    std::fs::rename(&temporary, output).map_err(|e| Failure::io("write", output, &e))
}

/// Colours for runs, distinguishable in print and for most colour vision.
const COLOURS: [&str; 8] = ["#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000", "#f0e442"];

/// The colour of the `i`-th run (or worker).
fn colour(i: usize) -> &'static str {
    COLOURS[i % COLOURS.len()]
}

/// A line per run, in its colour and `dash`, labelled with its name and `suffix`:
/// `points` of each.
fn lines_of(runs: &[Run], suffix: &str, dash: &'static str, points: impl Fn(&Run) -> Vec<(f64, f64)>) -> Vec<Line> {
    let line = |(i, run): (usize, &Run)| Line {
        label: if suffix.is_empty() { run.name.clone() } else { format!("{} {suffix}", run.name) },
        colour: colour(i),
        dash,
        points: points(run),
    };
    runs.iter().enumerate().map(line).collect()
}

/// One line of a chart: a run's series in its colour, solid or dashed.
struct Line {
    label: String,
    colour: &'static str,
    dash: &'static str,
    points: Vec<(f64, f64)>,
}

/// The page.
pub fn render(runs: &[Run], traces: &[Busy], graph: Option<&str>) -> String {
    let mut body = String::new();
    let _ = write!(body, "<h1>Amp run report</h1>\n<table>\n<tr><th>run</th><th>epochs</th><th>last train</th>");
    body.push_str("<th>last valid</th><th>best valid accuracy</th><th>plan</th></tr>\n");
    for (i, run) in runs.iter().enumerate() {
        let last = |split: &str| {
            let row = run.rows.iter().rev().find(|r| r["split"] == split && r["update_step"].is_null());
            row.map_or_else(|| "–".to_string(), scores)
        };
        let epochs = run.pairs("train", "epoch", "loss").len();
        // The first epoch of the highest accuracy.
        let best = run.pairs("valid", "epoch", "accuracy").into_iter().reduce(|b, p| if p.1 > b.1 { p } else { b });
        let best = best.map_or_else(|| "–".to_string(), |(e, a)| format!("{:.2}% (epoch {e})", 100.0 * a));
        let plan = run.rows.iter().rev().find(|r| r["split"] == "plan").map_or_else(|| "one worker".into(), plan);
        let _ = writeln!(
            body,
            "<tr><td><span class=\"key\" style=\"background:{}\"></span>{}</td><td>{epochs}</td><td>{}</td><td>{}</td><td>{best}</td><td>{}</td></tr>",
            colour(i),
            escape(&run.name),
            last("train"),
            last("valid"),
            escape(&plan)
        );
    }
    body.push_str("</table>\n");
    for (i, run) in runs.iter().enumerate() {
        if let Some(row) = run.rows.iter().rev().find(|r| r["split"] == "run") {
            body.push_str(&run_line(colour(i), &run.name, row));
        }
    }
    if let Some(svg) = graph {
        body.push_str("<figure>\n<figcaption>The graph, each node in its worker's colour (the table's plan; copy 0), each fusion group one box, edges between workers dashed red; the measured time per instance on each box when the run measured it. Scroll to zoom, drag to pan.</figcaption>\n");
        body.push_str("<div class=\"graph\" id=\"graph\"><div class=\"zoom\"><button data-zoom=\"1.25\">+</button><button data-zoom=\"0.8\">−</button><button data-zoom=\"fit\">fit</button></div>");
        body.push_str(svg);
        body.push_str("</div>\n</figure>\n");
        body.push_str(ZOOM_SCRIPT);
    }
    let per_run = |split: &str, key: &str, dash| lines_of(runs, split, dash, |run| run.pairs(split, "epoch", key));
    let both = |key: &str| {
        let mut lines = per_run("train", key, "");
        lines.extend(per_run("valid", key, "6 4"));
        lines
    };
    body.push_str(&chart("Loss per epoch", "epoch", "loss", both("loss")));
    body.push_str(&chart("Accuracy per epoch", "epoch", "accuracy", both("accuracy")));
    // Time to accuracy: runs of different speeds (workers, in flight, asynchrony) compared.
    let over_time = lines_of(runs, "", "", |run| run.pairs("valid", "elapsed_s", "accuracy"));
    body.push_str(&chart("Validation accuracy over time", "seconds", "accuracy", over_time));
    body.push_str(&chart("Learning rate", "epoch", "learning rate", per_run("train", "lr", "")));
    let throughput = lines_of(runs, "", "", |run| run.pairs("train", "elapsed_s", "instances_per_s"));
    body.push_str(&chart(
        "Training throughput over time (each epoch's, at its end)",
        "seconds",
        "instances/s",
        throughput,
    ));
    let mut staleness = Vec::new();
    for (i, run) in runs.iter().enumerate() {
        for (key, dash) in [("mean", ""), ("max", "2 3")] {
            for (group, points) in run.staleness(key) {
                staleness.push(Line { label: format!("{} {group} {key}", run.name), colour: colour(i), dash, points });
            }
        }
        for (group, points) in run.staleness("bound") {
            let label = format!("{} {group} bound", run.name);
            staleness.push(Line { label, colour: "#999999", dash: "8 3", points });
        }
    }
    body.push_str(&chart("Staleness per parameter group", "epoch", "updates", staleness));
    let steps = lines_of(runs, "", "", |run| run.pairs("valid", "update_step", "accuracy"));
    body.push_str(&chart("Accuracy per update step (rolled-out networks)", "update step", "accuracy", steps));
    // The plan's predicted utilisation per worker, from the first run that has one.
    let predicted: Vec<f64> = runs
        .iter()
        .find_map(|r| r.rows.iter().rev().find(|row| row["split"] == "plan"))
        .and_then(|row| row["predicted_utilization"].as_array())
        .map(|u| u.iter().filter_map(Value::as_f64).collect())
        .unwrap_or_default();
    for trace in traces {
        let workers = trace.utilization(100);
        let mut lines = Vec::new();
        for (i, (worker, points)) in workers.iter().enumerate() {
            let (first, last) = (points.first().map_or(0.0, |p| p.0), points.last().map_or(0.0, |p| p.0));
            lines.push(Line { label: format!("worker {worker}"), colour: colour(i), dash: "", points: points.clone() });
            if let Some(&share) = predicted.get(*worker as usize) {
                let label = format!("worker {worker}, the plan's prediction");
                lines.push(Line { label, colour: colour(i), dash: "6 4", points: vec![(first, share), (last, share)] });
            }
        }
        let title = format!("Worker utilisation over time ({})", trace.name);
        body.push_str(&chart(&title, "seconds", "busy share", lines));
    }
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>Amp run report</title>\n\
         <style>{STYLE}</style>\n</head>\n<body>\n{body}</body>\n</html>\n"
    )
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:2em;color:#222}\
table{border-collapse:collapse}td,th{padding:.3em .8em;border-bottom:1px solid #ddd;text-align:left}\
.key{display:inline-block;width:.8em;height:.8em;margin-right:.4em}\
figure{margin:2em 0}figcaption{font-weight:600;margin-bottom:.3em}\
svg text{font-size:11px;fill:#444}.context{color:#555}\
.graph{max-width:100%;border:1px solid #ddd;position:relative}.graph svg{cursor:grab;display:block}\
.zoom{position:absolute;right:.5em;top:.5em}.zoom button{margin-left:.2em;min-width:2em}";

/// `loss 1.2345, acc 56.70%` of a report row.
fn scores(row: &Value) -> String {
    let loss = row["loss"].as_f64().map_or_else(|| "loss –".to_string(), |l| format!("loss {l:.4}"));
    match row["accuracy"].as_f64() {
        Some(a) => format!("{loss}, acc {:.2}%", 100.0 * a),
        None => loss,
    }
}

/// The plan row's `workers`, `copies` and predicted speedup, as far as it has them.
fn plan(row: &Value) -> String {
    let mut out = String::new();
    if let Some(copies) = row["copies"].as_u64().filter(|&c| c > 1) {
        let _ = write!(out, "{copies} copies, ");
    }
    if let Some(workers) = row["workers"].as_u64() {
        let _ = write!(out, "{workers} workers");
    }
    if let Some(speedup) = row["predicted_speedup"].as_f64() {
        let _ = write!(out, ", predicted {speedup:.2}×");
    }
    if out.is_empty() {
        "–".into()
    } else {
        out
    }
}

/// A run's command line, build and machine, from its metrics' `run` object.
fn run_line(colour: &str, name: &str, row: &Value) -> String {
    let text = |key: &str| row[key].as_str().unwrap_or("?").to_string();
    let command: Vec<&str> =
        row["command"].as_array().map_or(Vec::new(), |c| c.iter().filter_map(Value::as_str).collect());
    format!(
        "<p class=\"context\"><span class=\"key\" style=\"background:{colour}\"></span>{}: <code>{}</code><br>amprun {} (commit {}) on {} ({} {}, {} cores)</p>\n",
        escape(name),
        escape(&command.join(" ")),
        escape(&text("amprun")),
        escape(&text("commit")),
        escape(&text("host")),
        escape(&text("os")),
        escape(&text("arch")),
        row["cores"].as_u64().unwrap_or(0)
    )
}

/// Zoom (the wheel, the buttons) and pan (dragging) of the graph's drawing, by its
/// `viewBox`; `fit` shows all of it. Marks the drawing `data-zoom="ready"` once set up.
const ZOOM_SCRIPT: &str = r#"<script>
(function () {
  var box = document.getElementById("graph");
  var svg = box && box.querySelector("svg");
  if (!svg) return;
  var w = parseFloat(svg.getAttribute("width")) || 800, h = parseFloat(svg.getAttribute("height")) || 600;
  var view = [0, 0, w, h];
  svg.setAttribute("viewBox", view.join(" "));
  svg.setAttribute("width", "100%");
  svg.setAttribute("height", Math.min(h, 800));
  function show() { svg.setAttribute("viewBox", view.join(" ")); }
  function zoom(f, cx, cy) {
    var nw = view[2] / f, nh = view[3] / f;
    view = [cx - (cx - view[0]) / f, cy - (cy - view[1]) / f, nw, nh];
    show();
  }
  box.querySelectorAll("button").forEach(function (b) {
    b.addEventListener("click", function () {
      var z = b.getAttribute("data-zoom");
      if (z === "fit") { view = [0, 0, w, h]; show(); }
      else zoom(parseFloat(z), view[0] + view[2] / 2, view[1] + view[3] / 2);
    });
  });
  svg.addEventListener("wheel", function (e) {
    e.preventDefault();
    var r = svg.getBoundingClientRect();
    var cx = view[0] + (e.clientX - r.left) / r.width * view[2], cy = view[1] + (e.clientY - r.top) / r.height * view[3];
    zoom(e.deltaY < 0 ? 1.2 : 1 / 1.2, cx, cy);
  }, { passive: false });
  var drag = null;
  svg.addEventListener("mousedown", function (e) { drag = [e.clientX, e.clientY]; });
  window.addEventListener("mouseup", function () { drag = null; });
  window.addEventListener("mousemove", function (e) {
    if (!drag) return;
    var r = svg.getBoundingClientRect();
    view[0] -= (e.clientX - drag[0]) / r.width * view[2];
    view[1] -= (e.clientY - drag[1]) / r.height * view[3];
    drag = [e.clientX, e.clientY];
    show();
  });
  box.setAttribute("data-zoom", "ready");
})();
</script>
"#;

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 260.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 12.0;
const BOTTOM: f64 = 36.0;

/// One chart as a figure with an inline SVG: axes with ticks, a polyline per line with
/// points (lines without any are left out; no chart without lines), and a legend.
fn chart(title: &str, x_label: &str, y_label: &str, lines: Vec<Line>) -> String {
    let lines: Vec<Line> =
        lines.into_iter().filter(|l| l.points.iter().any(|p| p.0.is_finite() && p.1.is_finite())).collect();
    if lines.is_empty() {
        return String::new();
    }
    let finite = || lines.iter().flat_map(|l| &l.points).filter(|p| p.0.is_finite() && p.1.is_finite());
    let (x0, x1) = bounds(finite().map(|p| p.0));
    let (y0, y1) = bounds(finite().map(|p| p.1).chain([0.0]));
    let sx = |x: f64| LEFT + (x - x0) / (x1 - x0) * (WIDTH - LEFT - RIGHT);
    let sy = |y: f64| TOP + (y1 - y) / (y1 - y0) * (HEIGHT - TOP - BOTTOM);
    let mut svg = String::new();
    let _ = write!(
        svg,
        "<svg width=\"{WIDTH}\" height=\"{HEIGHT}\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" role=\"img\" aria-label=\"{}\">",
        escape(title)
    );
    let (bottom, right) = (HEIGHT - BOTTOM, WIDTH - RIGHT);
    let _ = write!(svg, "<path d=\"M{LEFT} {TOP}V{bottom}H{right}\" fill=\"none\" stroke=\"#888\"/>");
    for y in ticks(y0, y1) {
        let at = sy(y);
        let _ = write!(
            svg,
            "<line x1=\"{LEFT}\" x2=\"{right}\" y1=\"{at:.1}\" y2=\"{at:.1}\" stroke=\"#eee\"/>\
             <text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            LEFT - 4.0,
            at + 4.0,
            number(y)
        );
    }
    for x in ticks(x0, x1) {
        let at = sx(x);
        let _ = write!(svg, "<text x=\"{at:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>", bottom + 14.0, number(x));
    }
    let _ = write!(
        svg,
        "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>\
         <text x=\"12\" y=\"{:.1}\" text-anchor=\"middle\" transform=\"rotate(-90 12 {:.1})\">{}</text>",
        (LEFT + right) / 2.0,
        HEIGHT - 4.0,
        escape(x_label),
        (TOP + bottom) / 2.0,
        (TOP + bottom) / 2.0,
        escape(y_label)
    );
    let mut legend = String::new();
    for line in &lines {
        let points: Vec<String> = line
            .points
            .iter()
            .filter(|p| p.0.is_finite() && p.1.is_finite())
            .map(|&(x, y)| format!("{:.1},{:.1}", sx(x), sy(y)))
            .collect();
        let dash = if line.dash.is_empty() { String::new() } else { format!(" stroke-dasharray=\"{}\"", line.dash) };
        let _ = write!(
            svg,
            "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.8\"{dash} points=\"{}\"><title>{}</title></polyline>",
            line.colour,
            points.join(" "),
            escape(&line.label)
        );
        let _ = write!(
            legend,
            "<span><svg width=\"26\" height=\"8\"><line x1=\"0\" x2=\"26\" y1=\"4\" y2=\"4\" stroke=\"{}\" stroke-width=\"2\"{dash}/></svg> {}</span> ",
            line.colour,
            escape(&line.label)
        );
    }
    svg.push_str("</svg>");
    format!("<figure>\n<figcaption>{}</figcaption>\n{svg}\n<div>{legend}</div>\n</figure>\n", escape(title))
}

/// The range of `values`, widened when it is a single value.
fn bounds(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if !lo.is_finite() || !hi.is_finite() {
        return (0.0, 1.0);
    }
    if hi - lo < 1e-12 {
        return (lo - 0.5, hi + 0.5);
    }
    (lo, hi)
}

/// About five round tick values within `[lo, hi]`.
fn ticks(lo: f64, hi: f64) -> Vec<f64> {
    let raw = (hi - lo) / 5.0;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0].into_iter().map(|m| m * magnitude).find(|&s| s >= raw).unwrap_or(magnitude * 10.0);
    let first = (lo / step).ceil() as i64;
    let last = (hi / step).floor() as i64;
    (first..=last).take(50).map(|k| k as f64 * step).collect()
}

/// A tick's label: short, without float noise.
fn number(x: f64) -> String {
    if x.abs() >= 1e4 || x == x.trunc() {
        format!("{x:.0}")
    } else {
        let text = format!("{x:.4}");
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Every example's graph lays out (none panics the layout, loops and recursion
    /// included), with a box per node and the edges between two workers dashed.
    #[test]
    fn every_example_graph_is_drawn_with_its_cut() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
        for name in
            ["list_reduce", "tree_lstm", "ggsnn", "mlp", "moe", "module_network", "attention", "child_sum_tree_lstm"]
        {
            let source = std::fs::read_to_string(dir.join(format!("{name}.amp"))).unwrap();
            let defines = if name == "moe" { vec![("experts".to_string(), 4)] } else { Vec::new() };
            let (map, checked) = amp_sema::check_source(name, &source, &amp_sema::Options { defines });
            let model = checked.program.models[0];
            let (graph, _) = amp_lower::compile_model(&checked.program, &map, model).unwrap();
            let placement = amp_ir::placement::round_robin(&graph, 2);
            let svg = graph_svg(&graph, &placement, None).unwrap_or_else(|| panic!("{name} is drawn"));
            assert!(svg.starts_with("<svg") && !svg.contains("http"), "{name}");
            assert_eq!(svg.matches("stroke-dasharray").count() > 0, graph.nodes.edge_count() > 0, "{name}");
            // A box per fusion group and per node outside one.
            let groups: std::collections::HashSet<u32> = graph.nodes.node_weights().filter_map(|n| n.fusion).collect();
            let alone = graph.nodes.node_weights().filter(|n| n.fusion.is_none()).count();
            assert_eq!(drawn_boxes(&graph).groups.len(), groups.len() + alone, "{name}");
            assert_eq!(svg.matches("fused, ").count(), groups.len(), "{name}");
        }
    }

    #[test]
    fn ticks_are_round_and_inside() {
        assert_eq!(ticks(0.0, 1.0), [0.0, 0.2, 0.4, 0.6000000000000001, 0.8, 1.0]);
        assert!(ticks(1.0, 12.0).iter().all(|&t| (1.0..=12.0).contains(&t)));
        assert_eq!(number(0.30000000000000004), "0.3");
        assert_eq!(number(12000.0), "12000");
    }

    #[test]
    fn a_chart_has_a_polyline_per_line_with_a_point_per_epoch() {
        let run = Run {
            name: "a.jsonl".into(),
            rows: (1..=3)
                .flat_map(|e| {
                    [
                        json!({"split": "train", "epoch": e, "loss": 1.0 / e as f64, "accuracy": 0.5}),
                        json!({"split": "valid", "epoch": e, "loss": 1.5 / e as f64}),
                    ]
                })
                .collect(),
        };
        let page = render(&[run], &[], None);
        let loss = page.split("<figcaption>").nth(1).expect("the loss chart");
        assert!(loss.starts_with("Loss per epoch"));
        let polylines: Vec<&str> = loss.split("<polyline").skip(1).collect();
        assert_eq!(polylines.len(), 2, "train and valid");
        for p in polylines {
            let points = p.split("points=\"").nth(1).and_then(|s| s.split('"').next()).unwrap_or_default();
            assert_eq!(points.split(' ').count(), 3, "{points}");
        }
        assert!(!page.contains("Staleness"), "no staleness, no chart");
        assert!(!page.contains("http"), "nothing is fetched");
        // A rolled-out network's evaluation: a row per update step.
        let rows = (0..5).map(|k| json!({"split": "valid", "update_step": k, "accuracy": 0.1 * k as f64})).collect();
        let page = render(&[Run { name: "r".into(), rows }], &[], None);
        let steps = page.split("<figcaption>Accuracy per update step").nth(1).expect("the steps chart");
        let points = steps.split("points=\"").nth(1).and_then(|s| s.split('"').next()).unwrap_or_default();
        assert_eq!(points.split(' ').count(), 5, "{points}");
    }
}
